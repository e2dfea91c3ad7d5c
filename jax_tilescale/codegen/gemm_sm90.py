"""Hopper lowering of `T.Pipelined` GEMM loops: TMA producer warpgroup, wgmma consumer warpgroups.

A kernel written the TileLang way,

    T.clear(C_f)
    for k in T.Pipelined(K // bk, num_stages=4):
        T.copy(A[by * bm, k * bk], A_s)        # global -> shared tiles
        T.copy(B[k * bk, bx * bn], B_s)
        T.gemm(A_s, B_s, C_f)                  # C_f: float32 fragment
    T.copy(C_f, C[by * bm, bx * bn])

is lowered, when `plan_with_reasons` finds every condition below, to the structure of a CUTLASS
"warp-specialised" mainloop:

- the block gets one more warpgroup (128 threads) than the kernel asked for: the producer. One
  of its threads runs every planned loop's copies as bulk tensor copies (TMA) into a ring of
  `num_stages` shared-memory stages, each completing on a "full" mbarrier; it waits on the
  stage's "empty" mbarrier before reusing it;
- the kernel's own threads (the consumers, `threads / 128` warpgroups) run the kernel body; a
  planned loop becomes: wait for the stage, issue the tile's wgmma instructions asynchronously,
  keep one stage's products in flight, release the previous stage;
- C_f lives in registers, in wgmma's accumulator layout: `T.clear`, `T.fill` and `T.copy` of the
  whole fragment are lowered element by element over each thread's own accumulators.
- the kernel's last statement, the copy of the whole fragment into an fp16/bf16/fp32 output, is a TMA
  store (`TMA_STORE`): the consumers write their accumulators, converted, into the freed stage
  ring in the 128-byte-swizzled box layout, and one thread stores the boxes; the block's final
  wait is only for the boxes' shared-memory reads, not for their global writes;
- ragged edges (`Copy.clip_dims`): tiles loaded past the end of A or B need nothing, TMA fills the
  part of a box outside the tensor map's dimensions with zeros (and still counts the whole box's
  bytes on the mbarrier); the fragment's copies to and from a clipped window compare each
  element's row and column with the room left in the buffer (`gemm_emit.fragment_store` / `fragment_load`).

The shared tiles take the layout the tensor cores and TMA share (128-byte swizzle, see
tilescale_sm90.cuh). The consumers synchronise with a named barrier over their own threads
(`bar.sync 1, threads`), never `__syncthreads`, which would wait for the producer.

Conditions (anything else takes the portable path of `compute.py`, and the generated source
says why in a comment): target sm_90; the kernel does not communicate; the loop is a top-level
`T.Pipelined` whose body is exactly two copies from 2-D kernel inputs into whole shared tiles and
one `T.gemm` of those tiles into a whole float32 fragment; fp16/bf16 tiles whose contiguous
dimension is a multiple of 64 and whose other dimension is at most 256; `threads` a multiple of
128 (at most 512) with the M tile a multiple of 64 x warpgroups; N at most 256; the fragment used
only by T.clear/T.fill/whole T.copy and the planned gemm; the tiles by nothing else.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..ir.evaluate import evaluate_array
from ..ir.expr import Var, VarKind
from ..ir.nodes import Buffer, BufferKind, Copy, KernelIR, Loop, walk_stmts
from .common import INDENT, c_string, indent
from .context import Ctx, Frame
from .expr_printer import WHERE_NAME, c_expr, var_name
from .gemm_emit import PAIR_TYPES, PairWalk, TensorCorePlan, acc_name
from .gemm_pattern import PlannedLoop, StagedTile, buffers_of, fragment_use_ok, match_gemm_step, whole
from .tile_ops import storage_type
from .wgmma import WGMMA_INPUT_TYPES, wgmma_name, wgmma_wrapper

WARPGROUP = 128
PRODUCER_REGS = 40  # the producer issues a few TMA instructions: it gives its registers to the consumers
REGISTER_FILE = 65536
ATOM_ELEMS = 64  # a 128-byte swizzle atom holds 64 16-bit elements per row
SMEM_ALIGN = 1024  # swizzled tiles start at 1024-byte boundaries (the swizzle phase is the row's)
TENSOR_MAP_FIELDS = 9  # per map in the handler's `tensor_maps` attribute (docs/calling_convention.md)
# CUtensorMapDataType of the element types TMA moves here.
_TMA_DTYPE = {"f16": 6, "bf16": 9}
# ... and of the outputs the epilogue stores with TMA.
_TMA_OUTPUT_DTYPE = {**{dt: _TMA_DTYPE[ptx] for dt, ptx in WGMMA_INPUT_TYPES.items()}, np.dtype(np.float32): 7}
_SWIZZLE_128B = 3


@dataclass(frozen=True)
class TensorMapSpec:
    """One 2-D tensor map the handler encodes per launch (cuTensorMapEncodeTiled)."""

    param_index: int  # the kernel buffer (args.buffers[i]) it describes
    dtype_code: int  # CUtensorMapDataType
    dims: tuple[int, int]  # contiguous dimension first
    row_stride_bytes: int
    box: tuple[int, int]  # contiguous dimension first

    def encode(self) -> list[int]:
        return [self.param_index, self.dtype_code, 2, *self.dims, self.row_stride_bytes, *self.box, _SWIZZLE_128B]


@dataclass(frozen=True)
class Operand(StagedTile):
    """A shared tile fed by TMA and read by wgmma: `rows` x `cols`, `cols` contiguous."""

    map_index: int

    @property
    def atoms(self) -> int:
        return self.cols // ATOM_ELEMS


@dataclass(frozen=True)
class GemmLoop(PlannedLoop):
    a: Operand
    b: Operand
    multicast: str | None = None  # "a" or "b": the tile both blocks of a cluster pair load together

    def full(self) -> str:
        return f"ts_full{self.index}"

    def empty(self) -> str:
        return f"ts_empty{self.index}"


@dataclass(frozen=True)
class TmaStore:
    """The fragment -> global copy that ends the kernel, done as TMA stores from shared memory."""

    map_index: int  # the output's tensor map: boxes of 64 columns x `rows`
    staging: Buffer  # a stage ring the planned loops have finished with
    rows: int
    cols: int
    pair: tuple[str, str]  # the packed two-element C type and its maker, from PAIR_TYPES
    elem_bytes: int  # 2 (fp16/bf16) or 4 (fp32): a box is 128 // elem_bytes columns wide


@dataclass
class Sm90Plan(TensorCorePlan):
    """What the Hopper lowering owns in one kernel: its loops, the register fragments they
    accumulate into (gemm_emit.TensorCorePlan lowers the fragments' other statements), and the
    warp-specialised frame around the kernel's statements."""

    loops: list[GemmLoop]
    consumers: int  # consumer warpgroups (the kernel's threads / 128)
    acc_slabs: dict[Buffer, int]  # accumulator fragment -> m64 slabs per consumer warpgroup
    acc_n: dict[Buffer, int]
    tensor_maps: list[TensorMapSpec]
    ptx_type: str
    cluster: int = 1  # blocks per cluster along grid x (2 when a loop multicasts a tile)
    stores: dict[Copy, TmaStore] = field(default_factory=dict)  # accumulator copies done by TMA store
    notes: list[str] = field(default_factory=list)
    arch: ClassVar[str] = "sm_90a"  # wgmma and setmaxnreg need the architecture-specific target
    # Before a load, the consumers' earlier writes of the source; a store needs no barrier.
    LOAD_SYNC: ClassVar = ("earlier writes of the source by other threads", None)

    # ---- facts for the layout and the kernel frame ----

    @property
    def user_threads(self) -> int:
        return self.consumers * WARPGROUP

    @property
    def consumer_regs(self) -> int:
        per_thread = (REGISTER_FILE - WARPGROUP * PRODUCER_REGS) // self.user_threads
        return min(240, per_thread // 8 * 8)

    @property
    def frame(self) -> Frame:
        """A producer warpgroup on top of the kernel's threads; `setmaxnreg` moves registers from it
        to the consumers."""
        return Frame(self.user_threads, WARPGROUP, PRODUCER_REGS, self.consumer_regs, self.cluster)

    def register_buffers(self) -> frozenset[Buffer]:
        return frozenset(self.acc_slabs)

    def barrier_words(self) -> int:
        return sum(2 * gl.stages for gl in self.loops)

    def tensor_map_fields(self) -> tuple[int, ...]:
        fields = tuple(v for spec in self.tensor_maps for v in spec.encode())
        assert len(fields) == TENSOR_MAP_FIELDS * len(self.tensor_maps)
        return fields

    # ---- code ----

    def device_headers(self) -> tuple[str, ...]:
        return ("tilescale_sm90.cuh",)

    def declarations(self) -> list[str]:
        """The wgmma wrappers the kernel calls, and the tensor maps' parameter type."""
        wanted = sorted({(gl.n, self._a_mn(gl), self._b_mn(gl)) for gl in self.loops})
        helpers = [wgmma_wrapper(n, self.ptx_type, a_mn, b_mn) for n, a_mn, b_mn in wanted]
        return [
            *"\n\n".join(helpers).splitlines(),
            "",
            "struct alignas(64) TsTensorMap { unsigned long long opaque[16]; };  // a CUtensorMap",
            f"struct TsTensorMaps {{ TsTensorMap m[{max(1, len(self.tensor_maps))}]; }};",
            "",
        ]

    def kernel_params(self) -> str:
        return ", const __grid_constant__ TsTensorMaps ts_maps"

    @staticmethod
    def _a_mn(gl: GemmLoop) -> bool:
        return gl.gemm.transpose_a

    @staticmethod
    def _b_mn(gl: GemmLoop) -> bool:
        return not gl.gemm.transpose_b

    def setup(self, ctx: Ctx) -> list[str]:
        """The loops' full and empty mbarriers, initialised before the block splits."""
        lines = [f"uint64_t* const ts_bars = reinterpret_cast<uint64_t*>(ts_smem + {ctx.layout.mbarrier_offset});"]
        word = 0
        for gl in self.loops:
            lines.append(f"uint64_t* const {gl.full()} = ts_bars + {word};")
            lines.append(f"uint64_t* const {gl.empty()} = ts_bars + {word + gl.stages};")
            word += 2 * gl.stages
        lines.append("if (threadIdx.x == 0) {")
        for gl in self.loops:
            lines.append(f"{INDENT}for (int ts_s = 0; ts_s < {gl.stages}; ++ts_s) {{")
            lines.append(f"{INDENT * 2}ts_mbar_init(&{gl.full()}[ts_s], 1);")
            releases = self.consumers * 4 * (2 if gl.multicast else 1)  # every consumer warp of the pair
            lines.append(f"{INDENT * 2}ts_mbar_init(&{gl.empty()}[ts_s], {releases});")
            lines.append(f"{INDENT}}}")
        # every thread of the block, the producer's too, meets here (not the consumers' barrier);
        # a cluster peer multicasts into our barriers: they must be initialised cluster-wide first
        meet = "ts_cluster_sync();" if self.cluster > 1 else "__syncthreads();"
        lines += [f"{INDENT}ts_mbar_init_fence();", "}", meet]
        return lines

    def producer(self, ctx: Ctx) -> list[str]:
        """The TMA thread's program: every planned loop's copies, in kernel order."""
        lines = [f"for (int ts_t = 0; ts_t < {len(self.tensor_maps)}; ++ts_t) ts_tma_prefetch_desc(&ts_maps.m[ts_t]);"]
        for gl in self.loops:
            i = var_name(gl.loop.var)
            s = f"ts_s{gl.index}"
            loads: list[str] = []
            for role, op in (("a", gl.a), ("b", gl.b)):
                y, x = (c_expr(e) for e in op.copy.src.starts[-2:])
                for atom in range(op.atoms):
                    dst = f"{ctx.pointers[op.buffer]} + {s} * {op.stage_bytes} + {atom * op.rows * 128}"
                    xa = x if atom == 0 else f"{x} + {atom * ATOM_ELEMS}"
                    where = f"&ts_maps.m[{op.map_index}], &{gl.full()}[{s}], (int32_t)({xa}), (int32_t)({y})"
                    if gl.multicast == role:  # the pair's blocks split the boxes, each sends to both
                        owner = atom % 2 if op.atoms > 1 else 0
                        loads.append(f"if (ts_crank == {owner}) ts_tma_load_2d_multicast({dst}, {where}, 0x3);")
                    else:
                        loads.append(f"ts_tma_load_2d({dst}, {where});")
            lines += [
                f"{{  // producer of the loop at {gl.loop.loc}",
                f"{INDENT}const char* const {WHERE_NAME} = {c_string(str(gl.loop.loc))}; (void){WHERE_NAME};",
                f"{INDENT}for (int64_t {i} = 0; {i} < {gl.loop.extent}; ++{i}) {{",
                f"{INDENT * 2}const int {s} = (int)({i} % {gl.stages});",
                f"{INDENT * 2}if ({i} >= {gl.stages}) "
                f"ts_mbar_wait(&{gl.empty()}[{s}], (uint32_t)((({i} / {gl.stages}) - 1) & 1));",
                f"{INDENT * 2}ts_mbar_arrive_expect_tx(&{gl.full()}[{s}], {gl.stage_bytes}u);",
                *indent(loads, 2),
                f"{INDENT}}}",
                "}",
            ]
        return lines

    def accumulators(self) -> list[str]:
        return [f"float {acc_name(b)}[{slabs}][{self.acc_n[b] // 2}];" for b, slabs in self.acc_slabs.items()]

    def pair_walk(self, buf: Buffer) -> PairWalk:
        """wgmma's m64nNk16 layout: slab `ts_m` of this warpgroup, 8-column group `ts_j`, half `ts_h`."""
        slabs = self.acc_slabs[buf]
        return PairWalk(
            (f"const int ts_wg = threadIdx.x / {WARPGROUP}, ts_warp = (threadIdx.x % {WARPGROUP}) / 32, "
             "ts_lane = threadIdx.x % 32;",
             "(void)ts_wg; (void)ts_warp; (void)ts_lane;"),
            ("ts_m", slabs), ("ts_j", self.acc_n[buf] // 8),
            (f"const int ts_row = (ts_wg * {slabs} + ts_m) * 64 + ts_warp * 16 + ts_lane / 4 + 8 * ts_h;",
             "const int ts_col = ts_j * 8 + (ts_lane % 4) * 2;"),
            lambda j: f"[ts_m][ts_j * 4 + ts_h * 2 + {j}]",
        )

    def store_lines(self, s: Copy, ctx: Ctx) -> list[str]:
        st = self.stores.get(s)
        return super().store_lines(s, ctx) if st is None else self._tma_store(s, st, ctx)

    def _tma_store(self, s: Copy, st: TmaStore, ctx: Ctx) -> list[str]:
        """Accumulators -> (converted) swizzled boxes in the freed stage ring -> TMA stores.

        The boxes take the operand tiles' layout: 128-byte rows (64 16-bit or 32 fp32 columns) per
        box, 16-byte chunk c of row r at chunk c ^ (r % 8), so each warp's 8 rows hit distinct banks.
        A pair's byte offset is (ts_t + hi) ^ lo: ts_t is the thread's part (its rows, its column
        within the 8-column group and its swizzle phase in bits 4-6), hi the unrolled loop's box,
        slab and half (multiples of 1024), lo the group's chunk (bits 4-6, disjoint from the
        thread's chunk bit for fp32); one add and one xor per store keeps the epilogue's registers
        low while 128 or more accumulators are live."""
        ctype, make = st.pair
        name = acc_name(s.src.buffer)
        slabs = self.acc_slabs[s.src.buffer]
        box, box_cols = st.rows * 128, 128 // st.elem_bytes
        groups = box_cols // 8  # 8-column groups per box
        y, x = (c_expr(e) for e in s.dst.starts[-2:])
        stores = [f"ts_tma_store_2d(&ts_maps.m[{st.map_index}], ts_box + {atom * box}, "
                  f"(int32_t)({x}) + {atom * box_cols}, (int32_t)({y}));" for atom in range(st.cols // box_cols)]
        at = (f"(ts_t + (ts_j / {groups}) * {box}u + ts_m * {64 * 128}u + ts_h * {8 * 128}u) "
              f"^ ((ts_j % {groups}) * {8 * st.elem_bytes}u)")
        pair_bytes = 2 * st.elem_bytes
        if 4 * pair_bytes <= 16:  # a quad's pairs share one chunk
            thread = f"ts_r * 128u + (ts_r % 8) * 16u + (threadIdx.x % 4) * {pair_bytes}u;"
        else:
            thread = (f"ts_r * 128u + ((((threadIdx.x % 4) * {pair_bytes}u) / 16u) ^ (ts_r % 8)) * 16u "
                      f"+ ((threadIdx.x % 4) * {pair_bytes}u) % 16u;")
        return [
            *ctx.block_sync("every consumer's tensor-core reads of the ring are done"),
            f"char* const ts_box = reinterpret_cast<char*>({ctx.pointers[st.staging]});",
            f"const uint32_t ts_r = (threadIdx.x / {WARPGROUP}) * {slabs * 64} + (threadIdx.x % {WARPGROUP}) / 32 * 16 "
            "+ (threadIdx.x % 32) / 4;  // the thread's first row",
            f"const uint32_t ts_t = {thread}",
            *self.pair_walk(s.src.buffer).loops([
                f"*reinterpret_cast<{ctype}*>(ts_box + ({at})) =",
                f"{INDENT}{make}({name}[ts_m][ts_j * 4 + ts_h * 2], {name}[ts_m][ts_j * 4 + ts_h * 2 + 1]);",
            ]),
            "ts_fence_proxy_async();  // the writes above, visible to the bulk copies",
            *ctx.block_sync(),
            "if (threadIdx.x == 0) {  // TMA leaves out the parts of boxes past the output's edges",
            *indent(stores),
            f"{INDENT}ts_bulk_commit();",
            f"{INDENT}ts_bulk_wait_read();",
            "}",
        ]

    def loop_lines(self, gl: GemmLoop, ctx: Ctx) -> list[str]:  # type: ignore[override]
        """Wait for the stage, issue its wgmma asynchronously, keep one stage in flight, release the previous."""
        i = var_name(gl.loop.var)
        acc = acc_name(gl.acc)
        slabs = self.acc_slabs[gl.acc]
        a_mn, b_mn = self._a_mn(gl), self._b_mn(gl)
        mma = wgmma_name(gl.n, self.ptx_type, a_mn, b_mn)
        a, b = gl.a, gl.b
        descs: list[str] = []
        for kk in range(gl.k // 16):
            b_off = (kk * 16 * 128) if b_mn else ((kk * 16 // ATOM_ELEMS) * b.rows * 128 + (kk * 16 % ATOM_ELEMS) * 2)
            b_lbo = b.rows * 128 if b_mn else 16
            descs.append(f"const uint64_t ts_db{kk} = ts_wgmma_desc(ts_b_base + {b_off}u, {b_lbo}u, 1024u);")
            for m in range(slabs):
                slab = f"(ts_wg * {slabs} + {m})"
                if a_mn:  # A stored K x M: the slab is one 64-column atom
                    a_off = f"{slab} * {a.rows * 128}u + {kk * 16 * 128}u"
                    a_lbo = a.rows * 128
                else:
                    within = (kk * 16 // ATOM_ELEMS) * a.rows * 128 + (kk * 16 % ATOM_ELEMS) * 2
                    a_off = f"{slab} * {64 * 128}u + {within}u"
                    a_lbo = 16
                descs.append(f"const uint64_t ts_da{kk}_{m} = ts_wgmma_desc(ts_a_base + {a_off}, {a_lbo}u, 1024u);")
                scale = "0" if (gl.gemm.clear_accum and kk == 0) else "1"
                descs.append(f"{mma}({acc}[{m}], ts_da{kk}_{m}, ts_db{kk}, {scale});")
        fence = ["#pragma unroll", f"for (int ts_m = 0; ts_m < {slabs}; ++ts_m) ts_fence_regs({acc}[ts_m]);"]
        return [
            "const int ts_wg = threadIdx.x / 128, ts_lane = threadIdx.x % 32;",
            # a 32-bit counter: the consumers only derive the stage and the phase from it
            f"for (int {i} = 0; {i} < {gl.loop.extent}; ++{i}) {{",
            f"{INDENT}const int ts_s = (int)({i} % {gl.stages});",
            f"{INDENT}ts_mbar_wait(&{gl.full()}[ts_s], (uint32_t)(({i} / {gl.stages}) & 1));",
            f"{INDENT}const uint32_t ts_a_base = ts_smem_addr({ctx.pointers[a.buffer]} + ts_s * {a.stage_bytes});",
            f"{INDENT}const uint32_t ts_b_base = ts_smem_addr({ctx.pointers[b.buffer]} + ts_s * {b.stage_bytes});",
            *indent(fence, 1),
            f"{INDENT}ts_wgmma_fence();",
            *indent(descs, 1),
            f"{INDENT}ts_wgmma_commit();",
            *indent(fence, 1),
            f"{INDENT}ts_wgmma_wait<1>();  // the previous stage's products are done: release it",
            *indent(fence, 1),
            f"{INDENT}if ({i} > 0 && ts_lane == 0) {{",
            f"{INDENT * 2}ts_mbar_arrive(&{gl.empty()}[({i} - 1) % {gl.stages}]);",
            *([f"{INDENT * 2}ts_mbar_arrive_cluster(&{gl.empty()}[({i} - 1) % {gl.stages}], ts_crank ^ 1);"]
              if gl.multicast else []),
            f"{INDENT}}}",
            "}",
            "ts_wgmma_wait<0>();",
            *fence,
        ]


# ---- planning ------------------------------------------------------------------------------------


def _operand(copy: Copy, params: tuple[Buffer, ...], maps: list[TensorMapSpec], ptx: str) -> Operand | str:
    src, dst = copy.src, copy.dst
    buf = dst.buffer
    if not whole(dst) or len(buf.shape) != 2:
        return f"{copy.dst} is not a whole 2-D shared tile"
    if src.buffer.kind is not BufferKind.INPUT or len(src.buffer.shape) != 2:
        return f"the source {src} is not a 2-D kernel input"
    if src.buffer.dtype != buf.dtype:
        return "the copy converts the element type"
    rows, cols = buf.shape
    if cols % ATOM_ELEMS or rows > 256 or rows % 8:
        return (f"tile {buf.name} is {rows} x {cols}: its contiguous dimension must be a multiple of 64 "
                "and the other at most 256")
    g_rows, g_cols = src.buffer.shape
    row_bytes = g_cols * buf.dtype.itemsize
    if row_bytes % 16:
        return f"rows of {src.buffer.name} are {row_bytes} bytes, not a multiple of 16 (TMA)"
    spec = TensorMapSpec(params.index(src.buffer), _TMA_DTYPE[ptx], (g_cols, g_rows), row_bytes, (ATOM_ELEMS, rows))
    if spec not in maps:
        maps.append(spec)
    return Operand(buf, copy, rows, cols, maps.index(spec))


def _plan_loop(loop: Loop, index: int, kernel: KernelIR, maps: list[TensorMapSpec], consumers: int) -> GemmLoop | str:
    if loop.num_stages is None:
        return "not a T.Pipelined loop"
    step = match_gemm_step(loop, WGMMA_INPUT_TYPES, "wgmma",
                           lambda copy: _operand(copy, kernel.params, maps, WGMMA_INPUT_TYPES[copy.dst.buffer.dtype]))
    if isinstance(step, str):
        return step
    g, a, b, m, n, k = step
    if m % (64 * consumers):
        return f"M tile {m} is not a multiple of 64 x {consumers} consumer warpgroups"
    if n > 256 or n % 8:
        return f"N tile {n} is not a multiple of 8 up to 256"
    if k % 16:
        return f"K tile {k} is not a multiple of 16"
    return GemmLoop(loop, index, a, b, g, g.c.buffer, m, n, k, loop.num_stages)


def plan_with_reasons(kernel: KernelIR, arch: str) -> tuple[Sm90Plan | None, list[str]]:
    """The Hopper plan of `kernel` (None when no loop qualifies) and why each pipelined loop it
    leaves to the portable path does not qualify (the generated source's header prints them)."""
    reasons: list[str] = []
    if not arch.startswith("sm_90"):
        return None, [f"target {arch} is not sm_90"]
    stmts = list(walk_stmts(kernel.body))
    pipelined = [s for s in stmts if isinstance(s, Loop) and s.num_stages is not None]
    if not pipelined:
        return None, []
    if any(s.communicates for s in stmts):
        return None, ["the kernel communicates (the producer warpgroup would miss NVSHMEM's block-wide calls)"]
    if kernel.threads % WARPGROUP or kernel.threads > 4 * WARPGROUP:
        return None, [f"threads={kernel.threads} is not 128, 256, 384 or 512"]
    consumers = kernel.threads // WARPGROUP
    maps: list[TensorMapSpec] = []
    loops: list[GemmLoop] = []
    for loop in pipelined:
        if loop not in kernel.body:
            reasons.append(f"loop at {loop.loc}: not at the top level of the kernel")
            continue
        got = _plan_loop(loop, len(loops), kernel, maps, consumers)
        if isinstance(got, str):
            reasons.append(f"loop at {loop.loc}: {got}")
        else:
            loops.append(got)
    if not loops:
        return None, reasons
    # Every other use of the tiles and accumulators must be one the plan lowers.
    owned = {id(gl.loop) for gl in loops}
    inside = {id(s) for gl in loops for s in gl.loop.body}
    tiles = {op.buffer for gl in loops for op in (gl.a, gl.b)}
    accs = {gl.acc for gl in loops}
    for s in stmts:
        if id(s) in owned or id(s) in inside:
            continue
        touched = buffers_of(s)
        if touched & tiles:
            return None, [*reasons, f"{s.op_name} at {s.loc} uses a pipelined tile outside its loop"]
        if touched & accs and not fragment_use_ok(s, accs):
            return None, [*reasons, f"{s.op_name} at {s.loc} uses the accumulator other than clear/fill/whole copy"]
    loops = [_with_multicast(gl, kernel) for gl in loops]
    ptx = {WGMMA_INPUT_TYPES[gl.a.buffer.dtype] for gl in loops}
    if len(ptx) != 1:
        return None, [*reasons, "the pipelined loops mix fp16 and bf16"]
    acc_n = {gl.acc: gl.n for gl in loops}
    slabs = {gl.acc: gl.m // 64 // consumers for gl in loops}
    cluster = 2 if any(gl.multicast for gl in loops) else 1
    stores = _tma_stores(kernel, loops, maps)
    plan = Sm90Plan(loops, consumers, slabs, acc_n, maps, ptx.pop(), cluster, stores)
    return plan, reasons


# ---- the epilogue: the accumulator's store through shared memory and TMA ----------------------------

TMA_STORE = True  # False: every accumulator copy stores from registers (bench_gemm.py's "/direct" configs)


def _tma_stores(kernel: KernelIR, loops: list[GemmLoop], maps: list[TensorMapSpec]) -> dict[Copy, TmaStore]:
    """The kernel's last statement when it copies a whole accumulator into a 2-D fp16, bf16 or fp32
    output window and a stage ring of one of the loops filling it can hold the converted tile. Last, so
    that nothing after it reads the output or the ring (the blocks' exit only waits for the
    boxes' shared-memory reads) and every planned loop, whose producer writes the rings, is done."""
    if not TMA_STORE or not kernel.body:
        return {}
    s = kernel.body[-1]
    if not isinstance(s, Copy) or not whole(s.src):
        return {}
    feeding = [gl for gl in loops if gl.acc is s.src.buffer]
    dst = s.dst.buffer
    if not feeding or dst.kind is not BufferKind.OUTPUT or len(dst.shape) != 2 or dst.dtype not in _TMA_OUTPUT_DTYPE:
        return {}
    rows, cols = s.src.buffer.shape
    elem = dst.dtype.itemsize
    row_bytes = dst.shape[1] * elem
    pair = PAIR_TYPES.get(storage_type(dst.dtype, s.loc))
    if pair is None or cols % (128 // elem) or rows > 256 or row_bytes % 16 or s.dst.sizes != (rows, cols):
        return {}
    need = rows * cols * elem
    rings = [(op.stage_bytes * gl.stages, op.buffer) for gl in feeding for op in (gl.a, gl.b)]
    room, staging = max(rings, key=lambda r: r[0])
    if room < need:
        return {}
    spec = TensorMapSpec(kernel.params.index(dst), _TMA_OUTPUT_DTYPE[dst.dtype], (dst.shape[1], dst.shape[0]),
                         row_bytes, (128 // elem, rows))
    if spec not in maps:
        maps.append(spec)
    return {s: TmaStore(maps.index(spec), staging, rows, cols, pair, elem)}


# ---- clusters: which tile two neighbouring blocks can load once for both ----------------------------

MAX_CHECKED_POINTS = 1 << 23  # (block pairs x iterations) the sharing check evaluates at most
MULTICAST = False  # measured slower on H200 (benchmarks/NOTES.md); tests and gen_harness.py turn it on


def _pair_shares(copy: Copy, loop: Loop, grid: tuple[int, ...]) -> bool:
    """Whether blocks (2c, y, z) and (2c + 1, y, z) copy the same source tile at every iteration:
    checked by evaluating the tile's start on every such pair and iteration (exact, not a guess)."""
    gx, gy, gz = (*grid, 1, 1)[:3]
    if gx % 2 or (gx // 2) * gy * gz * loop.extent > MAX_CHECKED_POINTS:
        return False
    xs, ys, zs, ks = np.meshgrid(np.arange(0, gx, 2, dtype=np.int64), np.arange(gy, dtype=np.int64),
                                 np.arange(gz, dtype=np.int64), np.arange(loop.extent, dtype=np.int64),
                                 indexing="ij", sparse=True)
    pid = [Var(VarKind.PROGRAM_ID, a) for a in range(3)]
    even = {pid[0]: xs, pid[1]: ys, pid[2]: zs, loop.var: ks}
    odd = {**even, pid[0]: xs + 1}
    for start in copy.src.starts:
        a, b = evaluate_array(start, even), evaluate_array(start, odd)
        if a is None or b is None or not np.array_equal(*np.broadcast_arrays(a, b)):
            return False
    return True


def _with_multicast(gl: GemmLoop, kernel: KernelIR) -> GemmLoop:
    """The loop with the bigger of its tiles that a block pair shares multicast, if either is."""
    if not MULTICAST:
        return gl
    for role, op in sorted((("a", gl.a), ("b", gl.b)), key=lambda r: -r[1].stage_bytes):
        if _pair_shares(op.copy, gl.loop, kernel.grid):
            return dataclasses.replace(gl, multicast=role)
    return gl
