"""CUDA code generation: kernel IR -> CUDA C++ that follows docs/calling_convention.md."""

from .cuda import LAUNCH_ARGS_BYTES, TS_ABI_VERSION, CudaModule, generate_cuda

__all__ = ["LAUNCH_ARGS_BYTES", "TS_ABI_VERSION", "CudaModule", "generate_cuda"]
