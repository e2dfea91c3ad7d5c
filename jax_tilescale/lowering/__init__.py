"""The `tilescale_call` primitive and its lowerings, registered with JAX here.

`primitive.py`: the primitive's parameters (`CallSpec`) and abstract evaluation; `cpu.py`: the
interpreter through host callbacks (CPU, and `interpret=True` on any backend); `cuda.py`: the
FFI launch of the compiled kernel (docs/calling_convention.md).
"""

from __future__ import annotations

from typing import Any

from jax.interpreters import mlir

from .cpu import lower_interpret
from .cuda import lower_cuda, staged_flags
from .primitive import CallSpec, tilescale_call_p


def _lower_on_gpu(ctx: Any, pe_info: Any, *args: Any, call: CallSpec) -> Any:
    """On CUDA the compiled kernel, unless the kernel asks for the interpreter (`interpret=`)."""
    if call.interpret:
        return lower_interpret(ctx, pe_info, *args, call=call)
    return lower_cuda(ctx, pe_info, *args, call=call)


mlir.register_lowering(tilescale_call_p, lower_interpret, platform="cpu")
mlir.register_lowering(tilescale_call_p, _lower_on_gpu, platform="cuda")

__all__ = ["CallSpec", "staged_flags", "tilescale_call_p"]
