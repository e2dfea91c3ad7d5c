"""The Hopper GEMM lowering's epilogue (`gemm_sm90`): the kernel's last statement, a copy of a
whole register accumulator into an fp16/bf16/fp32 output, done through shared memory and TMA.

The consumers write their accumulators, converted, into a stage ring the planned loops have finished
with, in the swizzled box layout of the operand tiles (boxes of 128-byte rows, or 64 or 32 where the
tile's rows are not a multiple of 128 bytes: gemm_sm90_load.swizzle_bytes), and one thread stores
the boxes with `cp.async.bulk.tensor` (which clips at the output's edges); the block's final wait is
only for the boxes' shared-memory reads (+4% at 8192^3 against per-thread stores,
benchmarks/NOTES.md).
A tile loop's epilogue (gemm_sm90_nest) has a staging tile of its own beside the rings; where a whole
one does not fit, as many boxes as do, and the tile's boxes go out in rounds through them
(`_round_lines`): 4 stages instead of 3 at 128x256 and 128x192 (+8% at 128x192, benchmarks/NOTES.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, BufferKind, Copy
from .common import INDENT, indent
from .context import Ctx
from .expr_printer import c_expr
from .gemm_emit import PAIR_TYPES, PairWalk, acc_name
from .gemm_pattern import whole
from .gemm_sm90_load import SWIZZLE_REPEAT_ROWS, WARPGROUP, GemmLoop, TensorMapSpec, swizzle_bytes
from .gemm_sm90_nest import counter, last_statement
from .gemm_sm90_pingpong import WARPGROUP_BARRIER
from .gemm_sm90_probe import output_store
from .tile_ops import storage_type
from .wgmma import TMA_DTYPE

# The epilogue's TMA stores at L2's evict_first priority (bench_gemm's `/cfirst`): the output streams through L2 once
# and is not read again by the kernel, while the operands' rows are (benchmarks/NOTES.md, forty-fifth session)
OUTPUT_EVICT_FIRST = False


def tma_store_line(map_index: int, src: str, x: str, y: str) -> str:
    """One TMA store statement of a box at shared address `src` to the output's (x, y) (C expressions), at L2's
    evict_first priority where OUTPUT_EVICT_FIRST is on (gemm_sm90_probe.output_store may leave it out)."""
    call, hint = ("ts_tma_store_2d_hint", ", ts_l2_evict_first()") if OUTPUT_EVICT_FIRST else ("ts_tma_store_2d", "")
    return output_store(f"{call}(&ts_maps.m[{map_index}], {src}, {x}, {y}{hint});")


# CUtensorMapDataType of the outputs the epilogue stores with TMA.
TMA_OUTPUT_DTYPE = {dt: code for dt, code in TMA_DTYPE.items() if dt.itemsize == 2} | {np.dtype(np.float32): 7}


@dataclass(frozen=True)
class TmaStore:
    """The fragment -> global copy that ends the kernel, done as TMA stores from shared memory."""

    map_index: int  # the output's tensor map: boxes of `swizzle` bytes' columns x `rows`
    staging: Buffer  # a stage ring the planned loops have finished with
    rows: int
    cols: int
    pair: tuple[str, str]  # the packed two-element C type and its maker, from PAIR_TYPES
    elem_bytes: int  # 2 (fp16/bf16) or 4 (fp32): a box is swizzle // elem_bytes columns wide
    # Bytes past the start of `staging` where the boxes go: 0 for the freed ring itself; the ring's
    # size for a tile loop's epilogue, which has a staging tile of its own after the ring
    # (the producer is already refilling the ring for the next tile: gemm_sm90_nest).
    offset: int = 0
    copies: int = 1  # staging tiles, one per consumer warpgroup in ping-pong (gemm_sm90_pingpong)
    # The copy is transposed (Copy.transpose): the fragment's element (r, c) is the tile's (c, r); `rows` and `cols`
    # are the output tile's. Whole staging tiles only (no rounds, no borrowed stages).
    transposed: bool = False
    # Boxes in a staging tile that holds only part of the output tile (0: the whole tile): the boxes
    # then go out in rounds through this ring of box slots (`_round_lines`), which leaves room for a
    # pipeline stage more (benchmarks/NOTES.md: 128x192 tiles 3 -> 4 stages, +8%).
    slots: int = 0
    # True: the slots are the A tiles of the loop's last `slots` stages (plan_borrowed_store), found at
    # run time from the loop's count `ring_counter`, its `ring_stages` stages of `stage_bytes`.
    borrowed: bool = False
    ring_counter: str = ""
    ring_stages: int = 0
    stage_bytes: int = 0

    @property
    def in_flight(self) -> bool:
        """A tile loop's epilogue: its stores stay in flight while the next tile's products run."""
        return bool(self.offset or self.borrowed)

    @property
    def tile_bytes(self) -> int:
        return self.rows * self.cols * self.elem_bytes

    @property
    def swizzle(self) -> int:
        """Bytes of a box row: the widest swizzle that divides the tile's rows (_storable checked one does)."""
        width = swizzle_bytes(self.cols * self.elem_bytes)
        assert width is not None, self
        return width

    @property
    def box_cols(self) -> int:
        return self.swizzle // self.elem_bytes

    @property
    def box_bytes(self) -> int:  # a box: `rows` rows of `swizzle` bytes
        return self.rows * self.swizzle

    @property
    def boxes(self) -> int:
        return self.tile_bytes // self.box_bytes

    @property
    def staged_bytes(self) -> int:
        """Bytes of one staging tile (of `copies`)."""
        return self.slots * self.box_bytes if self.slots else self.tile_bytes


