"""GPU suite: run on the GPU machine, one process per GPU, through the launcher:

    python -m jax_tilescale.launch -n 2 -m pytest tests/gpu -q -o addopts=''

A plain `pytest` leaves this directory out (pyproject's addopts). Where jax has no GPU, every test
here fails at set-up with a message, whichever way it was selected: these tests are about CUDA
code on GPUs and must never pass through the CPU interpreter instead.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import jax
import pytest

_HERE = Path(__file__).resolve().parent
RUN_HINT = "python -m jax_tilescale.launch -n 2 -m pytest tests/gpu -q -o addopts=''"
# Set by tools/gpu_test.sh when two PEs (processes) share one GPU under MPS (../shared/notes/two_pes_one_gpu.md):
# then NCCL refuses the XLA collectives that tests marked `own_gpu` use, and those are skipped, saying why.
PES_SHARE_GPU = os.environ.get("TILESCALE_PES_SHARE_GPU") == "1"


def _in_gpu_suite(item: pytest.Item) -> bool:
    return _HERE in Path(item.path).resolve().parents


def pytest_collection_modifyitems(config, items):
    for item in items:  # this hook sees the whole session: mark only the GPU suite's items
        if _in_gpu_suite(item):
            item.add_marker(pytest.mark.gpu)
            if "gpu_mesh" in getattr(item, "fixturenames", ()):  # needs two or more PEs (processes)
                item.add_marker(pytest.mark.multi_pe)


@functools.cache
def _no_gpu_reason() -> str | None:
    backend = jax.default_backend()
    if backend == "gpu":
        return None
    return (f"tests/gpu needs GPUs, but jax's default backend here is {backend!r}; these tests do not run "
            f"through the CPU interpreter instead. On a GPU machine: {RUN_HINT}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _in_gpu_suite(item):
        reason = _no_gpu_reason()
        if reason:
            pytest.fail(reason, pytrace=False)
        if PES_SHARE_GPU and item.get_closest_marker("own_gpu"):
            pytest.skip("needs one GPU per PE (an XLA collective over NCCL, which refuses two ranks on one GPU, or "
                        "memory sizing of a whole GPU); TILESCALE_PES_SHARE_GPU=1 says the PEs share one")


@pytest.fixture(scope="session")
def gpu_mesh():
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if len(gpus) < 2:
        pytest.fail(f"this test needs at least 2 GPUs, one per process: {RUN_HINT}")
    return jax.make_mesh((len(gpus),), ("x",))
