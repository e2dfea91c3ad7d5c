"""Signals, waits, barriers and collectives on simulated devices through jax.jit(jax.shard_map):
signal_op, wait_* on local and remote words, sync_all and the team barriers, broadcast and
fcollect at every scope, over the whole mesh and over teams (a subset of a 2x2 or 2x4 mesh)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

from .util import F32, mesh_of, per_device, random_rows, shard_run

M, N = 8, 16
OUT = jax.ShapeDtypeStruct((M, N), F32)


@pytest.mark.parametrize("npes", [2, 4])
def test_put_fence_signal_op_then_wait(npes: int) -> None:
    """TileScale's notify pattern: put, fence, signal_op; the receiver waits for the word. In late
    delivery the wait is what forces the data and then the signal to arrive, in that order."""

    @ts.kernel(out_shape=OUT, grid=(1,))
    def notify(a, out):
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

    x = random_rows(np.random.default_rng(npes), npes, (M, N))
    (out,) = shard_run(notify, mesh_of((npes,)), x)
    np.testing.assert_array_equal(out, np.roll(per_device(x, npes), 1, axis=0).reshape(x.shape))


@pytest.mark.parametrize("npes", [2, 4])
def test_every_wait_comparison_on_local_and_remote_words(npes: int) -> None:
    """The previous PE puts int32 flags into this PE's symmetric words; each wait_* holds only
    once they arrive. Then every PE polls the *next* PE's words through nvshmem_ptr (pe=...)."""

    @ts.kernel(out_shape=OUT, grid=(1,))
    def waits(a, flags, out):
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

    flags = np.array([5, 1, 9, 3, -3, -8], np.int32)
    x = random_rows(np.random.default_rng(10 + npes), npes, (M, N))
    (out,) = shard_run(waits, mesh_of((npes,)), x, np.tile(flags, npes))
    np.testing.assert_array_equal(out, x)