def plan_tma_store(kernel: KernelIR, loops: list[GemmLoop], maps: list[TensorMapSpec]) -> dict[Copy, TmaStore]:
    """The kernel's last statement when it copies a whole accumulator into a 2-D fp16, bf16 or fp32
    output window and a stage ring of one of the loops filling it can hold the converted tile. Last, so
    that nothing after it reads the output or the ring (the blocks' exit only waits for the
    boxes' shared-memory reads) and every planned loop, whose producer writes the rings, is done."""
    if not kernel.body or not isinstance(kernel.body[-1], Copy):
        return {}
    s = kernel.body[-1]
    feeding = [gl for gl in loops if gl.acc is s.src.buffer and not gl.nest]
    got = _storable(s)
    if not feeding or got is None:
        return {}
    rows, cols, elem, pair = got
    rings = [(op.stage_bytes * gl.stages, op.buffer) for gl in feeding for op in (gl.a, gl.b)]
    room, staging = max(rings, key=lambda r: r[0])
    if room < rows * cols * elem:
        return {}
    width = swizzle_bytes(cols * elem)
    return {s: TmaStore(_output_map(kernel, s.dst.buffer, maps, rows, width), staging, rows, cols, pair, elem,
                        transposed=s.transpose)}


def _storable(s: Copy) -> tuple | None:
    """(rows, cols, element bytes, pair) when the TMA epilogue can store the whole-fragment copy `s`."""
    if not whole(s.src):
        return None
    dst = s.dst.buffer
    if dst.kind is not BufferKind.OUTPUT or len(dst.shape) != 2 or dst.dtype not in TMA_OUTPUT_DTYPE:
        return None
    rows, cols = s.src.buffer.shape[::-1] if s.transpose else s.src.buffer.shape  # the output tile's
    elem = dst.dtype.itemsize
    pair = PAIR_TYPES.get(storage_type(dst.dtype, s.loc))
    if (pair is None or swizzle_bytes(cols * elem) is None or rows > 256 or rows % SWIZZLE_REPEAT_ROWS
            or dst.shape[1] * elem % 16 or s.dst.sizes != (rows, cols)):
        return None
    return rows, cols, elem, pair


