"""Every example's kernels, as the example builds them, generate CUDA that nvcc builds (sm_90, with
NVSHMEM's headers and device library; the Hopper GEMM lowering for sm_90a).

Each example's own `check` runs at a small size on simulated devices (the interpreter, which also
checks the result); every kernel it traces on the way (`TileKernel.trace`) is recorded, then
lowered with `generate_cuda` and compiled in parallel into the session's cache. A new example
must be added to SMALL (a test says so). Without nvcc or NVSHMEM the build tests skip, except in
CI (CI=true), where they fail.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import jax
import pytest

import jax_tilescale as ts
from jax_tilescale.codegen import CudaModule, generate_cuda
from jax_tilescale.compiler import compile_cubin, ptxas_report
from tests.conftest import ROOT, load_example, missing_tool

from .conftest import _nvcc_reason, _nvshmem_reason


def line(n: int) -> jax.sharding.Mesh:
    return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


# example -> (its mesh, or None for a check without one; the check's small-size arguments)
SMALL: dict[str, tuple[Any, dict[str, Any]]] = {
    "all_to_all": (lambda: line(2), dict(tokens=32, hidden=64, dtype="bfloat16")),
    "allgather": (lambda: line(2), dict(m=64, n=64, dtype="float16")),  # push and pull
    "allgather_gemm": (lambda: line(2), dict(m=64, k=64, n=64, dtype="bfloat16")),
    "cannon": (lambda: load_example("summa").mesh_2d(2), dict(bm=64, bk=64, bn=64, dtype="bfloat16")),
    "cluster_rowsum": (lambda: line(2), dict(m=20, n=256, dtype="bfloat16")),  # clusters of 4 blocks
    "gemm": (None, dict(m=128, n=256, k=128, dtype="bfloat16")),  # the default (Hopper) tiles
    "moe_dispatch": (lambda: line(2), dict(tokens=32, hidden=64, experts_per_pe=2, dtype="bfloat16")),
    "gemm_reducescatter": (lambda: line(2), dict(m=256, k=64, n=128, dtype="bfloat16")),
    "tp_mlp": (lambda: line(2), dict(tokens=64, hidden=64, ffn=128, dtype="bfloat16")),
    "gemm_allreduce_view": (lambda: line(2), dict(m=64, k=64, n=64, dtype="float32")),
    "gemm_fp8": (None, dict(m=128, n=256, k=128, dtype="float8_e4m3fn")),  # k32 e4m3 wgmma
    "nvshmem_queries": (lambda: load_example("nvshmem_queries").mesh_2d(4), dict(m=16, n=32)),
    "reduce_scatter": (lambda: line(2), dict(m=96, n=64, dtype="bfloat16", block_m=64)),  # a ragged last block
    "simple_shift": (lambda: line(2), dict(m=64, n=64, dtype="float32")),
    "softmax": (lambda: line(2), dict(m=21, n=40, dtype="bfloat16")),
    "summa": (lambda: load_example("summa").mesh_2d(2), dict(bm=64, bk=64, bn=64, dtype="bfloat16")),
    "summa_view": (lambda: load_example("summa").mesh_2d(2), dict(bm=64, bk=64, bn=64, dtype="float32")),
    "primitives/get_block": (lambda: line(2), dict(m=64, n=64, dtype="float32")),
    "primitives/put_block": (lambda: line(2), dict(m=64, n=64, dtype="float16")),
    "primitives/sync": (lambda: jax.make_mesh((2, 2), ("x", "y"), devices=jax.devices()[:4]),
                        dict(m=16, n=32, dtype="float32")),
    "primitives/thread_signal": (lambda: line(2), dict(m=64, n=32, dtype="float32")),
}


def example_files() -> list[str]:
    return sorted(p.relative_to(ROOT / "examples").with_suffix("").as_posix()
                  for p in (ROOT / "examples").rglob("*.py"))


def traced_kernels(name: str) -> dict[str, Any]:
    """The verified IR of every kernel that the example's check traces at its small size, by entry."""
    example = load_example(name)
    make_mesh, kwargs = SMALL[name]
    seen: dict[str, Any] = {}
    real_trace = ts.TileKernel.trace

    def recording_trace(self, *args, **kw):
        ir = real_trace(self, *args, **kw)
        seen[ir.name] = ir
        return ir

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ts.TileKernel, "trace", recording_trace)
        verdict = example.check(**kwargs) if make_mesh is None else example.check(make_mesh(), **kwargs)
    assert verdict, f"{name}: {verdict}"  # the kernels traced are the ones that ran correctly
    return seen


