"""Signals, waits, barriers and collectives on simulated devices through jax.jit(jax.shard_map):
signal_op, wait_* on local and remote words, sync_all and the team barriers, broadcast and
fcollect at every scope, over the whole mesh and over teams (a subset of a 2x2 or 2x4 mesh).
The `check_*` functions take any mesh: tests/gpu runs them on GPUs."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

from .util import F32, assert_equal, mesh_of, per_device, random_rows, shard_run

M, N = 8, 16
OUT = jax.ShapeDtypeStruct((M, N), F32)


def shifted(x: np.ndarray, npes: int, shift: int) -> np.ndarray:
    return np.roll(per_device(x, npes), shift, axis=0).reshape(x.shape)


@ts.kernel(out_shape=OUT, grid=(1,))
def notify(a, out):
    """TileScale's notify pattern: put, fence, signal_op; the receiver waits for the word. In late
    delivery the wait is what forces the data and then the signal to arrive, in that order."""
    me, n = T.get_pe(), T.get_pe_num()
    sig = T.alloc_signal(2)
    inbox = T.alloc_symmetric((M, N), F32)
    T.putmem_nbi_block(inbox, a, pe=(me + 1) % n)
    T.fence()
    T.signal_op(sig[1], me + 5, T.SignalOp.SET, (me + 1) % n)
    T.signal_op(sig[0], 2, T.SignalOp.ADD, (me + 1) % n)
    T.signal_op(sig[0], 3, T.SignalOp.ADD, (me + 1) % n)
    T.signal_wait_until(sig[0], T.Cmp.EQ, 5)
    T.wait_eq(sig[1], (me + n - 1) % n + 5)
    T.copy(inbox, out)


def check_notify(mesh: jax.sharding.Mesh, seed: int) -> None:
    x = random_rows(np.random.default_rng(seed), mesh.size, (M, N))
    (out,) = shard_run(notify, mesh, x)
    assert_equal(out, shifted(x, mesh.size, 1))


@pytest.mark.parametrize("npes", [2, 4])
def test_put_fence_signal_op_then_wait(npes: int) -> None:
    check_notify(mesh_of((npes,)), npes)


@ts.kernel(out_shape=OUT, grid=(1,))
def waits(a, flags, out):
    """The previous PE puts int32 flags into this PE's symmetric words; each wait_* holds only
    once they arrive. Then every PE polls the *next* PE's words through nvshmem_ptr (pe=...)."""
    me, n = T.get_pe(), T.get_pe_num()
    words = T.alloc_symmetric((8,), np.int32)
    T.putmem_nbi(words[0:6], flags, pe=(me + 1) % n)
    T.wait_eq(words[0], 5)
    T.wait_ne(words[1], 0)
    T.wait_ge(words[2], 9)
    T.wait_gt(words[3], 2)
    T.wait_le(words[4], -3)
    T.wait_lt(words[5], -7)
    T.wait_eq(words[0], 5, pe=(me + 1) % n)  # remote: the next PE's word, once its flags arrive
    T.wait_lt(words[5], -7, pe=(me + 1) % n)
    T.copy(a, out)


def check_waits(mesh: jax.sharding.Mesh, seed: int) -> None:
    flags = np.array([5, 1, 9, 3, -3, -8], np.int32)
    x = random_rows(np.random.default_rng(10 + seed), mesh.size, (M, N))
    (out,) = shard_run(waits, mesh, x, np.tile(flags, mesh.size))
    assert_equal(out, x)


@pytest.mark.parametrize("npes", [2, 4])
def test_every_wait_comparison_on_local_and_remote_words(npes: int) -> None:
    check_waits(mesh_of((npes,)), npes)


