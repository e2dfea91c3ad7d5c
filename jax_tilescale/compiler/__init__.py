"""The compiler driver: generated CUDA source -> cached, device-linked cubin (nvcc + NVSHMEM); what ptxas said of it."""

from .nvcc import compile_cubin, ptxas_report
from .ptxas import KernelResources, kernel_resources, parse_report

__all__ = ["KernelResources", "compile_cubin", "kernel_resources", "parse_report", "ptxas_report"]