@pytest.fixture(scope="module")
def generated() -> dict[str, dict[str, CudaModule] | BaseException]:
    """Each example's kernels as CUDA modules (or what went wrong), no toolchain needed."""
    out: dict[str, dict[str, CudaModule] | BaseException] = {}
    for name in SMALL:
        try:
            out[name] = {k: generate_cuda(ir) for k, ir in traced_kernels(name).items()}
        except Exception as e:  # reported by that example's tests, not by every test of the module
            out[name] = e
    return out


@pytest.fixture(scope="module")
def toolchain(session_cache) -> None:
    reason = _nvcc_reason() or _nvshmem_reason()
    if reason:
        missing_tool(f"nvcc with NVSHMEM's headers is needed to build the examples' kernels: {reason}")


@pytest.fixture(scope="module")
def built(generated, toolchain) -> dict[str, dict[str, Future]]:
    """Every generated module compiling (a future of its cubin), nvcc runs spread over the cores."""
    futures: dict[str, dict[str, Future]] = {}
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        for name, modules in generated.items():
            if isinstance(modules, dict):
                futures[name] = {k: pool.submit(compile_cubin, m.source, arch=m.arch, entry=m.entry,
                                                nvshmem=m.uses_nvshmem) for k, m in modules.items()}
        wait([f for per in futures.values() for f in per.values()])
    return futures


def modules_of(generated, name: str) -> dict[str, CudaModule]:
    modules = generated[name]
    if isinstance(modules, BaseException):
        raise modules
    return modules


# modules in examples/ that are parts of an example, not examples: no check of their own (the example's covers them)
PARTS = {"gemm_orders": "gemm"}


def test_every_example_is_covered():
    examples = [name for name in example_files() if name not in PARTS]
    assert examples == sorted(SMALL), "add each new example to SMALL, with a small size for its check"
    for part, owner in PARTS.items():  # a part is one: its example loads it (so the exception hides no example)
        assert f'sibling(__file__, "{part}")' in (ROOT / "examples" / f"{owner}.py").read_text(), (part, owner)
        assert not hasattr(load_example(part), "check"), f"{part} has a check: it is an example, put it in SMALL"


@pytest.mark.parametrize("name", list(SMALL))
def test_example_kernels_generate_cuda(generated, name):
    modules = modules_of(generated, name)
    assert modules, f"{name}: its check traced no kernel"
    for kernel, module in modules.items():
        assert "__global__" in module.source and module.entry in module.source, kernel
    if name in ("gemm", "gemm_fp8"):  # at its default tiles on sm_90 the GEMM takes the Hopper lowering
        (module,) = modules.values()
        assert module.arch == "sm_90a" and not module.notes, module.notes
    if name in ("allgather_gemm", "gemm_reducescatter", "tp_mlp"):  # communicating kernels keep the wgmma plan
        for kernel, module in modules.items():
            assert module.arch == "sm_90a" and module.uses_nvshmem and not module.notes, (kernel, module.notes)
    if name == "allgather":
        assert len(modules) == 2  # push and pull


@pytest.mark.parametrize("name", list(SMALL))
def test_example_kernels_build_with_nvcc(generated, built, name):
    modules = modules_of(generated, name)
    for kernel, future in built[name].items():
        module = modules[kernel]
        data = future.result().read_bytes()
        assert data[:4] == b"\x7fELF" and module.entry.encode() + b"\0" in data, kernel
        report = ptxas_report(future.result())
        assert report is not None and f"Compiling entry function '{module.entry}'" in report, kernel
        if module.uses_nvshmem:  # NVSHMEM's device state is linked into communicating kernels
            assert b"nvshmemi_device_state_d" in data, kernel