@ts.kernel(out_shape=OUT, grid=(2,))
def poll(a, ones, out):
    """PE p polls PE p+1's word, which only PE p+1 itself writes (a local copy): the remote
    poll must notice a write that no transfer made."""
    me, n, bx = T.get_pe(), T.get_pe_num(), T.program_id(0)
    flag = T.alloc_symmetric((2,), np.int32)
    rows = T.ds(bx * (M // 2), M // 2)
    T.copy(ones[T.ds(bx, 1)], flag[T.ds(bx, 1)])  # each block sets its word of its own PE to 1
    T.wait_eq(flag[bx], 1, pe=(me + 1) % n)
    T.copy(a[rows, :], out[rows, :])


def check_remote_poll(mesh: jax.sharding.Mesh, seed: int) -> None:
    x = random_rows(np.random.default_rng(20 + seed), mesh.size, (M, N))
    (out,) = shard_run(poll, mesh, x, np.ones(2 * mesh.size, np.int32))
    assert_equal(out, x)


def test_remote_wait_sees_a_peers_local_store() -> None:
    check_remote_poll(mesh_of((4,)), 0)


@ts.kernel(out_shape=OUT, grid=(4,))
def synced(a, out):
    """Blocks store into symmetric scratch, meet at sync_all, then read another block's rows on the
    next PE through get_block: the stores are ordered before the loads (no race, right data)."""
    nb, part = 4, M // 4
    bx, me, n = T.program_id(0), T.get_pe(), T.get_pe_num()
    scratch = T.alloc_symmetric((M, N), F32)
    T.copy(a[T.ds(bx * part, part), :], scratch[T.ds(bx * part, part), :])
    T.sync_all()
    other = T.ds(((bx + 1) % nb) * part, part)
    T.get_block(scratch[other, :], out[other, :], src_pe=(me + 1) % n)


def check_sync_all(mesh: jax.sharding.Mesh, seed: int) -> None:
    x = random_rows(np.random.default_rng(30 + seed), mesh.size, (M, N))
    (out,) = shard_run(synced, mesh, x)
    assert_equal(out, shifted(x, mesh.size, -1))


@pytest.mark.parametrize("npes", [2, 4])
def test_sync_all_orders_blocks_stores(npes: int) -> None:
    check_sync_all(mesh_of((npes,)), npes)


def team_kernel(quiet: bool, scope: str, axes: tuple[str, ...]) -> ts.TileKernel:
    """Puts (barrier forms) or stores (sync forms) into the next PE's scratch, then a team barrier,
    then a copy out. A team is the kernel's PE space: mesh_axes picks it."""
    barrier = getattr(T, ("barrier_all" if quiet else "sync_all") + f"_{scope}")

    def exchange(a, out):
        me, n = T.get_pe(), T.get_pe_num()
        inbox = T.alloc_symmetric((M, N), F32)
        if quiet:
            T.putmem_nbi_block(inbox, a, pe=(me + 1) % n)
        else:
            T.put_block(a, inbox, dst_pe=(me + 1) % n)
        barrier()
        T.copy(inbox, out)

    return ts.kernel(exchange, out_shape=OUT, grid=(1,), mesh_axes=axes, name=f"team_{scope}_{quiet}")


def check_team_barrier(mesh: jax.sharding.Mesh, quiet: bool, scope: str, axis: str) -> None:
    """`axis` is the kernel's PE space; PEs of one team are consecutive along the last mesh axis
    when `axis` is the last, else strided."""
    kern = team_kernel(quiet, scope, (axis,))
    shape = tuple(mesh.shape.values())
    x = random_rows(np.random.default_rng(mesh.size), mesh.size, (M, N))
    (out,) = shard_run(kern, mesh, x)
    k = list(mesh.axis_names).index(axis)
    want = np.roll(x.reshape(*shape, M, N), 1, axis=k).reshape(x.shape)
    assert_equal(out, want)


@pytest.mark.parametrize("quiet", [True, False], ids=["barrier", "sync"])
@pytest.mark.parametrize("scope", ["block", "warp"])
@pytest.mark.parametrize("mesh_shape,axis", [((4,), "x"), ((2, 2), "y"), ((2, 4), "y"), ((2, 2), "x")])
def test_team_barriers(quiet: bool, scope: str, mesh_shape: tuple[int, ...], axis: str) -> None:
    names = ("x",) if len(mesh_shape) == 1 else ("x", "y")
    check_team_barrier(mesh_of(mesh_shape, names), quiet, scope, axis)


def collective_kernel(npes: int, root: int, axes: tuple[str, ...] | None = None) -> ts.TileKernel:
    def coll(a, bcast, gathered, bcast_w, gathered_b):
        tile = T.alloc_shared((M, N), F32)
        scratch = T.alloc_symmetric((M, N), F32)
        T.copy(a, tile)
        T.broadcast(bcast, a, root)
        T.fcollect(gathered, a)
        T.broadcast_warp(scratch, tile, root=(root + 1) % npes)
        T.copy(scratch[:, 4:N], bcast_w[:, 4:N])
        # Its destination must not be in use on any PE when the root may write it: columns 0:4
        # of bcast_w are written by this broadcast alone (the race detector checks this).
        T.broadcast_block(bcast_w[:, 0:4], a[:, 4:8], root, size=M * 4 * 4)
        T.fcollect_warp(gathered_b[:, 0:8], tile[:, 0:8])
        T.fcollect_block(gathered_b[:, 8:N], a[:, 8:N], size=M * 8 * 4)

    wide = jax.ShapeDtypeStruct((npes * M, N), F32)
    return ts.kernel(coll, out_shape=(OUT, wide, OUT, wide), grid=(1,), mesh_axes=axes, name="collectives")


def check_collectives(mesh: jax.sharding.Mesh, axis: str, seed: int) -> None:
    """broadcast and fcollect at every scope over mesh axis `axis` (a team when the mesh has more)."""
    shape = tuple(mesh.shape.values())
    k = list(mesh.axis_names).index(axis)
    npes, root = shape[k], shape[k] - 1
    kern = collective_kernel(npes, root, (axis,))
    x = random_rows(np.random.default_rng(seed), mesh.size, (M, N))
    outs = shard_run(kern, mesh, x, spec=P(tuple(mesh.axis_names)))
    xs = np.moveaxis(x.reshape(*shape, M, N), k, -3)  # [..., npes, M, N]: each team along axis -3
    team_rows = xs.reshape(*xs.shape[:-3], npes * M, N)  # fcollect: the team's blocks stacked

    def per_pe(value: np.ndarray) -> np.ndarray:
        """`value` (one per team) for every PE of the team, back in mesh order."""
        full = np.broadcast_to(value[..., None, :, :], (*value.shape[:-2], npes, *value.shape[-2:]))
        return np.moveaxis(full, -3, k).reshape(mesh.size * value.shape[-2], N)

    bcast_w = xs[..., (root + 1) % npes, :, :].copy()
    bcast_w[..., 0:4] = xs[..., root, :, 4:8]
    assert_equal(outs[0], per_pe(xs[..., root, :, :]))
    assert_equal(outs[1], per_pe(team_rows))
    assert_equal(outs[2], per_pe(bcast_w))
    assert_equal(outs[3], per_pe(team_rows))


@pytest.mark.parametrize("npes", [2, 4])
def test_broadcast_and_fcollect_every_scope(npes: int) -> None:
    check_collectives(mesh_of((npes,)), "x", 40 + npes)


@pytest.mark.parametrize("mesh_shape,axis", [((2, 2), "x"), ((2, 4), "y")])
def test_collectives_over_a_team(mesh_shape: tuple[int, int], axis: str) -> None:
    """The kernel's PE space is one mesh axis: each team (the devices that share the other
    coordinate) broadcasts and gathers within itself."""
    check_collectives(mesh_of(mesh_shape, ("x", "y")), axis, 50)


@ts.kernel(out_shape=OUT, grid=(4,))
def many(a, out):
    """Four blocks per PE each make one barrier_all_block call: four instances, all complete."""
    rows = T.ds(T.program_id(0) * (M // 4), M // 4)
    inbox = T.alloc_symmetric((M, N), F32)
    T.putmem_nbi_block(inbox[rows, :], a[rows, :], pe=(T.get_pe() + 1) % T.get_pe_num())
    T.barrier_all()  # every block's put is complete everywhere
    T.barrier_all_block()
    T.copy(inbox[rows, :], out[rows, :])


def check_many_blocks(mesh: jax.sharding.Mesh, seed: int) -> None:
    x = random_rows(np.random.default_rng(60 + seed), mesh.size, (M, N))
    (out,) = shard_run(many, mesh, x)
    assert_equal(out, shifted(x, mesh.size, 1))


def test_several_blocks_pair_their_calls_in_arrival_order() -> None:
    check_many_blocks(mesh_of((4,)), 0)
