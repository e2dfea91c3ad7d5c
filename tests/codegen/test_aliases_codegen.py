"""Generated CUDA and launch attributes of kernels with `input_output_aliases` (no GPU): the two refs
of a pair are one memory, so a copy between them carries no `__restrict__`, the input is addressed
through its output's param (the staged copy when peers touch the pair), that output is staged both
ways, and the entry barrier keeps peers out until the handler has copied it in."""

from __future__ import annotations

import re

import jax
import numpy as np

import jax_tilescale as ts
from jax_tilescale import abi
from jax_tilescale import language as T
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.lowering import staged_flags

F32 = np.float32
M, N = 64, 8
SDS = jax.ShapeDtypeStruct


def _copy_rows(aliases):
    @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,), input_output_aliases=aliases)
    def shift_rows(x, o):
        T.copy(x[0:M // 2, :], o[M // 2:M, :])

    return shift_rows.trace(SDS((M, N), F32))


def test_a_copy_between_the_refs_of_a_pair_has_no_restrict():
    aliased = generate_cuda(_copy_rows({0: 0})).source
    plain = generate_cuda(_copy_rows(None)).source
    assert "* __restrict__ ts_src" in plain and "* __restrict__ ts_dst" in plain
    assert "ts_src = " in aliased and "ts_dst = " in aliased
    assert "__restrict__ ts_src" not in aliased and "__restrict__ ts_dst" not in aliased
    # the input's pointer is the output's param (index 1); unaliased it is its own (index 0)
    assert re.search(r"\bp_x = static_cast<unsigned char\*>\(args\.buffers\[1\]\)", aliased), aliased
    assert re.search(r"\bp_x = static_cast<unsigned char\*>\(args\.buffers\[0\]\)", plain), plain


def _peer_kernel(aliases, get: bool):
    h = M // 2

    @ts.kernel(out_shape=SDS((M, N), F32), grid=(1,), input_output_aliases=aliases)
    def to_peer(x, o):
        peer = (T.get_pe() + 1) % T.get_pe_num()
        if get:
            T.getmem_block(o[h:M, :], x[0:h, :], pe=peer)
        else:
            tile = T.alloc_shared((h, N), F32)
            T.copy(x[0:h, :], tile)
            T.putmem_block(o[h:M, :], tile, pe=peer)

    return to_peer.trace(SDS((M, N), F32), mesh_axes=("x",), num_pes=2)


def test_an_aliased_output_that_peers_write_is_staged_both_ways_behind_an_entry_barrier():
    both = abi.STAGE_COPY_IN | abi.STAGE_COPY_OUT
    put = _peer_kernel({0: 0}, get=False)
    assert staged_flags(put) == [0, both]
    assert staged_flags(_peer_kernel(None, get=False)) == [0, abi.STAGE_COPY_OUT]  # unaliased: out only
    # with NVSHMEM's calls (several machines) the barrier keeps peers off until the copy-in is done
    source = generate_cuda(put, p2p_peers=False).source
    assert "entry barrier: peers read or write o (o copied in by the handler before the launch)" in source
    assert "ts_call_start(args" in source
    assert "ts_call_start(args" not in generate_cuda(_peer_kernel(None, get=False), p2p_peers=False).source
    # call-free, every peer access waits for the owner's publish of the launch instead: no barrier
    free = generate_cuda(put).source
    assert "ts_call_start(args" not in free and "ts_publish_params(args, ts_seq, 0x2u" in free
    assert "no entry barrier: peers read or write o only after waiting for this PE's publish" in free


def test_an_aliased_input_that_peers_read_is_reached_through_its_staged_output():
    get = _peer_kernel({0: 0}, get=True)
    # the input itself is not staged: the kernel (and its peers, through nvshmem_ptr of this pointer)
    # address it through the output's staged copy, which starts with XLA's contents
    assert staged_flags(get) == [0, abi.STAGE_COPY_IN | abi.STAGE_COPY_OUT]
    assert staged_flags(_peer_kernel(None, get=True)) == [abi.STAGE_COPY_IN, 0]
    for p2p_peers in (False, True):
        source = generate_cuda(get, p2p_peers=p2p_peers).source
        assert re.search(r"\bp_x = static_cast<unsigned char\*>\(args\.buffers\[1\]\)", source), source
    assert "ts_call_start(args" in generate_cuda(get, p2p_peers=False).source


def test_a_tensor_map_of_an_aliased_input_is_encoded_for_its_outputs_param():
    """The handler encodes each TMA map for `buffers[index]`; an aliased input's must be its output's
    (the staged copy when peers touch the pair), the first of the 9 fields of each map."""
    from jax_tilescale.lowering.cuda import aliased_tensor_maps

    ir = _copy_rows({0: 0})
    fields = (0, 7, 2, 8, 64, 32, 8, 16, 3, 1, 7, 2, 8, 64, 32, 8, 16, 3)  # a map of x, one of o
    assert aliased_tensor_maps(ir, fields) == [1, *fields[1:9], 1, *fields[10:]]
    assert aliased_tensor_maps(_copy_rows(None), fields) == list(fields)
