"""Kernel IR: the data model (buffers, index expressions, values, statements), its analyses, the
verifier and the printer. Tracing Python into it is language/'s (`language.tracing.trace_kernel`)."""

from .expr import Expr, format_expr
from .kernel_ir import KernelIR
from .printer import format_kernel
from .verify import verify_kernel

__all__ = ["Expr", "KernelIR", "format_expr", "format_kernel", "verify_kernel"]