def test_remote_wait_sees_a_peers_local_store() -> None:
    """PE p polls PE p+1's word, which only PE p+1 itself writes (a local copy): the remote
    poll must notice a write that no transfer made."""
    npes = 4

    @ts.kernel(out_shape=OUT, grid=(2,))
    def poll(a, ones, out):
        me, n, bx = T.get_pe(), T.get_pe_num(), T.program_id(0)
        flag = T.alloc_symmetric((2,), np.int32)
        rows = T.ds(bx * (M // 2), M // 2)
        T.copy(ones[T.ds(bx, 1)], flag[T.ds(bx, 1)])  # each block sets its word of its own PE to 1
        T.wait_eq(flag[bx], 1, pe=(me + 1) % n)
        T.copy(a[rows, :], out[rows, :])

    x = random_rows(np.random.default_rng(20), npes, (M, N))
    (out,) = shard_run(poll, mesh_of((npes,)), x, np.ones(2 * npes, np.int32))
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("npes", [2, 4])
def test_sync_all_orders_blocks_stores(npes: int) -> None:
    """Blocks store into symmetric scratch, meet at sync_all, then read another block's rows on the
    next PE through get_block: the stores are ordered before the loads (no race, right data)."""
    nb = 4

    @ts.kernel(out_shape=OUT, grid=(nb,))
    def synced(a, out):
        bx, me, n = T.program_id(0), T.get_pe(), T.get_pe_num()
        part = M // nb
        scratch = T.alloc_symmetric((M, N), F32)
        T.copy(a[T.ds(bx * part, part), :], scratch[T.ds(bx * part, part), :])
        T.sync_all()
        other = T.ds(((bx + 1) % nb) * part, part)
        T.get_block(scratch[other, :], out[other, :], src_pe=(me + 1) % n)

    x = random_rows(np.random.default_rng(30 + npes), npes, (M, N))
    (out,) = shard_run(synced, mesh_of((npes,)), x)
    np.testing.assert_array_equal(out, np.roll(per_device(x, npes), -1, axis=0).reshape(x.shape))


def team_kernel(quiet: bool, scope: str):
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

    return exchange


@pytest.mark.parametrize("quiet", [True, False], ids=["barrier", "sync"])
@pytest.mark.parametrize("scope", ["block", "warp"])
@pytest.mark.parametrize("mesh_shape,axes", [((4,), ("x",)), ((2, 2), ("y",)), ((2, 4), ("y",))])
def test_team_barriers(quiet: bool, scope: str, mesh_shape: tuple[int, ...], axes: tuple[str, ...]) -> None:
    names = ("x",) if len(mesh_shape) == 1 else ("x", "y")
    mesh = mesh_of(mesh_shape, names)
    kern = ts.kernel(team_kernel(quiet, scope), out_shape=OUT, grid=(1,), mesh_axes=axes,
                     name=f"team_{scope}_{quiet}")
    devices = int(np.prod(mesh_shape))
    x = random_rows(np.random.default_rng(devices), devices, (M, N))
    (out,) = shard_run(kern, mesh, x)
    team = mesh_shape[-1] if axes == ("y",) else devices  # PEs of one team are consecutive devices
    want = np.roll(x.reshape(devices // team, team, M, N), 1, axis=1).reshape(x.shape)
    np.testing.assert_array_equal(out, want)


def collective_kernel(npes: int, root: int):
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

    return ts.kernel(
        coll,
        out_shape=(OUT, jax.ShapeDtypeStruct((npes * M, N), F32), OUT, jax.ShapeDtypeStruct((npes * M, N), F32)),
        grid=(1,),
        name="collectives",
    )


@pytest.mark.parametrize("npes", [2, 4])
def test_broadcast_and_fcollect_every_scope(npes: int) -> None:
    root = npes - 1
    kern = collective_kernel(npes, root)
    x = random_rows(np.random.default_rng(40 + npes), npes, (M, N))
    bcast, gathered, bcast_w, gathered_b = (per_device(o, npes) for o in shard_run(kern, mesh_of((npes,)), x))
    xs = per_device(x, npes)
    for p in range(npes):
        np.testing.assert_array_equal(bcast[p], xs[root])
        np.testing.assert_array_equal(gathered[p], x)  # PE 0..n-1 blocks stacked along rows
        np.testing.assert_array_equal(gathered_b[p], x)
        want = xs[(root + 1) % npes].copy()
        want[:, 0:4] = xs[root][:, 4:8]
        np.testing.assert_array_equal(bcast_w[p], want)


@pytest.mark.parametrize("mesh_shape,axes", [((2, 2), ("x",)), ((2, 4), ("y",))])
def test_collectives_over_a_team(mesh_shape: tuple[int, int], axes: tuple[str, ...]) -> None:
    """The kernel's PE space is one mesh axis: each team (the devices that share the other
    coordinate) broadcasts and gathers within itself."""
    mesh = mesh_of(mesh_shape, ("x", "y"))
    team_axis = 0 if axes == ("x",) else 1
    npes = mesh_shape[team_axis]
    devices = mesh_shape[0] * mesh_shape[1]
    base = collective_kernel(npes, root=npes - 1)
    kern = ts.kernel(base.fn, out_shape=base.spec.out_shape, grid=(1,), mesh_axes=axes, name="team_collectives")
    x = random_rows(np.random.default_rng(devices + team_axis), devices, (M, N))
    outs = shard_run(kern, mesh, x, spec=P(("x", "y")))
    xs = x.reshape(*mesh_shape, M, N)
    bcast = outs[0].reshape(*mesh_shape, M, N)
    gathered = outs[1].reshape(*mesh_shape, npes * M, N)
    for i in range(mesh_shape[0]):
        for j in range(mesh_shape[1]):
            team = [xs[k, j] for k in range(npes)] if team_axis == 0 else [xs[i, k] for k in range(npes)]
            np.testing.assert_array_equal(bcast[i, j], team[npes - 1])
            np.testing.assert_array_equal(gathered[i, j], np.concatenate(team))


def test_several_blocks_pair_their_calls_in_arrival_order() -> None:
    """Four blocks per PE each make one barrier_all_block call: four instances, all complete."""
    npes, nb = 4, 4

    @ts.kernel(out_shape=OUT, grid=(nb,))
    def many(a, out):
        rows = T.ds(T.program_id(0) * (M // nb), M // nb)
        inbox = T.alloc_symmetric((M, N), F32)
        T.putmem_nbi_block(inbox[rows, :], a[rows, :], pe=(T.get_pe() + 1) % T.get_pe_num())
        T.barrier_all()  # every block's put is complete everywhere
        T.barrier_all_block()
        T.copy(inbox[rows, :], out[rows, :])

    x = random_rows(np.random.default_rng(60), npes, (M, N))
    (out,) = shard_run(many, mesh_of((npes,)), x)
    np.testing.assert_array_equal(out, np.roll(per_device(x, npes), 1, axis=0).reshape(x.shape))
