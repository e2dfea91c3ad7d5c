"""The edge tiles' narrower products in the Hopper GEMM lowering (`gemm_sm90.Sm90Plan.loop_lines`).

Where N is not a multiple of the tile's, the last column of tiles holds N % bn columns of C; its wgmma still runs
the tile's whole width over TMA's zeros. With EDGE_LOOP on, the consumer's k-loop is emitted twice, the second copy
with products of the edge's width (N % bn rounded up to the operand's atoms) updating a prefix of the same
accumulator (the m64 x N f32 fragment is N/8 column groups of 4 registers: wgmma.wgmma_wrapper's `within`), and the
tile picks one copy before its loop. A branch around each wgmma instead makes ptxas serialize them (C7520, "program
dependence on compiler-inserted WG.AR in divergent path", ptxas 13.0); the two loops compile to 168 registers
without loss at 16384 x 8192 x 1024 (benchmarks/NOTES.md, "The last 0.8%"). Off by default: not yet timed
(bench_gemm.py's `/edge`). With the edge column last in the tile order (examples/gemm.py's `edge_last`), the last
wave's tiles are the narrow ones.
"""

from __future__ import annotations

from ..ir.expr import Expr, affine_form, variables
from ..ir.nodes import BufferKind
from .common import indent
from .expr_printer import c_expr
from .gemm_sm90_load import GemmLoop
from .wgmma import wgmma_name

EDGE_LOOP = False
MMA = "TS_MMA"  # stands for the wgmma wrapper in a k-loop's lines until its copies are made


def edge_window(gl: GemmLoop, b_mn: bool) -> tuple[Expr, int]:
    """(start, extent) of B's global window along the product's N: the last dimension of a K x N tile (MN-major),
    the first of an N x K one."""
    region = gl.b.copy.src
    dim = len(region.sizes) - (1 if b_mn else 2)
    return region.starts[dim], region.buffer.shape[dim]


def edge_width(gl: GemmLoop, b_mn: bool) -> int | None:
    """The wgmma N of the tiles whose B window passes B's end along N, when EDGE_LOOP is on and that is provably the
    last column of tiles: every window starts at a multiple of the tile's N (so the last one holds N % n columns) at a
    start the loop does not move; N % n rounded up to whole atoms of an MN-major tile (8 columns K-major), if that is
    narrower than n. None: one loop, as before."""
    if not EDGE_LOOP or gl.by_threads or gl.b.copy.src.buffer.kind is not BufferKind.INPUT:
        return None
    start, extent = edge_window(gl, b_mn)
    form = affine_form(start)
    if extent % gl.n == 0 or form is None or form[1] % gl.n or any(c % gl.n for c in form[0].values()):
        return None
    if gl.loop.var in variables(start):
        return None
    step = gl.b.atom_cols if b_mn else 8
    width = -(-(extent % gl.n) // step) * step
    return width if width < gl.n else None


def wrappers_wanted(gl: GemmLoop, a_mn: bool, b_mn: bool) -> set[tuple[int, bool, bool, int]]:
    """The wgmma wrappers loop `gl` calls, (N, A MN-major, B MN-major, N of the accumulator): its own width, and the
    edge's where edge_width gives one."""
    edge = edge_width(gl, b_mn)
    return {(gl.n, a_mn, b_mn, gl.n)} | (set() if edge is None else {(edge, a_mn, b_mn, gl.n)})


def loop_variants(gl: GemmLoop, loop: list[str], ptx_type: str, a_mn: bool, b_mn: bool) -> list[str]:
    """The k-loop's lines (`loop`, MMA standing for the wrapper) with the loop's wgmma, or, where edge_width gives a
    width, twice: the tiles whose B window passes B's end take the narrower products, the others the full ones."""
    full = wgmma_name(gl.n, ptx_type, a_mn, b_mn)
    edge = edge_width(gl, b_mn)
    if edge is None:
        return [line.replace(MMA, full) for line in loop]
    narrow = wgmma_name(edge, ptx_type, a_mn, b_mn, within=gl.n)
    start, extent = edge_window(gl, b_mn)
    return [
        f"if ((int64_t)({c_expr(start)}) + {gl.n} > {extent}) {{  // B's last {extent % gl.n} columns: "
        f"n{edge} products",
        *indent([line.replace(MMA, narrow) for line in loop]),
        "} else {",
        *indent([line.replace(MMA, full) for line in loop]),
        "}",
    ]
