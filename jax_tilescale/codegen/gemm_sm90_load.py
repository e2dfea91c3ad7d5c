"""How the Hopper GEMM lowering's producer warpgroup fills the stage rings (`gemm_sm90`): what it
records of each operand tile, and the producer's program.

An operand tile is `rows` x `cols` elements, `cols` contiguous (as in its global source), stored
in a swizzled layout wgmma and TMA share (tilescale_sm90.cuh): the widest swizzle of 128, 64 or 32
bytes that divides a row's bytes (`swizzle_bytes`: 128 for the usual 64-column bf16 tiles, 64 for
B tiles of 32 columns more, 224 or 160 wide), `cols * itemsize / W` column atoms of `rows` x W
bytes. The producer fills it one of two ways:

- TMA (the fast way): one thread issues one `cp.async.bulk.tensor` box per atom, completing on
  the stage's "full" mbarrier with its bytes. The tensor map needs the source's rows to be a
  multiple of 16 bytes;
- thread copies, for a source whose rows are not (A of 1000 x 777 bf16: 1554-byte rows): the
  producer warpgroup's 128 threads read the tile element by element (zero past the source's
  edges, as TMA would), write 16-byte chunks into the swizzled layout, make them visible to the
  tensor cores (`fence.proxy.async`) and each arrive on the full barrier. Slower than TMA, but a
  tile configuration then works at every shape.

A loop with a thread-copied operand has its full barriers expect the 128 producer threads'
arrivals (and the TMA bytes through `mbarrier.expect_tx` by the issuing thread); without one the
program is exactly the single-thread TMA program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir.nodes import Buffer, BufferKind, Copy, Fill, Loop
from .common import INDENT, c_string, indent
from .context import Ctx
from .expr_printer import WHERE_NAME, c_expr, var_name, with_loop_var
from .gemm_pattern import PlannedLoop, StagedTile, whole
from .gemm_sm90_probe import box_coordinate

WARPGROUP = 128
TENSOR_MAP_FIELDS = 9  # per map in the handler's `tensor_maps` attribute (docs/calling_convention.md)
# Swizzle width in bytes -> (CUtensorMapSwizzle of the tensor map, the layout code of a wgmma descriptor's
# bits 62-63): the one table both sides of a swizzled tile read (TMA writes it, wgmma reads it).
SWIZZLES = {128: (3, 1), 64: (2, 2), 32: (1, 3)}
SWIZZLE_REPEAT_ROWS = 8  # every swizzle pattern repeats after 8 rows (8 x W bytes)
WIDEST_SWIZZLE = 128  # the widest swizzle a tile may take: a switch for measurements (bench_gemm's /sw64)
TMA_ROW_ALIGN = 16  # cuTensorMapEncodeTiled: global strides are multiples of 16 bytes
PRODUCER_REGS_NOTE = "few registers (setmaxnreg)"


def swizzle_bytes(row_bytes: int) -> int | None:
    """The widest swizzle (bytes) whose atoms tile a row of `row_bytes` bytes, None when none does (the row
    is not a multiple of 32 bytes). Wider is better: fewer, larger TMA boxes per tile."""
    return next((w for w in SWIZZLES if w <= WIDEST_SWIZZLE and row_bytes % w == 0), None)


@dataclass(frozen=True)
class TensorMapSpec:
    """One 2-D tensor map the handler encodes per launch (cuTensorMapEncodeTiled)."""

    param_index: int  # the kernel buffer (args.buffers[i]) it describes
    dtype_code: int  # CUtensorMapDataType
    dims: tuple[int, int]  # contiguous dimension first
    row_stride_bytes: int
    box: tuple[int, int]  # contiguous dimension first
    swizzle: int = 128  # bytes: a key of SWIZZLES, the box's rows are this wide

    def encode(self) -> list[int]:
        return [self.param_index, self.dtype_code, 2, *self.dims, self.row_stride_bytes, *self.box,
                SWIZZLES[self.swizzle][0]]


@dataclass(frozen=True)
class Operand(StagedTile):
    """A shared tile read by wgmma: `rows` x `cols`, `cols` contiguous, filled through tensor map
    `map_index`, or by the producer's threads when None."""

    map_index: int | None

    @property
    def swizzle(self) -> int:
        """The layout's swizzle width in bytes (plan_operand takes only tiles that have one)."""
        width = swizzle_bytes(self.cols * self.buffer.dtype.itemsize)
        assert width is not None, self
        return width

    @property
    def atom_cols(self) -> int:
        """Elements of one atom row."""
        return self.swizzle // self.buffer.dtype.itemsize

    @property
    def atoms(self) -> int:
        return self.cols // self.atom_cols

    @property
    def by_threads(self) -> bool:
        return self.map_index is None


