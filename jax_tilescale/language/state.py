"""The state of a kernel trace: what it has recorded so far, and how to reach it from `T.*`.

The active trace lives in a context variable, so that traces of different kernels (on different
threads, or nested during JAX tracing) never see each other's statements. While a trace is
active the tracer also lends index expressions what they need of this layer (ir/expr.py
`TRACE_HOOKS`): element values for mixed operands, and the truth-test check.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..errors import KernelTraceError
from ..ir.buffers import Buffer
from ..ir.expr import PE_VAR, TRACE_HOOKS, TraceHooks, Var, node_ranges, program_id_var
from ..ir.nodes import Stmt
from .naming import c_safe_name, unique_name
from .source import user_source_loc
from .truth import is_truth_test
from .values import index_arith


@dataclass
class TraceState:
    """Everything a kernel trace accumulates."""

    grid: tuple[int, ...]
    threads: int
    num_pes: int
    mesh_axes: tuple[str, ...] = ()
    mesh_axis_sizes: tuple[int, ...] = ()
    cluster: tuple[int, ...] = ()  # blocks per cluster along each grid axis (() none): KernelIR.cluster
    # Input buffer name -> the kernel mesh axes shard_map types it as varying over (check_vma on):
    # what the kernel knows of its in_specs (T.view checks layouts against it). Empty: unknown.
    input_vma: dict[str, frozenset[str]] = field(default_factory=dict)
    body: list[Stmt] = field(default_factory=list)
    allocs: list[Buffer] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    # Bodies being traced: the kernel's, then one per open `T.serial`/`T.Pipelined` loop.
    open_bodies: list[list[Stmt]] = field(default_factory=list)
    next_loop_id: int = 0
    # [0, n - 1] of every `T.serial`/`T.Pipelined` loop variable traced so far (`var_ranges`).
    loop_ranges: dict[Var, tuple[int, int]] = field(default_factory=dict)

    def fresh_name(self, name: str | None, fallback: str | None = None) -> str:
        """The kernel's name for a new buffer the user calls `name` (None: unnamed, `fallback`; a
        derived name alone may come as `name`): the one place names are made valid C identifiers
        and unique (language/naming.py). Allocators get `name` from memory.buffer_name."""
        fallback = fallback or name or "buf"
        return unique_name(c_safe_name(fallback if name is None else name, fallback), self.names)

    def emit(self, stmt: Stmt) -> None:
        (self.open_bodies[-1] if self.open_bodies else self.body).append(stmt)

    def var_ranges(self) -> dict[Var, tuple[int, int]]:
        """Ranges of the block index, the PE and the loop variables: for a statement traced now,
        what the verifier's `var_ranges` gives it (its enclosing loops are among those traced)."""
        ranges = {program_id_var(i): (0, g - 1) for i, g in enumerate(self.grid)}
        ranges[PE_VAR] = (0, self.num_pes - 1)
        return {**ranges, **node_ranges(self.num_pes), **self.loop_ranges}


_STATE: contextvars.ContextVar[TraceState | None] = contextvars.ContextVar("tilescale_trace", default=None)
_HOOKS = TraceHooks(mixed=index_arith, truth_test=is_truth_test)


def current_trace(op: str) -> TraceState:
    state = _STATE.get()
    if state is None:
        raise KernelTraceError(
            f"T.{op}() can only be called inside a function decorated with @jax_tilescale.kernel",
            user_source_loc(),
        )
    return state


@contextmanager
def tracing(state: TraceState) -> Iterator[TraceState]:
    """`state` is the active trace inside (and index expressions have the tracer's hooks)."""
    token, hooks_token = _STATE.set(state), TRACE_HOOKS.set(_HOOKS)
    try:
        yield state
    finally:
        TRACE_HOOKS.reset(hooks_token)
        _STATE.reset(token)
