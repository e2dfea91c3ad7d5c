"""T.cumsum on the GPU: the generated code against the same sequential reference as the
interpreter's test (tests/compute/test_cumsum.py), bit for bit (one thread per line adds in order
with the `_rn` intrinsics). Every process runs it on its own GPU."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_tilescale as ts
from tests.compute.test_cumsum import BLOCKS, CASES, I32, M, N, _per_block, cumsum_tiles
from tests.compute.test_elementwise import rand


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype, out_dtype, inplace", CASES,
                         ids=[f"{np.dtype(a).name}-{np.dtype(b).name}-{'inplace' if c else 'to_fragment'}"
                              for a, b, c in CASES])
def test_cumsum_on_the_gpu_is_the_sequential_reference(dtype, out_dtype, inplace, dim, reverse):
    rng = np.random.default_rng(11 + dim + 10 * reverse)
    x = rng.integers(-1000, 1000, (BLOCKS * M, N)).astype(I32) if dtype == I32 else rand(rng, (BLOCKS * M, N), dtype)
    kern = ts.kernel(out_shape=jax.ShapeDtypeStruct(x.shape, out_dtype), grid=(BLOCKS,))(
        cumsum_tiles(dtype, out_dtype, dim, reverse, inplace))
    got = np.asarray(jax.jit(kern)(x))
    np.testing.assert_array_equal(got, _per_block(x, dim, reverse, out_dtype))
