"""The verifier: every invariant of a traced kernel, checked in one place.

`verify_kernel` checks the kernel's own facts, then walks its body with the rules of
verify_base.VERIFY (one per statement type). The modules that hold the rules are imported here,
so the table is complete whenever `verify_kernel` can be called. Errors name the user's source
line.
"""

from __future__ import annotations

import math

from ..errors import KernelTraceError
from . import verify_cluster, verify_comm, verify_compute, verify_control, verify_tile_ops
from .kernel_ir import KernelIR
from .verify_base import var_ranges, verify_body

# The modules whose rules fill verify_base.VERIFY (each registers its own when imported).
RULE_MODULES = (verify_cluster, verify_comm, verify_compute, verify_control, verify_tile_ops)

MAX_GRID_DIMS = 3
MAX_THREADS = 1024
MAX_THREADS_PER_SM = 2048  # every GPU since Volta but sm_75/86/89/120 (1024-1536)


def verify_kernel(kernel: KernelIR) -> KernelIR:
    """Raises KernelTraceError for the first broken invariant; returns the kernel unchanged."""
    loc = kernel.loc
    if not 1 <= len(kernel.grid) <= MAX_GRID_DIMS or any(
        isinstance(g, bool) or not isinstance(g, int) or g <= 0 for g in kernel.grid
    ):
        raise KernelTraceError(f"grid must be 1 to {MAX_GRID_DIMS} positive ints, got {kernel.grid!r}", loc)
    if not isinstance(kernel.threads, int) or not 32 <= kernel.threads <= MAX_THREADS or kernel.threads % 32:
        raise KernelTraceError(
            f"threads must be a multiple of 32 between 32 and {MAX_THREADS}, got {kernel.threads!r}", loc
        )
    bps = kernel.blocks_per_sm
    if isinstance(bps, bool) or not isinstance(bps, int) or not 1 <= bps <= MAX_THREADS_PER_SM // kernel.threads:
        raise KernelTraceError(
            f"blocks_per_sm must be an int from 1 to {MAX_THREADS_PER_SM // kernel.threads} (an SM holds at most "
            f"{MAX_THREADS_PER_SM} threads; the kernel has {kernel.threads} per block), got {bps!r}", loc
        )
    if kernel.num_pes < 1:
        raise KernelTraceError(f"the kernel's PE space {kernel.mesh_axes} is empty", loc)
    sizes = kernel.mesh_axis_sizes
    if sizes and (len(sizes) != len(kernel.mesh_axes) or math.prod(sizes) != kernel.num_pes):
        raise KernelTraceError(
            f"mesh axis sizes {sizes} do not make the PE space {kernel.mesh_axes} of {kernel.num_pes} PEs", loc
        )
    verify_cluster.check_cluster(kernel)
    verify_body(kernel.body, kernel, var_ranges(kernel))
    return kernel