@dataclass(frozen=True)
class GemmLoop(PlannedLoop):
    a: Operand
    b: Operand
    multicast: str | None = None  # "a" or "b": the tile both blocks of a cluster pair load together
    nest: tuple = ()  # the serial loops and ifs around it (gemm_sm90_nest), () at the top level
    folded_clear: Fill | None = None  # its accumulator's T.clear, folded into the first stage (gemm_sm90)

    def full(self) -> str:
        return f"ts_full{self.index}"

    def empty(self) -> str:
        return f"ts_empty{self.index}"

    @property
    def by_threads(self) -> bool:
        """Whether the producer's threads copy one of its tiles (its full barriers count them)."""
        return self.a.by_threads or self.b.by_threads

    @property
    def tma_bytes(self) -> int:
        return sum(op.stage_bytes for op in (self.a, self.b) if not op.by_threads)

    def full_arrivals(self) -> int:
        return WARPGROUP if self.by_threads else 1


def plan_operand(copy: Copy, params: tuple[Buffer, ...], maps: list[TensorMapSpec], tma_dtype: int,
                 landing: frozenset[Buffer] = frozenset()) -> Operand | str:
    """The operand a loop's copy fills (a tensor map added to `maps` when TMA can load it), or why
    the Hopper plan cannot take the copy. Its source is a kernel input, or one of the `landing`
    outputs: outputs that peers write and the kernel reads after waiting for them (gemm_sm90_comm)."""
    src, dst = copy.src, copy.dst
    buf = dst.buffer
    if not whole(dst) or len(buf.shape) != 2:
        return f"{copy.dst} is not a whole 2-D shared tile"
    if (src.buffer.kind is not BufferKind.INPUT and src.buffer not in landing) or len(src.buffer.shape) != 2:
        what = "a 2-D kernel input or an output that peers write" if landing else "a 2-D kernel input"
        return f"the source {src} is not {what}"
    if src.buffer.dtype != buf.dtype:
        return "the copy converts the element type"
    rows, cols = buf.shape
    width = swizzle_bytes(cols * buf.dtype.itemsize)
    if width is None or rows > 256 or rows % SWIZZLE_REPEAT_ROWS:
        return (f"tile {buf.name} is {rows} x {cols}: its contiguous dimension must be a multiple of "
                f"{min(SWIZZLES) // buf.dtype.itemsize} and the other a multiple of 8 up to 256")
    g_rows, g_cols = src.buffer.shape
    row_bytes = g_cols * buf.dtype.itemsize
    if row_bytes % TMA_ROW_ALIGN:  # no tensor map: the producer's threads copy it
        return Operand(buf, copy, rows, cols, None)
    spec = TensorMapSpec(params.index(src.buffer), tma_dtype, (g_cols, g_rows), row_bytes,
                         (width // buf.dtype.itemsize, rows), width)
    if spec not in maps:
        maps.append(spec)
    return Operand(buf, copy, rows, cols, maps.index(spec))


# ---- the producer's program ---------------------------------------------------------------------


def producer_lines(loops: list[GemmLoop], map_count: int, user_threads: int, ctx: Ctx,
                   arrange: Callable[[Callable[[Loop], list[str] | None]], list[str]] | None = None,
                   drawer: list[str] | None = None) -> list[str]:
    """The producer warpgroup's program: every planned loop's copies, in kernel order, or as
    `arrange(program)` orders them (gemm_sm90_comm: inside the `if`s that hold the loops;
    `program(loop)` is a loop's copies, None for a loop the plan did not take). Without a
    thread-copied tile only its first thread runs it (TMA); with one, all its threads run it and
    the first also issues the boxes (`ts_ptid`: the thread's rank in the producer warpgroup). `drawer`: a tile
    queue's drawing thread (gemm_sm90_queue), the first thread of the producer's second warp, where only the first
    thread issues (with thread copies the issuer draws itself)."""
    threads = any(gl.by_threads for gl in loops)
    issuer = "ts_ptid == 0" if threads else None
    by_loop = {id(gl.loop): gl for gl in loops}

    def program(loop: Loop) -> list[str] | None:
        gl = by_loop.get(id(loop))
        return None if gl is None else _loop_program(gl, ctx, issuer=issuer)

    if arrange is not None:  # a communicating kernel's regions (gemm_sm90_comm)
        programs = arrange(program)
    else:  # each loop's program, inside its tile loops where it has them (gemm_sm90_nest)
        programs = [line for gl in loops for line in _nested(gl, _loop_program(gl, ctx, issuer=issuer), ctx, issuer)]
    prefetch = f"for (int ts_t = 0; ts_t < {map_count}; ++ts_t) ts_tma_prefetch_desc(&ts_maps.m[ts_t]);"
    if not threads:
        draws = [f"}} else if (threadIdx.x == {user_threads + 32}) {{", *indent(drawer)] if drawer else []
        return [f"if (threadIdx.x == {user_threads}) {{", *indent([prefetch, *programs]), *draws, "}"]
    lines = [f"const int ts_ptid = (int)threadIdx.x - {user_threads};"]
    if map_count:
        lines.append(f"if (ts_ptid == 0) {prefetch}")
    return lines + programs


def _nested(gl: GemmLoop, program: list[str], ctx: Ctx, issuer: str | None) -> list[str]:
    """A nested loop's program inside the loops and ifs around it (gemm_sm90_nest)."""
    if not gl.nest:
        return program
    from .gemm_sm90_nest import producer_skeleton  # the nest module builds on this one

    return producer_skeleton(gl.nest, program, gl.index, gl.loop.extent, ctx, issuer)


def iteration(gl: GemmLoop, i: str) -> str:
    """The C count of iteration `i` of `gl` over the whole kernel, from which its stage and phase
    follow: `i` itself at the top level; inside a tile loop, the runs before plus `i`."""
    return f"({'ts_it' + str(gl.index)} + {i})" if gl.nest else i


def _loop_program(gl: GemmLoop, ctx: Ctx, issuer: str | None) -> list[str]:
    """One loop's copies. `issuer`: None when one thread runs the program, else the condition of
    the thread that issues the TMA boxes."""
    i = var_name(gl.loop.var)
    it = iteration(gl, i)
    s = f"ts_s{gl.index}"
    boxes: list[str] = []
    for role, op in (("a", gl.a), ("b", gl.b)):
        if not op.by_threads:
            boxes += _tma_boxes(gl, role, op, s, ctx)
    wait = (f"if ({it} >= {gl.stages}) "
            f"ts_mbar_wait(&{gl.empty()}[{s}], (uint32_t)((({it} / {gl.stages}) - 1) & 1));")
    if issuer is None or not gl.by_threads:
        issue = [f"ts_mbar_arrive_expect_tx(&{gl.full()}[{s}], {gl.stage_bytes}u);", *boxes]
        step = [wait, *issue] if issuer is None else [wait, f"if ({issuer}) {{", *indent(issue), "}"]
    else:
        step = [wait]
        if boxes:
            step += [f"if ({issuer}) {{", f"{INDENT}ts_mbar_expect_tx(&{gl.full()}[{s}], {gl.tma_bytes}u);",
                     *indent(boxes), "}"]
        for op in (gl.a, gl.b):
            if op.by_threads:
                step += _thread_copy(op, s, ctx)
        step += ["ts_fence_proxy_async();  // the chunks above, visible to the tensor cores",
                 f"ts_mbar_arrive(&{gl.full()}[{s}]);"]
    return [
        f"{{  // producer of the loop at {gl.loop.loc}",
        f"{INDENT}const char* const {WHERE_NAME} = {c_string(str(gl.loop.loc))}; (void){WHERE_NAME};",
        f"{INDENT}for (int64_t {i} = 0; {i} < {gl.loop.extent}; ++{i}) {{",
        f"{INDENT * 2}const int {s} = (int)({it} % {gl.stages});",
        *indent(step, 2),
        f"{INDENT}}}",
        "}",
    ]


# The operands' TMA boxes loaded at L2's evict_last priority (bench_gemm's `/oplast`, `/alast` for A's only; not the
# multicast boxes): at 16384 x 8192 x 1024 A and B (48 MiB) about fill the L2 that C's 256 MiB stream through
# (benchmarks/NOTES.md, forty-fifth session)
OPERANDS_EVICT_LAST: bool | str = False  # True: both operands; "a" or "b": that one
# In a tile loop (persistent kernels), each A box loaded at k-step i also brought into L2 for the tile this many
# iterations of the tile loop ahead, at the same k-step (bench_gemm's `/pfaN`; 0: none): A's tile rows reach L2 a
# tile's time before their loads, where at 16384 x 8192 x 1024 A's misses are what the loop waits for
# (benchmarks/NOTES.md, forty-fifth and forty-sixth sessions)
A_PREFETCH_AHEAD = 0


def _tma_boxes(gl: GemmLoop, role: str, op: Operand, s: str, ctx: Ctx) -> list[str]:
    y, x = (box_coordinate(c_expr(e), gl.loop.var, role) for e in op.copy.src.starts[-2:])
    ahead = _prefetch_row(gl, role, y)
    out = []
    for a in range(op.atoms):
        dst = f"{ctx.pointers[op.buffer]} + {s} * {op.stage_bytes} + {a * op.rows * op.swizzle}"
        xa = x if a == 0 else f"{x} + {a * op.atom_cols}"
        where = f"&ts_maps.m[{op.map_index}], &{gl.full()}[{s}], (int32_t)({xa}), (int32_t)({y})"
        if gl.multicast == role:  # the pair's blocks split the boxes, each sends to both; the split turns
            # with the stage, so that over two k-steps both blocks issue as many (an odd number: uneven)
            owner = f"(({a} + {s}) & 1)"
            out.append(f"if (ts_crank == {owner}) ts_tma_load_2d_multicast({dst}, {where}, 0x3);")
        elif OPERANDS_EVICT_LAST is True or OPERANDS_EVICT_LAST == role:
            out.append(f"ts_tma_load_2d_hint({dst}, {where}, ts_l2_evict_last());")
        else:
            out.append(f"ts_tma_load_2d({dst}, {where});")
        if ahead is not None:
            out.append(f"ts_tma_prefetch_2d(&ts_maps.m[{op.map_index}], (int32_t)({xa}), (int32_t)({ahead}));")
    return out


def _prefetch_row(gl: GemmLoop, role: str, y: str) -> str | None:
    """A's box row `y` (C text) A_PREFETCH_AHEAD iterations of the enclosing tile loop later, or None where nothing
    is prefetched (off, B, no tile loop, or a row that does not depend on the tile loop's variable)."""
    loops = [s for s in gl.nest if isinstance(s, Loop)]
    if not A_PREFETCH_AHEAD or role != "a" or gl.multicast == role or not loops:
        return None
    tile = loops[0].var
    ahead = with_loop_var(y, tile, f"{var_name(tile)} + {A_PREFETCH_AHEAD}")
    return None if ahead == y else ahead


def _thread_copy(op: Operand, s: str, ctx: Ctx) -> list[str]:
    """The producer's 128 threads copy `op`'s tile of this stage: 16-byte chunks of the swizzled
    layout, each read element by element from the source (zero past its edges)."""
    src = op.copy.src
    g_rows, g_cols = src.buffer.shape
    item = op.buffer.dtype.itemsize
    per_row = op.cols * item // 16  # chunks per tile row
    y, x = (c_expr(e) for e in src.starts[-2:])
    base = f"reinterpret_cast<const unsigned char*>({ctx.pointers[src.buffer]})"
    return [
        f"{{  // {op.buffer.name} <- {src.buffer.name}: rows of {g_cols * item} bytes, no tensor map",
        f"{INDENT}const int64_t ts_y = {y}, ts_x = {x};",
        f"{INDENT}unsigned char* const ts_tile = {ctx.pointers[op.buffer]} + {s} * {op.stage_bytes};",
        f"{INDENT}#pragma unroll 1  // the producer runs on {PRODUCER_REGS_NOTE}",
        f"{INDENT}for (int ts_c = ts_ptid; ts_c < {op.rows * per_row}; ts_c += {WARPGROUP}) {{",
        f"{INDENT * 2}ts_swizzled_chunk_from_global<{item}, {op.swizzle}>(ts_tile, (uint32_t)(ts_c / {per_row}), "
        f"(uint32_t)(ts_c % {per_row}), {op.rows}u, {base}, ts_y + ts_c / {per_row}, "
        f"ts_x + (ts_c % {per_row}) * {16 // item}, {g_rows}, {g_cols});",
        f"{INDENT}}}",
        "}",
    ]
