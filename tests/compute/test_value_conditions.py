"""Python `if`/`elif`/`else` and `a if c else b` on element values, in the interpreter on a
simulated CPU device, against jax.numpy (jnp.where references on fresh random data: float32,
float16, bfloat16, int32; ragged guards), the race detector's view of branches, what the
verifier proves under a guard, and the errors for branches that would need the whole block."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tilescale as ts
from jax_tilescale import language as T
from jax_tilescale.errors import KernelTraceError
from tests.compute import value_if_kernels as K
from tests.primitives.util import mesh_of, shard_run

SDS = jax.ShapeDtypeStruct
F32 = np.dtype(np.float32)


def run1(kern, *inputs) -> list[np.ndarray]:
    return [np.asarray(o) for o in shard_run(kern, mesh_of((1,)), *inputs)]


def check(case: K.Case) -> None:
    got = run1(case.kernel, *case.inputs)
    assert len(got) == len(case.want)
    for g, w in zip(got, case.want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64))


@pytest.mark.parametrize("dtype", list(K.DTYPES), ids=list(K.DTYPES))
@pytest.mark.parametrize("make", [K.case_masked_tile, K.case_elif_chain, K.case_conditional_expressions,
                                  K.case_atomics_under_condition],
                         ids=["masked_tile", "elif_chain", "conditional_expressions", "atomics_under_condition"])
def test_value_branches_match_jnp_where(make, dtype):
    check(make(K.DTYPES[dtype]))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_branches_store_into_tiles_then_global(dtype):
    check(K.case_shared_then_global(K.DTYPES[dtype]))


def test_element_conditions_at_block_level_and_per_thread():
    check(K.case_block_level())


def test_block_level_condition_on_a_count_in_a_serial_loop():
    check(K.case_counts_then_branch())


def test_explicit_if_else_all_any_and_if_then_else_on_values():
    check(K.case_explicit_if())


def test_ir_prints_value_conditions_and_short_circuits():
    text = K.case_masked_tile(F32).kernel.ir_text(np.zeros((37, 53), np.float32))
    assert "if ((((program_id(0) * 16) + i0) < 37) and (i1 < 53)):" in text
    assert "if (x[((program_id(0) * 16) + i0), i1] > float32(0.0)):" in text
    text = K.case_shared_then_global(F32).kernel.ir_text(np.zeros((32, 40), np.float32))
    assert "if ((f[i0, i1] == float32(0.0)) and ((i1 % 2) == 1)):" in text and "else:" in text


# ---- semantics ----------------------------------------------------------------------------------


def _argmax_store(n: int):
    @ts.kernel(out_shape=SDS((1,), jnp.int32), grid=(1,))
    def argmax_store(x, o):
        s = T.alloc_shared((n,), jnp.float32)
        top = T.alloc_fragment((1,), jnp.float32)
        T.copy(x, s)
        T.reduce_max(s, top, dim=0)
        for i in T.Parallel(n):
            if s[i] == top[0]:
                o[0] = i

    return argmax_store


def test_race_detector_sees_only_the_iterations_that_take_the_branch():
    """One iteration stores o[0] when the maximum is unique (no race); two when it is not."""
    n = 96
    x = K.rand(np.random.default_rng(70), (n,), F32)
    (got,) = run1(_argmax_store(n), x)
    assert int(got[0]) == int(np.argmax(x))
    x[5] = x[40] = x.max() + 1
    with pytest.raises(ts.RaceError, match=r"data race in the T.Parallel .*o\[0\].*iteration \(i0=5\)"):
        run1(_argmax_store(n), x)


def test_a_branch_not_taken_reads_nothing():
    """`if j < n_valid` with n_valid loaded from memory: the verifier leaves the bound to the run
    time, and the interpreter reads x only for the iterations that take the branch (x is shorter
    than the tile)."""
    m, n, width = 4, 40, 64

    @ts.kernel(out_shape=SDS((m, width), jnp.float32), grid=(1,))
    def k(x, n_valid, o):
        for i, j in T.Parallel(m, width):
            if j < n_valid[0] and x[i, j] > 0:
                o[i, j] = x[i, j]
            else:
                o[i, j] = 0.0

    x = K.rand(np.random.default_rng(71), (m, n), F32)
    (got,) = run1(k, x, np.array([n], np.int32))
    want = np.zeros((m, width), np.float32)
    want[:, :n] = np.where(x > 0, x, 0)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(Exception, match=r"out-of-bounds element x\[i0, i1\].*i1.*is 40"):
        run1(k, x, np.array([n + 1], np.int32))


def test_a_python_if_on_a_number_means_not_zero_and_not_negates():
    @ts.kernel(out_shape=SDS((32,), jnp.float32), grid=(1,))
    def k(x, o):
        for i in T.Parallel(32):
            if not x[i]:
                o[i] = 1.0
            elif not (x[i] > 0 or i == 3):
                o[i] = 2.0
            else:
                o[i] = 3.0

    x = K.rand(np.random.default_rng(72), (32,), F32)
    x[[0, 7]] = 0
    (got,) = run1(k, x)
    idx = np.arange(32)
    np.testing.assert_array_equal(got, np.where(x == 0, 1.0, np.where(~((x > 0) | (idx == 3)), 2.0, 3.0)))


def test_guarded_accesses_pass_the_verifier_only_under_their_guard():
    """`and` reads its right side only where the left holds, so the read is proven in bounds;
    `&` reads both, so the verifier refuses the read past the end (naming it)."""
    m, n = 4, 53

    def make(use_and: bool):
        @ts.kernel(out_shape=SDS((m, 64), jnp.float32), grid=(1,))
        def k(x, o):
            for i, j in T.Parallel(m, 64):
                if (j < n and x[i, j] > 0) if use_and else ((j < n) & (x[i, j] > 0)):
                    o[i, j] = 1.0
                else:
                    o[i, j] = 0.0

        return k

    x = K.rand(np.random.default_rng(73), (m, n), F32)
    (got,) = run1(make(True), x)
    np.testing.assert_array_equal(got[:, :n], (x > 0).astype(np.float32))
    assert not got[:, n:].any()
    with pytest.raises(KernelTraceError, match=r"read x\[i0, i1\]: the slice of x along dimension 1 starts at i1, "
                                               r"which can be 63"):
        make(False).trace(x)


# ---- errors -------------------------------------------------------------------------------------


def _trace(body, threads: int = 128, num_pes: int = 1):
    """Traces `body(x, o)` (x, o: float32[8, 8]) as a kernel body (source rewritten by the decorator)."""
    kern = ts.kernel(out_shape=SDS((8, 8), jnp.float32), grid=(1,), threads=threads)(body)
    return kern.trace(np.zeros((8, 8), np.float32), mesh_axes=("x",), num_pes=num_pes)


def _copy_in_branch(x, o):
    s = T.alloc_shared((8, 8), jnp.float32)
    for i, j in T.Parallel(8, 8):
        if x[i, j] > 0:
            T.copy(x, s)


def _barrier_in_branch(x, o):
    for i, j in T.Parallel(8, 8):
        if x[i, j] > 0:
            o[i, j] = 1.0
        else:
            T.barrier_all()


def _reduce_in_branch(x, o):
    s = T.alloc_shared((8, 8), jnp.float32)
    r = T.alloc_fragment((8,), jnp.float32)
    for i, j in T.Parallel(8, 8):
        if j < 4:
            if x[i, j] > 0:
                T.reduce_sum(s, r)


def _region_atomic_in_branch(x, o):
    f = T.alloc_fragment((8, 8), jnp.float32)
    for i, j in T.Parallel(8, 8):
        if x[i, j] > 0:
            T.atomic_add(o[:, :], f)


@pytest.mark.parametrize("body,what", [
    (_copy_in_branch, "T.copy"),
    (_barrier_in_branch, "T.barrier_all"),
    (_reduce_in_branch, "T.reduce_sum"),
    (_region_atomic_in_branch, "T.atomic_add"),
], ids=["copy", "barrier_all", "reduce_sum", "region_atomic"])
def test_block_operations_in_a_per_iteration_branch_are_refused(body, what):
    with pytest.raises(KernelTraceError, match=rf"{what} inside `if .*` \(at .*\) in the T.Parallel at .*a "
                                               "per-iteration branch.*need every thread of the block") as err:
        _trace(body, num_pes=2)
    assert "test_value_conditions.py" in str(err.value)


def test_thread_dependent_element_condition_refuses_block_operations():
    def k(x, o):
        s = T.alloc_shared((8, 8), jnp.float32)
        tx = T.thread_id()
        if tx < 8:
            if x[tx, 0] > 0:
                T.copy(x, s)

    with pytest.raises(KernelTraceError, match=r"copy needs the whole block, but it is inside the thread-dependent "
                                               r"`if \(x\[tx, 0\] > float32\(0.0\)\)`"):
        _trace(k)


def test_thread_index_in_a_parallel_branch_is_refused():
    def k(x, o):
        tx = T.thread_id()
        for i, j in T.Parallel(8, 8):
            if tx < 4:
                o[i, j] = x[i, j]

    with pytest.raises(KernelTraceError, match=r"T.thread_id\(\) inside the T.Parallel .*use the loop variables"):
        _trace(k)


def test_bad_element_conditions_are_refused():
    def several_elements(x, o):
        for i in T.Parallel(8):
            if x[i, 0:4] > 0:
                o[i, 0] = 1.0

    def signal_word(x, o):
        sig = T.alloc_signal((1,))
        for i, j in T.Parallel(8, 8):
            if sig[0] > 0:
                o[i, j] = 1.0

    with pytest.raises(KernelTraceError, match="has 4 elements; element-wise code reads one element at a time"):
        _trace(several_elements)
    with pytest.raises(KernelTraceError, match="holds signal words"):
        _trace(signal_word)


def test_truth_test_of_a_value_in_a_helper_names_the_traced_forms():
    def helper(v):  # not rewritten: only the kernel body is
        return 1.0 if v > 0 else 0.0

    def k(x, o):
        for i, j in T.Parallel(8, 8):
            o[i, j] = helper(x[i, j])

    with pytest.raises(KernelTraceError, match=r"a Python `if` or bool\(\) cannot decide it while the kernel "
                                               r"is traced.*with T.If\(cond\)"):
        _trace(k)



def test_logic_operators_directly_on_bool_elements():
    check(K.case_bool_mask_logic())
