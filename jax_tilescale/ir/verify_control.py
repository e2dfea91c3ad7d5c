"""Verifier rules of per-thread code: ifs (thread-dependent or block-uniform, with element-value
conditions) and register stores (registered in verify_base.VERIFY; ir/control.py has the model)."""

from __future__ import annotations

import contextlib

from ..errors import KernelTraceError
from .buffers import BufferKind
from .control import THREAD_VAR, If, LocalStore, thread_dependent
from .expr import format_expr, is_condition
from .guards import guarded, known_conditions, narrowed
from .kernel_ir import KernelIR
from .ranges import Ranges
from .values import BOOL, Value, format_value
from .verify_base import VERIFY, check_region, thread_branch, verify_body
from .verify_tile_ops import check_value


@VERIFY.register(If)
def verify_if(s: If, kernel: KernelIR, ranges: Ranges) -> None:
    divergent = thread_dependent(s.cond)
    if divergent and THREAD_VAR not in ranges:
        ranges = {**ranges, THREAD_VAR: (0, kernel.threads - 1)}
    if isinstance(s.cond, Value):
        if s.cond.dtype != BOOL:
            raise KernelTraceError(f"if: the condition {format_value(s.cond)} is {s.cond.dtype.name}, not bool (the "
                                   "language turns `if x[i]:` into `x[i] != 0`)", s.loc)
        check_value(s.cond, ranges, "if", s.loc)
    elif not is_condition(s.cond):
        raise KernelTraceError(f"if: the condition {format_expr(s.cond)} is not a comparison or a combination", s.loc)
    with thread_branch(s) if divergent else contextlib.nullcontext():
        for holds, body in ((True, s.then_body), (False, s.else_body)):
            known = known_conditions(s.cond, holds)
            with guarded(known):
                verify_body(body, kernel, narrowed(known, ranges))


@VERIFY.register(LocalStore)
def verify_local_store(s: LocalStore, kernel: KernelIR, ranges: Ranges) -> None:
    buf = s.dst.buffer
    if buf.kind is not BufferKind.LOCAL:
        raise KernelTraceError(f"store: {buf.name} is a {buf.kind.value} buffer; element stores write registers", s.loc)
    if s.dst.size != 1:
        raise KernelTraceError(f"store: writes one element of {buf.name}, got {s.dst}", s.loc)
    if THREAD_VAR not in ranges:
        ranges = {**ranges, THREAD_VAR: (0, kernel.threads - 1)}
    check_region(s.dst, ranges, "store", s.loc)