def _output_map(kernel: KernelIR, dst: Buffer, maps: list[TensorMapSpec], rows: int, width: int) -> int:
    """The output's tensor map: boxes of `rows` rows of `width` bytes, in that swizzle."""
    elem = dst.dtype.itemsize
    spec = TensorMapSpec(kernel.params.index(dst), TMA_OUTPUT_DTYPE[dst.dtype], (dst.shape[1], dst.shape[0]),
                         dst.shape[1] * elem, (width // elem, rows), width)
    if spec not in maps:
        maps.append(spec)
    return maps.index(spec)


def plan_nested_store(kernel: KernelIR, loops: list[GemmLoop], maps: list[TensorMapSpec],
                      room: int, copies: int = 1) -> dict[Copy, TmaStore]:
    """The epilogue of each tile loop (gemm_sm90_nest): the copy of the whole accumulator that
    ends the loop's innermost enclosing body, when a staging tile of its own fits in the `room`
    bytes of shared memory left beside the rings (`copies` of it: one per warpgroup in ping-pong). It goes right
    after the loop's A ring."""
    out: dict[Copy, TmaStore] = {}
    for gl in loops:
        got = _tile_epilogue(gl, loops)
        if got is None:
            continue
        s, (rows, cols, elem, pair) = got
        width = swizzle_bytes(cols * elem)
        slots = _box_slots(rows * width, cols * elem // width, room // copies)
        if slots is None or (slots and s.transpose):  # a transposed tile's boxes are written all at once
            continue
        st = TmaStore(_output_map(kernel, s.dst.buffer, maps, rows, width), gl.a.buffer, rows, cols, pair, elem,
                      offset=gl.a.stage_bytes * gl.stages, copies=copies, slots=slots, transposed=s.transpose)
        room -= copies * st.staged_bytes
        out[s] = st
    return out


def plan_borrowed_store(kernel: KernelIR, loops: list[GemmLoop], maps: list[TensorMapSpec],
                        room: int) -> dict[Copy, TmaStore]:
    """The epilogue of each cooperative tile loop staged through the A tiles of its own last stages
    (one box each) instead of a staging tile beside the rings: the consumers hold those stages past
    the loop, store through them, and release them to the producer at the next tile's first k-step,
    once the stores have read them; meanwhile the producer fills the other stages. Leaves at least two
    stages to the producer; not for multicast tiles (the peer releases too) or 32-bit outputs wider
    than a stage; and only where it gives more box slots than a staging tile in the `room` bytes beside
    the rings would (plan_nested_store): with as many, that tile costs the producer no stages
    (128x256/4 persistent measured level either way, benchmarks/NOTES.md 2026-12-04)."""
    out: dict[Copy, TmaStore] = {}
    for gl in loops:
        got = None if gl.multicast else _tile_epilogue(gl, loops)
        if got is None or got[0].transpose:  # borrowed slots go out in rounds, which a transposed tile does not
            continue
        s, (rows, cols, elem, pair) = got
        width = swizzle_bytes(cols * elem)
        boxes = cols * elem // width
        held = min(boxes, gl.stages - 2)
        if held < 1 or rows * width > gl.a.stage_bytes or gl.a.stage_bytes % 1024 or gl.loop.extent <= held:
            continue
        own = _box_slots(rows * width, boxes, room)
        if held <= (boxes if own == 0 else own or 0):
            continue
        out[s] = TmaStore(_output_map(kernel, s.dst.buffer, maps, rows, width), gl.a.buffer, rows, cols, pair, elem,
                          slots=held, borrowed=True, ring_counter=counter(gl.index), ring_stages=gl.stages,
                          stage_bytes=gl.a.stage_bytes)
    return out


def _tile_epilogue(gl: GemmLoop, loops: list[GemmLoop]) -> tuple[Copy, tuple] | None:
    """(the copy, _storable's (rows, cols, element bytes, pair)) when tile loop `gl` ends with a TMA-storable
    copy of its own accumulator (no other loop shares it)."""
    s = last_statement(gl.nest)
    if s is None or s.src.buffer is not gl.acc or any(o is not gl and o.acc is gl.acc for o in loops):
        return None
    got = _storable(s)
    return None if got is None else (s, got)


def _box_slots(box: int, boxes: int, room: int) -> int | None:
    """0 when the whole tile's `boxes` of `box` bytes fit in `room` bytes, else the most box slots that fit
    (the boxes then go out in rounds), None when not even one fits."""
    if boxes * box <= room:
        return 0
    slots = min(boxes - 1, room // box)
    return slots if slots >= 1 else None


def staging_bytes(stores: dict[Copy, TmaStore]) -> dict[Buffer, int]:
    """Bytes each ring grows by for the staging tiles of its own placed after it."""
    out: dict[Buffer, int] = {}
    for st in stores.values():
        if st.offset:
            out[st.staging] = out.get(st.staging, 0) + st.copies * st.staged_bytes
    return out


def tma_store_lines(s: Copy, st: TmaStore, slabs: int, walk: PairWalk, ctx: Ctx,
                    per_warpgroup: bool = False) -> list[str]:
    """The copy `s` of a register fragment (`slabs` m64 slabs per consumer warpgroup, visited by
    `walk`): accumulators -> (converted) swizzled boxes in the freed stage ring -> TMA stores.

    The boxes take the operand tiles' layout: rows of W = `st.swizzle` bytes (128: 64 16-bit or 32
    fp32 columns) per box, 16-byte chunk c of row r at chunk c ^ ((r * W / 128) % (W / 16)), so each
    warp's rows hit distinct banks. A pair's byte offset is (ts_t ^ lo) + hi: ts_t is the thread's part
    (its rows, its column within the 8-column group and its swizzle phase in bits 4 and up), lo the
    group's chunk (the same bits, disjoint from the thread's chunk bit for fp32), hi the unrolled loop's
    box, slab and half (multiples of W, an immediate offset of each store). The kernels stay at 168 registers
    without spills with the groups' eight `ts_t ^ lo` live (ptxas, tests/codegen)."""
    ctype, make = st.pair
    name = acc_name(s.src.buffer)
    y, x = (c_expr(e) for e in s.dst.starts[-2:])
    # A tile loop's epilogue (a staging tile of its own) leaves its stores in flight: the next tile's
    # wgmmas start at once, and the wait for the boxes' reads moves to before the next epilogue's
    # writes (the kernel's end: Sm90Plan.consumer_exit). The top-level form is the kernel's last
    # statement: it waits at once.
    in_flight = st.in_flight
    leader = store_leader(per_warpgroup)
    # Ping-pong (gemm_sm90_pingpong): each consumer warpgroup stores whole tiles of its own, through a
    # staging tile of its own, meeting only its own threads.
    if per_warpgroup:
        sync = [f"ts_named_sync({WARPGROUP_BARRIER} + threadIdx.x / {WARPGROUP}, {WARPGROUP});"
                "  // this warpgroup's threads"]
        box_at = f"{st.offset} + (threadIdx.x / {WARPGROUP}) * {st.staged_bytes}"
        first_row = "0"
    else:
        sync = ctx.block_sync()
        box_at = str(st.offset)
        first_row = f"(threadIdx.x / {WARPGROUP}) * {slabs * 64}"
    if st.borrowed:  # slot j: the A tile of the stage of the loop's (j + 1)-th last iteration
        box_at = "0"
    box_line = (f"char* const ts_box = reinterpret_cast<char*>({ctx.pointers[st.staging]}"
                f"{f' + {box_at}' if box_at != '0' else ''});")
    first_sync = sync if per_warpgroup else ctx.block_sync(
        "every consumer's tensor-core reads of the ring are done" + (", the staging tile is free" if in_flight else ""))
    if st.transposed:  # its own addressing (_transposed_lines): none of the pair stores' below
        element = storage_type(s.dst.buffer.dtype, s.loc)
        return [*before_stores(in_flight, leader), *first_sync, box_line, *_transposed_lines(st, walk, name, element),
                *_issue_lines(st, sync, leader, in_flight, x, y)]
    pair_bytes, w = 2 * st.elem_bytes, st.swizzle
    phase = f"((ts_r * {w}u / 128u) % {w // 16}u)"  # the row's swizzle phase (tilescale_sm90.cuh)
    if 4 * pair_bytes <= 16:  # a quad's pairs share one chunk
        thread = f"ts_r * {w}u + {phase} * 16u + (threadIdx.x % 4) * {pair_bytes}u;"
    else:
        thread = (f"ts_r * {w}u + ((((threadIdx.x % 4) * {pair_bytes}u) / 16u) ^ {phase}) * 16u "
                  f"+ ((threadIdx.x % 4) * {pair_bytes}u) % 16u;")
    head = [
        box_line,
        *(f"char* const ts_slot{j} = ts_box + (({st.ring_counter} - {j + 1}u) % {st.ring_stages}u) * "
          f"{st.stage_bytes}u;" for j in range(st.slots if st.borrowed else 0)),
        f"const uint32_t ts_r = {first_row} + (threadIdx.x % {WARPGROUP}) / 32 * 16 "
        "+ (threadIdx.x % 32) / 4;  // the thread's first row",
        f"const uint32_t ts_t = {thread}",
    ]
    if st.slots:
        assert in_flight, "rounds only for a staging tile of its own"
        assert sync, "rounds need a barrier between the leader's wait and every thread's writes"
        return head + _round_lines(st, walk, name, ctype, make, leader, sync, x, y)
    box, box_cols = st.box_bytes, st.box_cols
    groups = box_cols // 8  # 8-column groups per box
    # The xor first: `hi` (multiples of W) leaves the bits below W alone and `lo` lives in bits 4 to
    # log2(W) - 1, so (ts_t + hi) ^ lo == (ts_t ^ lo) + hi, and written this way nvcc keeps the group's few
    # `ts_t ^ lo` in registers and folds `hi` into each store's immediate offset (SASS: no address arithmetic
    # per store; with the add first it computed an add and an xor for every one of the 64 stores).
    assert box % (SWIZZLE_REPEAT_ROWS * w) == 0, box
    at = (f"(ts_t ^ ((ts_j % {groups}) * {8 * st.elem_bytes}u)) + (ts_j / {groups}) * {box}u + ts_m * {64 * w}u "
          f"+ ts_h * {8 * w}u")
    return [
        *before_stores(in_flight, leader),
        *first_sync,
        *head,
        *walk.loops([
            f"*reinterpret_cast<{ctype}*>(ts_box + ({at})) =",
            f"{INDENT}{make}({name}[ts_m][ts_j * 4 + ts_h * 2], {name}[ts_m][ts_j * 4 + ts_h * 2 + 1]);",
        ]),
        *_issue_lines(st, sync, leader, in_flight, x, y),
    ]


def before_stores(in_flight: bool, leader: str) -> list[str]:
    """A tile loop's epilogue waits, before writing its staging tile, for the previous tile's stores to have read it."""
    return ([f"if ({leader}) ts_bulk_wait_read();  // the previous tile's stores have read the staging tile"]
            if in_flight else [])


def _transposed_lines(st: TmaStore, walk: PairWalk, name: str, t: str) -> list[str]:
    """The fragment written transposed into the staging boxes: element (r, c) of the fragment is the tile's (c, r),
    box (r / box_cols), row c, column r % box_cols, its 16-byte chunk swizzled by the row as in tma_store_lines. One
    element a store: a pair's two elements are in neighbouring rows of the tile. Within a warp's store the 8 rows
    ts_row of a quad's column group are 8 neighbouring elements of one 16-byte chunk and its 4 columns ts_col 4 rows
    of the tile, whose chunks the swizzle puts on distinct banks (no conflicts). `t`: the output's element type."""
    eb, w, cols = st.elem_bytes, st.swizzle, st.box_cols
    offset = (f"(ts_dc / {cols}u) * {st.box_bytes}u + ts_dr * {w}u + "
              f"((((ts_dc % {cols}u) * {eb}u / 16u) ^ ((ts_dr * {w}u / 128u) % {w // 16}u)) * 16u) "
              f"+ ((ts_dc % {cols}u) * {eb}u) % 16u")
    # Both elements converted by one pair conversion, as the untransposed epilogue does: with one conversion an element
    # ptxas 13.0 serialized the loop's wgmma (C7514: "non wgmma instructions reading accumulator registers"), at
    # 16 x 4096 x 4096 and 64 x 6144 x 4096 (tests/codegen/test_ptxas_report.py)
    ctype, make = st.pair
    body = [*walk.position, "(void)ts_row; (void)ts_col;",
            f"const {ctype} ts_p = {make}({name}{walk.element(0)}, {name}{walk.element(1)});"]
    for j, half in ((0, "x"), (1, "y")):
        body += [f"{{  // element {j} of the pair: tile row ts_col + {j}, column ts_row",
                 f"{INDENT}const uint32_t ts_dr = ts_col + {j}, ts_dc = ts_row;",
                 f"{INDENT}*reinterpret_cast<{t}*>(ts_box + {offset}) = ts_p.{half};",
                 "}"]
    return [*walk.preamble, *walk.loops(body)]


def _issue_lines(st: TmaStore, sync: list[str], leader: str, in_flight: bool, x: str, y: str) -> list[str]:
    """After every thread's writes: the fence, the barrier, and the leader's TMA stores of the staging tile's boxes."""
    stores = [tma_store_line(st.map_index, f"ts_box + {atom * st.box_bytes}", f"(int32_t)({x}) + {atom * st.box_cols}",
                             f"(int32_t)({y})") for atom in range(st.boxes)]
    return [
        "ts_fence_proxy_async();  // the writes above, visible to the bulk copies",
        *sync,
        f"if ({leader}) {{  // TMA leaves out the parts of boxes past the output's edges",
        *indent(stores),
        f"{INDENT}ts_bulk_commit();",
        *([] if in_flight else [f"{INDENT}ts_bulk_wait_read();"]),
        "}",
    ]


def store_leader(per_warpgroup: bool) -> str:
    """The thread that issues the epilogue's TMA stores (and so owns their bulk groups and waits for
    them): the block's first consumer thread, or in ping-pong each warpgroup's first."""
    return f"threadIdx.x % {WARPGROUP} == 0" if per_warpgroup else "threadIdx.x == 0"

def _round_lines(st: TmaStore, walk: PairWalk, name: str, ctype: str, make: str, leader: str,
                 sync: list[str], x: str, y: str) -> list[str]:
    """The boxes stored one by one through a ring of `st.slots` box slots: box b takes slot b % slots,
    waits until the box that last used that slot (this tile's box b - slots, or the previous tile's
    last box of the slot) has been read, is written by every thread, and is stored by the leader in
    a bulk group of its own. Two barriers per box instead of two per tile, for a staging tile of
    `slots` boxes instead of `boxes`."""
    (m, slabs), (_, groups_all) = walk.outer, walk.inner
    box_cols = st.box_cols
    groups = box_cols // 8  # 8-column groups per box
    assert groups_all == st.boxes * groups, (groups_all, st.boxes, groups)
    lines: list[str] = []
    for b in range(st.boxes):
        slot = b % st.slots
        if b >= st.slots:
            later, whose = st.slots - 1, f"box {b - st.slots}"
        elif st.borrowed:  # a stage this tile's products just read: the previous tile's stores read others
            later, whose = None, ""
        else:  # the previous tile's last box in this slot, then that tile's later boxes and this tile's first b
            last = max(p for p in range(st.boxes) if p % st.slots == slot)
            later, whose = st.boxes - 1 - last + b, f"the previous tile's box {last}"
        # the slot's memory: a borrowed stage's A tile, or the slot's place in the staging tile
        base, offset = (f"ts_slot{slot}", 0) if st.borrowed else ("ts_box", slot * st.box_bytes)
        at = f"(ts_t ^ (ts_q * {8 * st.elem_bytes}u)) + {offset}u + {m} * {64 * st.swizzle}u + ts_h * {8 * st.swizzle}u"
        lines += [
            f"{{  // box {b} of {st.boxes}, through slot {slot} of {st.slots}",
            *([f"{INDENT}if ({leader}) ts_bulk_wait_read_all_but<{later}>();  // {whose} has read the slot"]
              if later is not None else []),
            *indent(sync),
            f"{INDENT}#pragma unroll",
            f"{INDENT}for (int {m} = 0; {m} < {slabs}; ++{m}) {{",
            f"{INDENT * 2}#pragma unroll",
            f"{INDENT * 2}for (int ts_q = 0; ts_q < {groups}; ++ts_q) {{",
            f"{INDENT * 3}#pragma unroll",
            f"{INDENT * 3}for (int ts_h = 0; ts_h < 2; ++ts_h) {{",
            f"{INDENT * 4}*reinterpret_cast<{ctype}*>({base} + ({at})) = {make}(",
            f"{INDENT * 5}{name}[{m}][{b * groups * 4} + ts_q * 4 + ts_h * 2], "
            f"{name}[{m}][{b * groups * 4} + ts_q * 4 + ts_h * 2 + 1]);",
            f"{INDENT * 3}}}",
            f"{INDENT * 2}}}",
            f"{INDENT}}}",
            f"{INDENT}ts_fence_proxy_async();  // the writes above, visible to the bulk copies",
            *indent(sync),
            f"{INDENT}if ({leader}) {{  // TMA leaves out the parts of boxes past the output's edges",
            INDENT * 2 + tma_store_line(st.map_index, base if st.borrowed else f"{base} + {offset}",
                                        f"(int32_t)({x}) + {b * box_cols}", f"(int32_t)({y})"),
            f"{INDENT * 2}ts_bulk_commit();",
            f"{INDENT}}}",
            "}",
        ]
    return lines
