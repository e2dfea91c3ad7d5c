"""T.alloc(shape, dtype, level=): every level on the interpreter against numpy, the level in the IR
text, "global" scratch (zero per launch, shared by the blocks of a PE, not addressable by peers),
its CUDA (a slice of the launch's scratch), and the errors (level spelled wrong, peers writing a
"global" buffer) naming the user's line."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.errors import KernelTraceError
from jax_tilescale.ir.buffers import BufferKind, MemLevel
from tests.compute.test_elementwise import rand, run1
from tests.primitives.util import mesh_of, shard_run

SDS = jax.ShapeDtypeStruct


def _line_of(marker: str) -> str:
    """`file:line` of the line of this file holding `marker` (what errors name)."""
    lines = open(__file__).read().splitlines()
    return f"{__file__}:{next(i + 1 for i, t in enumerate(lines) if t.endswith(marker))}"


def _staged_kernel(n=64, blocks=4, level_frag="l0", level_smem="l1"):
    @ts.kernel(out_shape=SDS((blocks, n), jnp.float32), grid=(blocks,))
    def k(x, out):
        bx = T.program_id(0)
        s = T.alloc((1, n), jnp.float32, level=level_smem)
        f = T.alloc((1, n), jnp.float32, level=level_frag)
        g = T.alloc((blocks, n), jnp.float32, level="global")  # zero at launch
        T.copy(x[T.ds(bx, 1), :], s)
        for i, j in T.Parallel(1, n):
            f[i, j] = s[i, j] * 2.0
        for i, j in T.Parallel(1, n):
            g[bx, j] = g[bx, j] + f[i, j]  # 0 + 2x: the scratch starts at zero
        T.copy(g[T.ds(bx, 1), :], out[T.ds(bx, 1), :])

    return k


def test_every_on_chip_level_and_global_scratch_compute_like_numpy():
    x = rand(np.random.default_rng(70), (4, 64), np.float32)
    (got,) = run1(_staged_kernel(), x)
    np.testing.assert_array_equal(got, x * 2.0)


def test_levels_accept_enum_and_strings_and_pick_the_allocator():
    k = _staged_kernel(level_frag=MemLevel.L0, level_smem="L1")
    ir = k.trace(SDS((4, 64), jnp.float32))
    kinds = {b.level: b.kind for b in ir.allocs}
    assert kinds == {MemLevel.L0: BufferKind.FRAGMENT, MemLevel.L1: BufferKind.SHARED,
                     MemLevel.GLOBAL: BufferKind.GLOBAL}
    text = k.ir_text(SDS((4, 64), jnp.float32))
    assert "shared float32[1, 64] level=l1" in text
    assert "fragment float32[1, 64] level=l0" in text
    assert "global float32[4, 64] level=global" in text


def test_global_scratch_is_zero_every_launch_and_shared_by_the_blocks():
    """Every block adds its row into one global accumulator (atomics), meets the others, and reads
    the total: the scratch starts at zero in each of two launches (no carry-over)."""
    blocks, n = 4, 32

    @ts.kernel(out_shape=SDS((blocks, n), jnp.float32), grid=(blocks,))
    def k(x, out):
        bx = T.program_id(0)
        acc = T.alloc((n,), jnp.float32, level="global")
        for j in T.Parallel(n):
            T.atomic_add(acc[j], x[bx, j])
        T.barrier_all()
        for j in T.Parallel(n):
            out[bx, j] = acc[j]

    rng = np.random.default_rng(71)
    x = rng.integers(-8, 9, (blocks, n)).astype(np.float32)  # exact sums in any order
    for _ in range(2):
        (got,) = run1(k, x)
        np.testing.assert_array_equal(got, np.tile(x.sum(0), (blocks, 1)))


def test_symmetric_level_is_peer_addressable():
    """level="symmetric" is T.alloc_symmetric: a peer puts into it."""
    n = 16

    @ts.kernel(out_shape=SDS((1, n), jnp.float32), grid=(1,))
    def k(x, out):
        me, npes = T.get_pe(), T.get_pe_num()
        box = T.alloc((1, n), jnp.float32, level="symmetric")
        T.putmem_block(box, x, pe=(me + 1) % npes)
        T.barrier_all()
        T.copy(box, out)

    x = rand(np.random.default_rng(72), (4, n), np.float32)
    (got,) = shard_run(k, mesh_of((4,)), x)
    np.testing.assert_array_equal(np.asarray(got), np.roll(x, 1, axis=0))


def test_level_spelled_wrong_names_the_line():
    @ts.kernel(out_shape=SDS((8,), jnp.float32), grid=(1,))
    def k(x, out):
        T.alloc((8,), jnp.float32, level="L2")  # the bad line

    with pytest.raises(KernelTraceError) as e:
        k.trace(SDS((8,), jnp.float32))
    msg = str(e.value)
    assert "level='L2'" in msg and "'l0', 'l1', 'global', 'symmetric'" in msg
    assert "test_alloc_levels.py" in msg and _line_of("# the bad line") in msg


def test_bad_shape_names_the_level():
    @ts.kernel(out_shape=SDS((8,), jnp.float32), grid=(1,))
    def k(x, out):
        T.alloc((0, 8), jnp.float32, level="global")

    with pytest.raises(KernelTraceError, match='alloc\\(level="global"\\): shape must be positive'):
        k.trace(SDS((8,), jnp.float32))


def test_peers_cannot_write_global_scratch():
    @ts.kernel(out_shape=SDS((8,), jnp.float32), grid=(1,))
    def k(x, out):
        g = T.alloc((8,), jnp.float32, level="global")
        T.putmem_block(g, x, pe=0)  # the bad put

    with pytest.raises(KernelTraceError) as e:
        k.trace(SDS((8,), jnp.float32), mesh_axes=("x",), num_pes=2)
    msg = str(e.value)
    assert "global" in msg and _line_of("# the bad put") in msg


def test_global_scratch_is_a_slice_of_the_launch_scratch_in_cuda():
    """No NVSHMEM for a kernel that only uses global scratch: the handler's plain scratch holds it."""
    ir = _staged_kernel().trace(SDS((4, 64), jnp.float32))
    assert not ir.uses_nvshmem()
    mod = generate_cuda(ir, "sm_90")
    assert mod.scratch_bytes >= 4 * 64 * 4
    assert "ts_scratch + 0;" in mod.source and "level=global" in mod.source


def test_alloc_is_named_by_its_variable_or_by_name():
    """T.alloc buffers are called like every other allocation: by the assigned variable, else `name=`."""
    k = _staged_kernel()
    names = {b.level: b.name for b in k.trace(SDS((4, 64), jnp.float32)).allocs}
    assert names == {MemLevel.L1: "s", MemLevel.L0: "f", MemLevel.GLOBAL: "g"}

    @ts.kernel(out_shape=SDS((1, 64), jnp.float32), grid=(1,))
    def named(x, out):
        T.copy(x, T.alloc((1, 64), jnp.float32, level="l1", name="staging"))
        T.copy(x, out)

    assert [b.name for b in named.trace(SDS((1, 64), jnp.float32)).allocs] == ["staging"]
