"""jax_tilescale: multi-GPU tile kernels (TileScale-style, NVSHMEM) as first-class JAX ops.

    import jax_tilescale as ts
    from jax_tilescale import language as T

    @ts.kernel(out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(m // 64,))
    def shift(src, dst):
        rows = T.ds(T.program_id(0) * 64, 64)
        T.putmem_nbi_block(dst[rows, :], src[rows, :], pe=(T.get_pe() + 1) % T.get_pe_num())
"""

from . import errors, language, platform, testing, tune
from .errors import (
    CompileError,
    DeadlockError,
    KernelCheckError,
    KernelRuntimeError,
    KernelTraceError,
    LaunchError,
    PerformanceWarning,
    RaceError,
    TileScaleError,
    WaitTimeoutError,
)
from .interpret.options import InterpretOptions
from .kernel import TileKernel, kernel

__version__ = "0.1.0"

__all__ = [
    "CompileError",
    "DeadlockError",
    "InterpretOptions",
    "KernelCheckError",
    "KernelRuntimeError",
    "KernelTraceError",
    "LaunchError",
    "PerformanceWarning",
    "RaceError",
    "TileKernel",
    "TileScaleError",
    "WaitTimeoutError",
    "errors",
    "kernel",
    "language",
    "platform",
    "testing",
    "tune",
]
