"""Runtime: process layout and fault handling of multi-process jobs, FFI registration, NVSHMEM bootstrap,
mesh -> PE tables (the symmetric workspace is in xla_ffi/)."""

from .distributed import ProcessLayout, check_launch_env, initialize, process_layout
from .ffi_registry import TARGET_NAME, ensure_registered, load_extension
from .nvshmem_bootstrap import NvshmemInfo, ensure_initialized, finalize, init, is_initialized
from .pe_table import kernel_axis_indices, kernel_pe_map, mesh_pe_table

__all__ = [
    "TARGET_NAME",
    "NvshmemInfo",
    "ProcessLayout",
    "check_launch_env",
    "ensure_initialized",
    "ensure_registered",
    "finalize",
    "init",
    "initialize",
    "is_initialized",
    "kernel_axis_indices",
    "kernel_pe_map",
    "load_extension",
    "mesh_pe_table",
    "process_layout",
]
