"""GPU suite: run on the GPU machine, one process per GPU, through the launcher:

    python -m jax_tilescale.launch -n 2 -m pytest tests/gpu -q -o addopts=''
"""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:  # this hook sees the whole session: mark only the GPU suite's items
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def gpu_mesh():
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if len(gpus) < 2:
        pytest.fail("the GPU suite needs at least 2 GPUs, one per process: run it through jax_tilescale.launch")
    return jax.make_mesh((len(gpus),), ("x",))
