"""Staged outputs copied out by the kernel, a window per awaited signal (codegen/stage_out.py): which
kernels qualify (and why the others do not), and that the generated tables copy every element of the
output exactly once, right after the wait for the signal of the very put that wrote it, on every PE.

The element-by-element check rebuilds, with numpy slicing, which put's signal word stands for each
element of each PE's output, then replays the tables the way the generated code reads them (the
point index evaluated from the expression the code prints) and marks each element a window covers
with the word of the wait that copied it. nvcc builds each kernel; tests/gpu/test_kernel_staging_gpu.py runs
them on two PEs with NVSHMEM's calls."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

from jax_tilescale import abi
from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.stage_out import copying_waits, point_index, stage_out
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.ir.evaluate import evaluate
from jax_tilescale.ir.expr import PE_VAR, program_id_var
from jax_tilescale.ir.nodes import Loop, Put, walk_stmts
from tests.codegen import staging_kernels as K

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import allgather
import simple_shift

QUALIFY = {
    "allgather, 4 PEs": lambda: K.trace(allgather.allgather(128, 32, 4, np.dtype(np.float16), block_m=32),
                                        (128, 32), np.float16, 4),
    "column windows, 2 PEs": lambda: K.trace(K.column_shift(16, 96, np.float32, 8, 3), (16, 96), np.float32, 2),
    "column windows, 3 PEs": lambda: K.trace(K.column_shift(8, 64, np.float16, 4, 2), (8, 64), np.float16, 3),
    "crossed waits": lambda: K.trace(K.crossed_waits(32, 24, np.float32), (32, 24), np.float32, 2),
}


def _enclosing(body, target, loops=()):
    for s in body:
        if s is target:
            return loops
        if isinstance(s, Loop):
            found = _enclosing(s.body, target, (*loops, s))
            if found is not None:
                return found
    return None


def _points(grid, loops):
    for block in itertools.product(*(range(n) for n in grid)):
        for it in itertools.product(*(range(lp.extent) for lp in loops)):
            yield {**{program_id_var(a): i for a, i in enumerate(block)}, **{lp.var: i for lp, i in zip(loops, it)}}


@pytest.mark.parametrize("name", list(QUALIFY))
def test_every_element_is_copied_once_after_the_signal_of_the_put_that_wrote_it(name: str) -> None:
    kernel = QUALIFY[name]()
    plan, note = stage_out(kernel, call_free=False, has_plan=False)
    assert plan is not None, note
    npes = kernel.num_pes
    (out,) = kernel.outputs
    words: dict[tuple, int] = {}
    # which word announces each element of each PE's output: the puts, replayed with numpy slicing
    owner = np.full((npes, *out.shape), -1, np.int64)
    for put in (s for s in walk_stmts(kernel.body) if isinstance(s, Put)):
        loops = _enclosing(kernel.body, put)
        for env in _points(kernel.grid, loops):
            word = (put.signal.word.buffer.name, tuple(evaluate(e, env) for e in put.signal.word.starts))
            wid = words.setdefault(word, len(words))
            for sender in range(npes):
                penv = {**env, PE_VAR: sender}
                window = tuple(slice(evaluate(e, penv), evaluate(e, penv) + n)
                               for e, n in zip(put.dst.starts, put.dst.sizes))
                owner[(evaluate(put.pe, penv), *window)] = wid
    assert (owner >= 0).all()
    # the tables as the generated code reads them
    copied_by = np.full(owner.shape, -1, np.int64)
    times = np.zeros(owner.shape, np.int64)
    item = out.dtype.itemsize
    for wait in copying_waits(kernel, plan):
        copies = plan.waits[id(wait)]
        index = point_index(copies, kernel.grid)
        for env in _points(kernel.grid, copies.loops):
            slot = copies.slots[evaluate(index, env)]
            if slot < 0:
                continue
            word = (wait.word.buffer.name, tuple(evaluate(e, env) for e in wait.word.starts))
            for pe in range(npes):
                w = plan.windows[pe][slot]
                assert w.param == kernel.params.index(out) and w.home == 0
                for r in range(w.rows):
                    start = w.offset + r * w.pitch
                    assert start % item == 0 and w.row_bytes % item == 0
                    flat = np.arange(start // item, (start + w.row_bytes) // item)
                    view_c, view_t = copied_by[pe].reshape(-1), times[pe].reshape(-1)
                    view_c[flat] = words[word]
                    view_t[flat] += 1
    assert (times == 1).all(), f"elements copied {times.min()}..{times.max()} times"
    np.testing.assert_array_equal(copied_by, owner)


@pytest.mark.parametrize("name", list(QUALIFY))
def test_the_handler_is_told_and_nvcc_builds_it(name: str) -> None:
    kernel = QUALIFY[name]()
    m = generate_cuda(kernel, p2p_peers=False)
    out = kernel.params.index(kernel.outputs[0])
    assert m.staged[out] == abi.STAGE_COPY_OUT | abi.STAGE_KERNEL_OUT
    assert "copied out by the kernel, a window as each signal arrives" in m.source
    assert "ts_stage_out(args, ts_stage_windows[args.pe * " in m.source
    cubin = compile_cubin(m.source, arch=m.arch, entry=m.entry, nvshmem=m.uses_nvshmem)
    assert cubin.read_bytes()[:4] == b"\x7fELF"


REFUSED = {
    "no signal": (lambda: K.trace(simple_shift.simple_shift(64, 32, np.dtype(np.float32)), (64, 32), np.float32, 2),
                  "has no signal"),
    "half covered": (lambda: K.trace(K.half_covered(16, 8, np.float32), (16, 8), np.float32, 2),
                     "do not cover it exactly once"),
    "written locally": (lambda: K.trace(K.also_written_locally(16, 8, np.float32), (16, 8), np.float32, 2),
                        "names it (only the puts may)"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_other_kernels_leave_the_copy_to_the_handler_and_say_why(name: str) -> None:
    make, why = REFUSED[name]
    kernel = make()
    m = generate_cuda(kernel, p2p_peers=False)
    assert not any(f & abi.STAGE_KERNEL_OUT for f in m.staged)
    assert abi.STAGE_COPY_OUT in m.staged
    assert "staged outputs copied out by the handler after the kernel" in m.source and why in m.source
    assert "const TsStageWindow ts_stage_windows[" not in m.source


def test_call_free_kernels_and_the_switch_keep_it_off(monkeypatch) -> None:
    kernel = QUALIFY["column windows, 2 PEs"]()
    m = generate_cuda(kernel)  # one machine: call-free, zero-copy, nothing staged by the kernel
    assert m.call_free and not any(f & abi.STAGE_KERNEL_OUT for f in m.staged)
    monkeypatch.setenv("TILESCALE_KERNEL_STAGING", "0")
    m = generate_cuda(kernel, p2p_peers=False)
    assert not any(f & abi.STAGE_KERNEL_OUT for f in m.staged)
    assert "$TILESCALE_KERNEL_STAGING=0" in m.source
