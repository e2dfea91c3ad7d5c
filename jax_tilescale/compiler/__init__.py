"""The compiler driver: generated CUDA source -> cached, device-linked cubin (nvcc + NVSHMEM)."""

from .nvcc import compile_cubin, ptxas_report

__all__ = ["compile_cubin", "ptxas_report"]
