"""T.load of data a peer delivered, on real GPUs (NVSHMEM), one process per GPU: the CPU suite's
check of loaded sizes, offsets, PEs, wait values and signal words (tests/primitives), and the MoE
dispatch example that exchanges its token counts on the device. References are computed on the
host (no XLA collective: these run with two PEs sharing one GPU too).

    python -m jax_tilescale.launch -n 2 -m pytest tests/gpu/test_loads_gpu.py -q -o addopts=''
"""

from __future__ import annotations

import pytest

from tests.conftest import load_example
from tests.primitives.test_delivered_loads import check_delivered_loads

moe = load_example("moe_dispatch")


def test_delivered_loads(gpu_mesh):
    for seed in range(3):  # repeated launches: the scratch and the signal words start from zero each time
        check_delivered_loads(gpu_mesh, seed)


@pytest.mark.parametrize(
    "tokens,hidden,experts_per_pe,dtype",
    [(64, 128, 2, "bfloat16"), (1024, 1024, 2, "bfloat16"), (256, 512, 4, "float32"), (32, 64, 1, "float16")],
)
def test_moe_dispatch(gpu_mesh, tokens, hidden, experts_per_pe, dtype):
    for seed in range(2):
        assert moe.check(gpu_mesh, tokens=tokens, hidden=hidden, experts_per_pe=experts_per_pe, dtype=dtype,
                         seed=seed)
