"""GPU runtime: FFI registration, NVSHMEM bootstrap, mesh -> PE tables (the symmetric workspace is in xla_ffi/)."""

from .ffi_registry import TARGET_NAME, ensure_registered, load_extension
from .nvshmem_bootstrap import NvshmemInfo, ensure_initialized, finalize, init, is_initialized
from .pe_table import kernel_axis_indices, kernel_pe_map, mesh_pe_table

__all__ = [
    "TARGET_NAME",
    "NvshmemInfo",
    "ensure_initialized",
    "ensure_registered",
    "finalize",
    "init",
    "is_initialized",
    "kernel_axis_indices",
    "kernel_pe_map",
    "load_extension",
    "mesh_pe_table",
]
