"""Kernel IR: index expressions, nodes, tracing, verifier and printer."""

from .expr import Expr, format_expr
from .nodes import KernelIR
from .printer import format_kernel
from .trace import trace_kernel
from .verify import verify_kernel

__all__ = ["Expr", "KernelIR", "format_expr", "format_kernel", "trace_kernel", "verify_kernel"]
