"""mma.sync lowering of GEMM loops (sm_80 and later): cp.async ring, ldmatrix, mma.sync m16n8k16.

The same TileLang pattern as `gemm_sm90`,

    T.clear(C_f)
    for k in T.Pipelined(K // bk, num_stages=3):     # or T.serial (one stage, no overlap)
        T.copy(A[by * bm, k * bk], A_s)
        T.copy(B[k * bk, bx * bn], B_s)
        T.gemm(A_s, B_s, C_f)
    T.copy(C_f, C[by * bm, bx * bn])

is lowered, when `plan_with_reasons` finds the conditions below, with the kernel's own threads and
nothing but `__syncthreads` between them (no producer warps, no named barriers), so it stays legal
in kernels that also communicate through NVSHMEM (examples/allgather_gemm.py), which the Hopper
plan refuses, and on every GPU since Ampere:

- the loop's two tile copies become 16-byte `cp.async.cg` copies into a ring of `num_stages` copies
  of each tile; iteration i waits for its own commit group (`cp.async.wait_group stages-2`), meets
  the block at one `__syncthreads` (which also tells that every warp is done with the stage the
  next copies overwrite), issues the copies of iteration i + stages - 1, then computes;
- the tiles are row-major with an XOR swizzle of 16-byte chunks (tilescale_sm80.cuh), read by
  `ldmatrix.x4` (`.trans` where the tile is stored the other way round from what mma wants: A
  stored K x M, B stored K x N);
- the block tile is cut among the warps (`WarpTiling`: the grid of warps whose pieces are closest
  to square, e.g. 2 x 4 warps of 64 x 64 for 128 x 256 on 8 warps); each warp runs
  `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}` over its piece with the accumulators in
  registers (`float acc[mi][nj][4]`, thread t holding rows t/4 and t/4 + 8 of each 16 x 8 piece,
  columns 2 (t % 4) + {0, 1});
- `T.clear`/`T.fill` of the fragment and whole-fragment `T.copy` to or from global or shared
  memory (with a cast) run on each thread's own accumulators, two neighbours per access
  (bf162/half2/float2 stores where the destination is provably aligned).

Conditions (anything else takes the portable path; the reason goes to CudaModule.notes): sm_80 or
later; a `T.Pipelined` or `T.serial` loop, not under a thread-dependent `if`, whose body is two
copies into whole 2-D shared tiles and one whole-tile `T.gemm` of them into a 2-D float32 fragment;
fp16/bf16 tiles; sources in global memory (inputs, outputs, symmetric buffers) of the tile's type
(copied by 16-byte cp.async where their start and row stride are provably multiples of 8 elements, else
by plain loads, 8 elements a chunk: an odd K or N costs load speed, not the registers' accumulator);
a tile's contiguous dimension a multiple of 16 elements whose 16-byte chunks per row divide the
thread count; M, N, K multiples of 16 and a warp grid giving every warp a multiple of 16 x 16 with
at most 128 accumulators per thread (a 64 x 64 piece); the fragment used only by clear/fill/whole
copies and planned gemms, the tiles by their loop only; shared memory within the GPU's limit
(stages are dropped, down to 2, when the ring does not fit).

Ragged edges (`Copy.clip_dims`: a window that may end past its buffer): a tile's chunk is then
wholly inside or wholly outside (start and row stride are multiples of 8 elements), and one
outside is zero-filled (cp.async with src-size 0); an unaligned source's chunk may end part-way
in, and its elements past the end read zero; fragment stores outside the buffer are skipped,
fragment loads read zero there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import ClassVar

from ..ir.control import If, thread_dependent
from ..ir.expr import Expr, Var, affine_form, variables
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, BufferKind, Copy, Gemm, Loop, Stmt, walk_stmts
from .common import INDENT, WARP, indent
from .context import Ctx, Frame
from .expr_printer import c_expr, var_name
from .gemm_emit import PairWalk, TensorCorePlan, acc_name, stage_bytes
from .gemm_pattern import (
    PlannedLoop,
    StagedTile,
    buffers_of,
    epilogue_statements,
    fragment_use_ok,
    match_gemm_step,
    whole,
)
from .layout import shared_budget
from .regions import BASE_ALIGN, element_offset, row_major_strides
from .wgmma import WGMMA_INPUT_TYPES

MMA_INPUT_TYPES = {dt: p for dt, p in WGMMA_INPUT_TYPES.items() if p in ("f16", "bf16")}  # mma.sync m16n8k16: 16-bit
MAX_ACC_PER_THREAD = 128  # a 64 x 64 warp piece; more leaves too few registers for the operands
CHUNK = 16  # bytes per cp.async and per ldmatrix row
SMEM_ALIGN = 1024  # layout.py places staged tiles at 1024-byte offsets and reserves that much slack
# Dynamic shared memory a block may opt into, per compute capability (CUDA programming guide).
SMEM_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024,
              100: 227 * 1024, 103: 227 * 1024, 120: 99 * 1024, 121: 99 * 1024}
DEFAULT_SMEM_LIMIT = 99 * 1024  # an architecture not in the table: the smallest of the family


def arch_number(arch: str) -> int | None:
    """80 for sm_80, 90 for sm_90a; None when `arch` is not spelled sm_NN."""
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Tile(StagedTile):
    """A shared tile fed by cp.async and read by ldmatrix: `rows` x `cols` 16-bit elements, `cols`
    contiguous (as in its global source), swizzled in 16-byte chunks (module docstring)."""

    src_row_stride: int  # elements between the source's rows
    # the source's chunks are 16-byte aligned (start and row stride multiples of 8 elements): cp.async; else each
    # chunk is read by plain 2-byte loads and stored to shared at once (ts_copy16_u16), the ring unchanged
    aligned: bool = True

    @property
    def pitch(self) -> int:
        return self.cols * 2

    @property
    def chunks(self) -> int:  # per row
        return self.cols // 8

    @property
    def swizzle(self) -> int:
        """S: how many chunk positions the XOR permutes (8 rows of the tile cover all 32 banks)."""
        return 8 if self.pitch % 128 == 0 else 4 if self.pitch % 64 == 0 else 2

    @property
    def shift(self) -> int:
        return {8: 0, 4: 1, 2: 2}[self.swizzle]

    def xor_of_row(self, row: str) -> str:
        """C expression of the chunk XOR for a row (only row % 8 matters)."""
        shifted = row if self.shift == 0 else f"(({row}) >> {self.shift})"
        return f"({shifted} & {self.swizzle - 1})"


@dataclass(frozen=True)
class WarpTiling:
    """How a block's M x N accumulator is cut among its warps: `warps_m` x `warps_n` pieces of
    `tile_m` x `tile_n`, warp w at row w / warps_n, column w % warps_n."""

    warps_m: int
    warps_n: int
    tile_m: int
    tile_n: int

    @property
    def mi(self) -> int:  # m16 rows of mma per warp
        return self.tile_m // 16

    @property
    def nj(self) -> int:  # n8 columns of mma per warp
        return self.tile_n // 8


def warp_tiling(m: int, n: int, warps: int) -> WarpTiling | None:
    """The warp grid over an m x n tile whose pieces are multiples of 16 x 16, fit the register
    budget, and are closest to square (fewest ldmatrix per mma); None if there is none."""
    best: WarpTiling | None = None
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        if m % (16 * wm) or n % (16 * wn):
            continue
        t = WarpTiling(wm, wn, m // wm, n // wn)
        if t.tile_m * t.tile_n // WARP > MAX_ACC_PER_THREAD:
            continue
        if best is None or t.tile_m + t.tile_n < best.tile_m + best.tile_n:
            best = t
    return best


@dataclass(frozen=True)
class MmaLoop(PlannedLoop):
    a: Tile
    b: Tile
    ptx_type: str


@dataclass
class Sm80Plan(TensorCorePlan):
    """What the mma.sync lowering owns in one kernel: its loops, and the register fragments they
    accumulate into (gemm_emit.TensorCorePlan lowers the fragments' other statements)."""

    loops: list[MmaLoop]
    tilings: dict[Buffer, WarpTiling]  # accumulator fragment -> its warp tiling
    threads: int
    arch: str
    notes: list[str] = field(default_factory=list)  # rings shortened to fit in shared memory
    # Like every block-level copy, a fragment copy ends with the block meeting.
    STORE_SYNC: ClassVar = (None, "like every block-level copy: later statements may read what it wrote")
    LOAD_SYNC: ClassVar = (None, "every thread has read the source before anyone overwrites it")

    @property
    def frame(self) -> Frame:
        """The kernel's own threads, synchronised with `__syncthreads` (cp.async groups, no mbarriers)."""
        return Frame(self.threads)

    def register_buffers(self) -> frozenset[Buffer]:
        return frozenset(self.tilings)

    def device_headers(self) -> tuple[str, ...]:
        return ("tilescale_sm80.cuh",)

    def accumulators(self) -> list[str]:
        """Declarations at the kernel's top scope: the fragments live across the statements."""
        return [f"float {acc_name(b)}[{t.mi}][{t.nj}][4] = {{}};" for b, t in self.tilings.items()]

    def pair_walk(self, buf: Buffer) -> PairWalk:
        """mma.sync's m16n8 layout: warp w's piece, thread t of it holding rows t/4 (+8) of each
        16 x 8 block, columns 2 (t % 4) + {0, 1}."""
        t = self.tilings[buf]
        return PairWalk(
            ("const int ts_warp = threadIdx.x / 32, ts_lane = threadIdx.x % 32;",
             f"const int ts_row0 = (ts_warp / {t.warps_n}) * {t.tile_m} + ts_lane / 4;",
             f"const int ts_col0 = (ts_warp % {t.warps_n}) * {t.tile_n} + (ts_lane % 4) * 2;"),
            ("ts_mi", t.mi), ("ts_nj", t.nj),
            ("const int ts_row = ts_row0 + ts_mi * 16 + ts_h * 8, ts_col = ts_col0 + ts_nj * 8;",),
            lambda j: f"[ts_mi][ts_nj][ts_h * 2 + {j}]",
        )

    # ---- the planned loop ----

    def loop_lines(self, gl: MmaLoop, ctx: Ctx) -> list[str]:  # type: ignore[override]
        w = self.tilings[gl.acc]
        stages, ext = gl.stages, gl.loop.extent
        lines = [
            "const int ts_warp = threadIdx.x / 32, ts_lane = threadIdx.x % 32;",
            f"const int ts_wm = ts_warp / {w.warps_n}, ts_wn = ts_warp % {w.warps_n};",
            f"const uint32_t ts_sa = ts_smem_u32({ctx.pointers[gl.a.buffer]}), "
            f"ts_sb = ts_smem_u32({ctx.pointers[gl.b.buffer]});",
            "(void)ts_wm; (void)ts_wn;",
        ]
        v = var_name(gl.loop.var)
        loads = [f"const int64_t {v} = ts_it; (void){v};  // for starts not affine in it, and clip limits"]
        for name, tile in (("a", gl.a), ("b", gl.b)):
            setup, issue = self._copies(name, tile, gl, ctx)
            lines += setup
            loads += issue
        lines += self._lane_tables(gl, w)
        lines += [
            "// the copies of iteration ts_it into ring stage ts_st (each thread its 16-byte chunks)",
            "auto ts_load = [&](int ts_it, int ts_st) {",
            *(INDENT + line for line in loads),
            "};",
        ]
        compute = self._compute(gl, w)
        if stages == 1:  # T.serial: copy, wait, compute, and meet again before the next copy
            lines += [
                "#pragma unroll 1",
                f"for (int ts_it = 0; ts_it < {ext}; ++ts_it) {{",
                f"{INDENT}ts_load(ts_it, 0);",
                f"{INDENT}ts_cp_async_commit();",
                f"{INDENT}ts_cp_async_wait<0>();",
                *indent(ctx.block_sync()),
                f"{INDENT}const uint32_t ts_a_st = ts_sa, ts_b_st = ts_sb;",
                *(INDENT + line for line in compute),
                *indent(ctx.block_sync("every warp is done with the tiles before they are refilled")),
                "}",
            ]
            return lines
        lines += [
            # one commit group per iteration, empty ones included, so that the group count
            # alone says which iterations have landed
            *[f"ts_load({s}, {s});" for s in range(min(stages - 1, ext))],
            *["ts_cp_async_commit();"] * (stages - 1),
            f"int ts_rd = 0, ts_wr = {stages - 1};",
            "#pragma unroll 1",
            f"for (int ts_it = 0; ts_it < {ext}; ++ts_it) {{",
            f"{INDENT}ts_cp_async_wait<{stages - 2}>();  // this thread's copies of iteration ts_it have landed",
            *indent(ctx.block_sync("everyone's have; and every warp is done with stage ts_wr")),
            f"{INDENT}if (ts_it + {stages - 1} < {ext}) ts_load(ts_it + {stages - 1}, ts_wr);",
            f"{INDENT}ts_cp_async_commit();",
            f"{INDENT}ts_wr = ts_wr + 1 == {stages} ? 0 : ts_wr + 1;",
            f"{INDENT}const uint32_t ts_a_st = ts_sa + ts_rd * {gl.a.stage_bytes}u, "
            f"ts_b_st = ts_sb + ts_rd * {gl.b.stage_bytes}u;",
            f"{INDENT}ts_rd = ts_rd + 1 == {stages} ? 0 : ts_rd + 1;",
            *(INDENT + line for line in compute),
            "}",
            "ts_cp_async_wait<0>();",
            *ctx.block_sync("the ring is free for the next loop (or the next run of this one)"),
        ]
        return lines

    def _copies(self, name: str, tile: Tile, gl: MmaLoop, ctx: Ctx) -> tuple[list[str], list[str]]:
        """(setup, issue): per-thread addresses of the tile's copies, computed once, and the
        cp.async lines of one iteration (`ts_it`, stage `ts_st`) for the load lambda.

        Thread x copies chunk x % W of rows x / W + j * (threads / W), j = 0, 1, ...; the swizzle
        of a row depends on its residue mod 8 only, so one shared offset per residue of
        j * (threads / W) serves every pass, the rest are immediates. A clipped window (ragged
        edge) checks each chunk's row and column against the buffer's end: the start and the row
        stride are multiples of 8 elements, so a chunk is wholly inside or wholly outside, and
        one outside is zero-filled (cp.async's src-size 0) from the buffer's base."""
        threads, w = self.threads, tile.chunks
        step = threads // w
        passes = -(-tile.rows // step)
        src = tile.copy.src
        item = src.buffer.dtype.itemsize
        offset = element_offset(src)
        v = gl.loop.var
        g = f"ts_{name}_g"
        setup = [
            f"const int ts_{name}_r = threadIdx.x / {w}, ts_{name}_c = threadIdx.x % {w};",
            f"const unsigned char* const {g} = {ctx.pointers[src.buffer]} + "
            f"((int64_t)ts_{name}_r * {tile.src_row_stride} + ts_{name}_c * 8) * {item};",
        ]
        residues = sorted({(j * step) % 8 for j in range(passes)})
        for rho in residues:
            row = f"ts_{name}_r + {rho}" if rho else f"ts_{name}_r"
            setup.append(f"const uint32_t ts_{name}_s{rho} = (uint32_t)(ts_{name}_r * {tile.pitch} + "
                         f"((ts_{name}_c ^ {tile.xor_of_row(row)}) * {CHUNK}));")
        coef = _loop_coefficient(offset, v)
        issue: list[str] = []
        if coef is not None:  # affine in the loop variable: start + it * coef
            setup += [
                f"int64_t ts_{name}_o0;  // the source's start at iteration 0",
                f"{{ const int64_t {var_name(v)} = 0; ts_{name}_o0 = {c_expr(offset)}; }}",
            ]
            start = f"ts_{name}_o0 + (int64_t)ts_it * {coef}"
        else:  # e.g. k // 2 in the index: evaluated with the loop variable bound per iteration
            start = c_expr(offset)
        issue.append(f"const unsigned char* const ts_{name}_gi = {g} + ({start}) * {item};")
        row_lim, col_ok = self._clip_checks(name, tile, v, setup, issue)
        base = f"ts_s{name} + (uint32_t)ts_st * {tile.stage_bytes}u"
        for j in range(passes):
            row_off = j * step
            dst = f"{base} + ts_{name}_s{row_off % 8} + {row_off * tile.pitch}u"
            src_at = f"ts_{name}_gi + {row_off * tile.src_row_stride * item}LL"
            row_ok = row_lim and f"ts_{name}_r + {row_off} < {row_lim}"
            inside = [c for c in (col_ok, row_ok) if c]
            if not tile.aligned:  # col_ok is this thread's count of the chunk's elements inside (0-8)
                valid = f"({row_ok} ? {col_ok or 8} : 0)" if row_ok else (col_ok or "8")
                line = f"ts_copy16_u16({dst}, {src_at}, {valid});"
            elif inside:
                cond = " && ".join(inside)
                line = f"ts_cp_async_cg16_zfill({dst}, {src_at}, {cond}, {ctx.pointers[src.buffer]});"
            else:
                line = f"ts_cp_async_cg16({dst}, {src_at});"
            if (j + 1) * step > tile.rows:  # the last pass covers fewer rows than there are threads
                line = f"if (ts_{name}_r + {row_off} < {tile.rows}) {line}"
            issue.append(line)
        return setup, issue

    @staticmethod
    def _clip_checks(name: str, tile: Tile, v: Var, setup: list[str], issue: list[str]) -> tuple[str, str]:
        """(rows left in the buffer, whether this thread's chunk column is inside): C names, empty
        for a dimension that cannot clip; declared once, or per iteration when the window's start
        moves with the loop."""
        src = tile.copy.src
        clip = set(tile.copy.clip_dims)
        nd = len(src.starts)
        row_lim = col_ok = ""
        for dim, what in ((nd - 2, "row"), (nd - 1, "col")):
            if dim not in clip:
                continue
            left = f"{src.buffer.shape[dim]} - {c_expr(src.starts[dim])}"
            if what == "row":
                row_lim = f"ts_{name}_lr"
                decl = f"const int64_t {row_lim} = {left};  // rows of the window inside {src.buffer.name}"
            elif not tile.aligned:  # the buffer's end may fall inside a chunk: how many of its elements are in
                col_ok = f"ts_{name}_cv"
                decl = (f"const int64_t ts_{name}_cl = {left} - ts_{name}_c * 8;  "
                        f"const int {col_ok} = ts_{name}_cl <= 0 ? 0 : ts_{name}_cl >= 8 ? 8 : (int)ts_{name}_cl;")
            else:
                col_ok = f"ts_{name}_cok"
                decl = f"const bool {col_ok} = ts_{name}_c * 8 < {left};  // this thread's chunk column is inside"
            (issue if v in variables(src.starts[dim]) else setup).append(decl)
        return row_lim, col_ok

    def _lane_tables(self, gl: MmaLoop, w: WarpTiling) -> list[str]:
        """Per-thread shared-memory byte offsets of this lane's ldmatrix row address, one per
        static chunk key (`_compute` picks them; `_k_chunk` for tiles whose chunks run along K);
        the rest of each address is an immediate.

        ldmatrix.x4 lane l addresses row l % 8 of matrix l / 8. Each operand's four matrices are
        laid out so that the registers come out in mma's fragment order: A (m16 x k16) as
        [m0-7 k0-7, m8-15 k0-7, m0-7 k8-15, m8-15 k8-15], B (k16 x two n8) as
        [k0-7 n0-7, k8-15 n0-7, k0-7 n8-15, k8-15 n8-15]. Every operand row the lane addresses
        is = lane % 8 (mod 8), so its swizzle is `x` below."""
        a, b = gl.a, gl.b
        lines = []
        for name, tile in (("a", a), ("b", b)):
            lines.append(f"const int ts_x{name} = {tile.xor_of_row('ts_lane % 8')};")
        if not gl.gemm.transpose_a:  # A stored M x K: rows m, chunks along k (keyed by kk*2 % S)
            for key in range(a.swizzle // 2):
                lines.append(f"const uint32_t ts_la{key} = (uint32_t)((ts_wm * {w.tile_m} + ts_lane % 16) * "
                             f"{a.pitch} + (((ts_lane / 16) ^ ts_xa ^ {2 * key}) * {CHUNK}));")
        else:  # A stored K x M: rows k, chunks along m (keyed by the m16 block)
            for mi in range(w.mi):
                lines.append(f"const uint32_t ts_la{mi} = (uint32_t)(((ts_lane / 16) * 8 + ts_lane % 8) * {a.pitch} + "
                             f"(((ts_wm * {w.tile_m // 8} + {2 * mi} + (ts_lane / 8) % 2) ^ ts_xa) * {CHUNK}));")
        if not gl.gemm.transpose_b:  # B stored K x N: rows k, chunks along n (keyed by the n16 block)
            for nj2 in range(w.nj // 2):
                lines.append(f"const uint32_t ts_lb{nj2} = (uint32_t)((ts_lane % 16) * {b.pitch} + "
                             f"(((ts_wn * {w.tile_n // 8} + {2 * nj2} + ts_lane / 16) ^ ts_xb) * {CHUNK}));")
        else:  # B stored N x K: rows n, chunks along k (keyed by kk*2 % S)
            for key in range(b.swizzle // 2):
                lines.append(f"const uint32_t ts_lb{key} = (uint32_t)((ts_wn * {w.tile_n} + (ts_lane / 16) * 8 + "
                             f"ts_lane % 8) * {b.pitch} + ((((ts_lane / 8) % 2) ^ ts_xb ^ {2 * key}) * {CHUNK}));")
        return lines

    @staticmethod
    def _k_chunk(tile: Tile, kk: int, table: str) -> tuple[str, int]:
        """A tile whose chunks run along K: chunk kk*2 + lane bit = high + low, high a multiple of
        S (untouched by the XOR, an immediate) and low < S (the XOR's, from the lane table)."""
        chunk = 2 * kk
        low = chunk % tile.swizzle
        return f"{table}{low // 2}", (chunk - low) * CHUNK

    def _compute(self, gl: MmaLoop, w: WarpTiling) -> list[str]:
        """The products of one stage (`ts_a_st`, `ts_b_st`), every k16 step unrolled."""
        a, b = gl.a, gl.b
        acc = acc_name(gl.acc)
        mma = f"ts_mma_16816_{gl.ptx_type}"
        lines = []
        if gl.gemm.clear_accum:
            lines += _zero(acc, w)
        for kk in range(gl.k // 16):
            body = [f"uint32_t ts_fa[{w.mi}][4], ts_fb[{w.nj}][2];"]
            for mi in range(w.mi):
                if not gl.gemm.transpose_a:
                    reg, imm = self._k_chunk(a, kk, "ts_la")
                    imm += mi * 16 * a.pitch
                    ld = "ts_ldsm_x4"
                else:
                    reg, imm = f"ts_la{mi}", kk * 16 * a.pitch
                    ld = "ts_ldsm_x4_trans"
                regs = ", ".join(f"ts_fa[{mi}][{r}]" for r in range(4))
                body.append(f"{ld}({regs}, ts_a_st + {reg} + {imm}u);")
            for nj2 in range(w.nj // 2):
                if not gl.gemm.transpose_b:
                    reg, imm = f"ts_lb{nj2}", kk * 16 * b.pitch
                    ld = "ts_ldsm_x4_trans"
                else:
                    reg, imm = self._k_chunk(b, kk, "ts_lb")
                    imm += nj2 * 16 * b.pitch
                    ld = "ts_ldsm_x4"
                regs = ", ".join(f"ts_fb[{2 * nj2 + r // 2}][{r % 2}]" for r in range(4))
                body.append(f"{ld}({regs}, ts_b_st + {reg} + {imm}u);")
            for mi in range(w.mi):
                # serpentine over n: consecutive products share an operand register
                order = range(w.nj) if mi % 2 == 0 else range(w.nj - 1, -1, -1)
                body += [f"{mma}({acc}[{mi}][{nj}], ts_fa[{mi}], ts_fb[{nj}]);" for nj in order]
            lines += [f"{{  // k16 step {kk}", *(INDENT + line for line in body), "}"]
        return lines


def _zero(acc: str, w: WarpTiling) -> list[str]:
    return ["#pragma unroll", f"for (int ts_e = 0; ts_e < {w.mi * w.nj * 4}; ++ts_e) (&{acc}[0][0][0])[ts_e] = 0.0f;"]


def _loop_coefficient(offset: Expr, v: Var) -> int | None:
    """c when `offset` is (terms without `v`) + c * v, else None."""
    form = affine_form(offset)
    if form is None:
        return None
    coef = 0
    for atom, c in form[0].items():
        if isinstance(atom, Var) and atom.kind is v.kind and atom.axis == v.axis:
            coef = c
        elif v in variables(atom):
            return None
    return coef


# ---- planning ------------------------------------------------------------------------------------

_GLOBAL = (BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.SYMMETRIC, BufferKind.GLOBAL)


def _tile(copy: Copy, threads: int) -> Tile | str:
    src, dst = copy.src, copy.dst
    buf = dst.buffer
    if buf.kind is not BufferKind.SHARED or not whole(dst) or len(buf.shape) != 2:
        return f"{dst} is not a whole 2-D shared tile"
    if src.buffer.kind not in _GLOBAL:
        return f"the source {src} is not in global memory"
    if src.buffer.dtype != buf.dtype:
        return "the copy converts the element type"
    rows, cols = buf.shape
    if len(src.sizes) < 2 or tuple(src.sizes[-2:]) != (rows, cols) or any(s != 1 for s in src.sizes[:-2]):
        return f"the source {src} is not a {rows} x {cols} window of its last two dimensions"
    if cols % 16:
        return f"tile {buf.name} is {rows} x {cols}: its contiguous dimension must be a multiple of 16"
    if threads % (cols // 8):
        return f"tile {buf.name}: {cols // 8} 16-byte chunks per row do not divide {threads} threads"
    row_stride = row_major_strides(src.buffer.shape)[-2]
    form = affine_form(element_offset(src))
    start_aligned = form is not None and form[1] % 8 == 0 and all(c % 8 == 0 for c in form[0].values())
    # a source not provably 16-byte aligned (an odd K, a start of 4 elements) is copied by plain loads: slower than
    # cp.async, but its accumulator stays in registers (the portable path would put it in shared memory)
    aligned = row_stride % 8 == 0 and start_aligned and BASE_ALIGN[src.buffer.kind] >= CHUNK
    return Tile(buf, copy, rows, cols, row_stride, aligned=aligned)


def _plan_loop(loop: Loop, index: int, threads: int) -> MmaLoop | str:
    step = match_gemm_step(loop, MMA_INPUT_TYPES, "mma.sync", lambda copy: _tile(copy, threads))
    if isinstance(step, str):
        return step
    g, a, b, m, n, k = step
    if m % 16 or n % 16 or k % 16:
        return f"M x N x K = {m} x {n} x {k} is not made of 16 x 16 x 16 pieces"
    if warp_tiling(m, n, threads // WARP) is None:
        fits = [w * WARP for w in range(1, 33) if warp_tiling(m, n, w) is not None]
        advice = ": take a smaller tile"
        if fits:
            others = f" (or {', '.join(map(str, fits[1:4]))})" if len(fits) > 1 else ""
            advice = f": take threads={fits[0]}{others}"
        return (f"no grid of {threads // WARP} warps cuts the {m} x {n} tile into multiples of 16 x 16 with at "
                f"most {MAX_ACC_PER_THREAD} accumulators per thread{advice}")
    stages = max(1, loop.num_stages or 1)
    return MmaLoop(loop, index, a, b, g, g.c.buffer, m, n, k, stages, MMA_INPUT_TYPES[g.a.buffer.dtype])


def _candidates(body: tuple[Stmt, ...], uniform: bool = True):
    """(loop, block-uniform) for every loop whose body holds a T.gemm, at any depth."""
    for s in body:
        if isinstance(s, Loop) and any(isinstance(x, Gemm) for x in s.body):
            yield s, uniform
        inner = uniform and not (isinstance(s, If) and thread_dependent(s.cond))
        for nested in getattr(s, "bodies", ()):
            yield from _candidates(nested, inner)


def _misuse(loops: list[MmaLoop], stmts: list[Stmt]) -> tuple[set[int], list[str]]:
    """Loops (by index) whose tiles or accumulator another statement uses in a way the plan does
    not lower, and why."""
    registers = {gl.acc for gl in loops}
    owned = ({id(gl.loop) for gl in loops} | {id(s) for gl in loops for s in gl.loop.body}
             | epilogue_statements(stmts, registers))
    drop: set[int] = set()
    reasons: list[str] = []
    for s in stmts:
        if id(s) in owned:
            continue
        touched = buffers_of(s)
        for gl in loops:
            if touched & {gl.a.buffer, gl.b.buffer}:
                drop.add(gl.index)
                reasons.append(f"loop at {gl.loop.loc}: {s.op_name} at {s.loc} uses a pipelined tile outside its loop")
            elif gl.acc in touched and (_clipped_leading(s) or not fragment_use_ok(s, registers)):
                drop.add(gl.index)
                reasons.append(f"loop at {gl.loop.loc}: {s.op_name} at {s.loc} uses the accumulator other than "
                               "clear/fill/whole copy")
    return drop, reasons


def _clipped_leading(s: Stmt) -> bool:
    """A fragment copy whose window is clipped along a leading dimension: this plan keeps to
    matrix windows (the Hopper plan takes them)."""
    return isinstance(s, Copy) and bool(s.clip_dims) and any(d < len(s.global_side.sizes) - 2 for d in s.clip_dims)


def _shared_bytes(kernel: KernelIR, loops: list[MmaLoop]) -> int:
    """The dynamic shared memory layout.py will ask for (its rounding, upper bound)."""
    staged = stage_bytes(loops)
    accs = {gl.acc for gl in loops}
    total = sum(-(-n // SMEM_ALIGN) * SMEM_ALIGN for n in staged.values())
    total += sum(-(-b.nbytes // 128) * 128 for b in kernel.allocs
                 if b.kind in (BufferKind.SHARED, BufferKind.FRAGMENT) and b not in staged and b not in accs)
    return total + SMEM_ALIGN + 128


def plan_with_reasons(kernel: KernelIR, arch: str) -> tuple[Sm80Plan | None, list[str]]:
    """The mma.sync plan of `kernel` (None when no loop qualifies) and why each GEMM loop it leaves
    to the portable path does not qualify (rings it shortened to fit are in the plan's notes)."""
    number = arch_number(arch)
    loops_found = list(_candidates(kernel.body))
    if not loops_found:
        return None, []
    if number is None or number < 80:
        return None, [f"target {arch} has no mma.sync m16n8k16 (sm_80 or later)"]
    threads = kernel.threads  # a multiple of 32 (the verifier's rule)
    reasons: list[str] = []
    loops: list[MmaLoop] = []
    for loop, uniform in loops_found:
        got = "it runs under a thread-dependent if" if not uniform else _plan_loop(loop, len(loops), threads)
        if isinstance(got, str):
            reasons.append(f"loop at {loop.loc}: {got}")
        else:
            loops.append(got)
    stmts = list(walk_stmts(kernel.body))
    while loops:
        drop, why = _misuse(loops, stmts)
        if not drop:
            break
        reasons += why
        loops = [replace(gl, index=i) for i, gl in enumerate(gl for gl in loops if gl.index not in drop)]
    if not loops:
        return None, reasons
    limit = SMEM_LIMIT.get(number, DEFAULT_SMEM_LIMIT)
    if kernel.blocks_per_sm > 1:  # each of the blocks an SM must hold gets its share
        limit = min(limit, shared_budget(arch, kernel.blocks_per_sm))
    while _shared_bytes(kernel, loops) > limit:  # a shorter ring before giving up
        longest = max(loops, key=lambda gl: (gl.stages, gl.stage_bytes))
        if longest.stages <= 2:
            return None, [*reasons, f"the tiles need {_shared_bytes(kernel, loops)} bytes of shared memory even "
                                    f"with 2 stages; {arch} allows {limit}"]
        loops[longest.index] = replace(longest, stages=longest.stages - 1)
    notes = [f"loop at {gl.loop.loc}: {gl.stages} stages instead of {gl.loop.num_stages} (the shared memory of {arch})"
             for gl in loops if gl.stages < (gl.loop.num_stages or 1)]
    tilings = {gl.acc: warp_tiling(gl.m, gl.n, threads // WARP) for gl in loops}
    return Sm80Plan(loops, tilings, threads, arch, notes), reasons  # type: ignore[arg-type]
