"""The Hopper GEMM lowering (`gemm_sm90`) of a pipelined loop that is not at the top level of its
kernel but inside serial loops and block-uniform ifs: the form of a persistent tile scheduler,

    for w in T.serial(waves):                      # grid = (SM count,)
        tile = w * blocks + T.program_id(0)
        if tile < tiles:
            tm, tn = <grouped order of tile>
            T.clear(C_f)
            for ko in T.Pipelined(...): copy, copy, gemm
            T.copy(C_f, C[tm * bm, tn * bn])

(examples/gemm.py's `persistent_kernel`). The producer warpgroup runs the same skeleton (the
enclosing loops and ifs, with the same variables and conditions) around its copies; both sides
count the loop's iterations over the whole kernel (`ts_it<i>`), so the stage ring and its
barrier phases carry on from one tile to the next instead of restarting. After each run of the
loop the consumers release its last stage, so the producer fills the next tile's stages while
the consumers store the last tile (the epilogue overlaps the next main loop's loads); the
epilogue's TMA store then goes through a staging tile of its own beside the rings
(`nested_store`), not through a ring the producer is refilling.

In a kernel built with `pingpong=True` (gemm_sm90_pingpong), the two consumer warpgroups take the
tile loop's iterations in turn instead of sharing each tile, so that one stores its tile while the
other's main loop runs.

Conditions on the enclosing statements: serial loops (not pipelined) and ifs whose condition
is block-uniform (no thread index) and reads no memory (the producer evaluates it too), the
loop in the `then` branch. Or, outermost, a tile queue (`T.tile_queue`, ir/tile_queue.py): the
producer draws its tickets and hands them to the consumers (gemm_sm90_queue).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..ir.control import If, thread_dependent
from ..ir.expr import loads
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Copy, Loop, Stmt
from ..ir.tile_queue import TileQueue
from ..ir.values import Value
from .common import INDENT
from .context import Ctx
from .expr_printer import var_name
from .gemm_sm90_queue import producer_rounds
from .tile_ops import ValuePrinter, condition, enclosing_ranges

Nest = tuple[Stmt, ...]  # the statements enclosing a planned loop, outermost first


def nesting(kernel: KernelIR, loop: Loop) -> Nest | str:
    """The serial loops and ifs around `loop` (() at the top level), or why the producer cannot
    follow them."""
    path = _path(kernel.body, loop)
    if path is None:
        return "the loop is not reachable from the kernel body"
    for s in path:
        if isinstance(s, Loop):
            if s.num_stages is not None:
                return f"it is inside the pipelined loop at {s.loc}"
        elif isinstance(s, If):
            if loop not in _walk(s.then_body):
                return f"it is in the else branch of the if at {s.loc}"
            if thread_dependent(s.cond):
                return f"the if at {s.loc} depends on the thread"
            if isinstance(s.cond, Value) or loads(s.cond):
                return f"the condition of the if at {s.loc} reads memory (the producer would evaluate it too)"
        elif not isinstance(s, TileQueue):
            return f"it is inside a {s.op_name} at {s.loc}"
    return path


def _walk(stmts: tuple[Stmt, ...]):
    for s in stmts:
        yield s
        for body in getattr(s, "bodies", ()):
            yield from _walk(body)


def _path(stmts: tuple[Stmt, ...], target: Stmt) -> list[Stmt] | None:
    for s in stmts:
        if s is target:
            return []
        for body in getattr(s, "bodies", ()):
            inner = _path(body, target)
            if inner is not None:
                return [s, *inner]
    return None


def counter(index: int) -> str:
    """The C name of planned loop `index`'s iteration count over the whole kernel."""
    return f"ts_it{index}"


def nested_counters(indices: Iterable[int]) -> list[str]:
    """The consumers' declarations of the iteration counts of the nested loops `indices`."""
    return [f"uint32_t {counter(index)} = 0;  // iterations of the loop so far (stage and phase)" for index in indices]


def producer_skeleton(nest: Nest, program: list[str], index: int, extent: int, ctx: Ctx,
                      issuer: str | None = None) -> list[str]:
    """`program` (the producer's copies of one run of the loop, stage and phase counted from
    `counter(index)`) inside the loops and ifs of `nest`, the count advanced after each run. `issuer`:
    the condition of the producer thread that issues (draws a queue's tickets) where all of them copy."""
    body = [*program, f"{counter(index)} += {extent};"]
    for s in reversed(nest):
        if isinstance(s, TileQueue):
            body = producer_rounds(s, body, ctx, issuer)
            continue
        if isinstance(s, Loop):
            i = var_name(s.var)
            head = f"for (int64_t {i} = 0; {i} < {s.extent}; ++{i}) {{"
        else:
            printer = ValuePrinter(ctx, enclosing_ranges(ctx.kernel, s))
            head = f"if ({condition(s.cond, printer, s.loc)}) {{"  # type: ignore[attr-defined]
        body = [head, *(INDENT + line for line in body), "}"]
    return [f"uint32_t {counter(index)} = 0;  // iterations of the loop so far (stage and phase)", *body]


def consumer_tail(index: int, empty: str, stages: int, extent: int, multicast: bool = False,
                  held: bool = False) -> list[str]:
    """After a run of the loop (every wgmma done): release its last stage, which the top-level
    form never does (the kernel ends), and advance the count; with a multicast tile, in the cluster
    peer's barrier too (its producer sends half of the stage into ours). `held`: the epilogue
    stages through the last stages' A tiles (gemm_sm90_store.plan_borrowed_store) and releases them."""
    if held:
        return [f"{counter(index)} += {extent};  // the last stages stay held: the epilogue stages through them"]
    last = f"({counter(index)} + {extent - 1}) % {stages}"
    release = f"ts_mbar_arrive(&{empty}[{last}]);"
    if multicast:
        release = f"{{ {release} ts_mbar_arrive_cluster(&{empty}[{last}], ts_crank ^ 1); }}"
    return [f"if (ts_lane == 0) {release}  // the producer may refill it for the next run",
            f"{counter(index)} += {extent};"]


def inner_body(nest: Nest) -> tuple[Stmt, ...]:
    """The statements of the innermost body of `nest` (a loop's body or an if's `then` branch, where
    the planned loop stands: `nesting` refuses `else` branches)."""
    inner = nest[-1]
    return inner.then_body if isinstance(inner, If) else inner.body  # type: ignore[attr-defined]


def last_statement(nest: Nest) -> Copy | None:
    """The copy that ends the innermost body of `nest` (the tile's epilogue), if it is one."""
    if not nest:
        return None
    body = inner_body(nest)
    return body[-1] if body and isinstance(body[-1], Copy) else None
