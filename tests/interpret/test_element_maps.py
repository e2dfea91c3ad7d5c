"""The rectangle fast path of T.Parallel element accesses (interpret/element_maps.py): the same
results, the same logged elements and the same races as the general path, on random data."""

from __future__ import annotations

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.errors import KernelRuntimeError, RaceError
from jax_tilescale.interpret import element_maps
from jax_tilescale.interpret.element_maps import RectMap

from .harness import build, launch, random_inputs, run, session

F32 = np.float32


def one_pe(fn, inputs, outputs, **options):
    kernel = build(fn, inputs=[(x.shape, x.dtype) for x in inputs], outputs=outputs, grid=(1,), num_pes=1)
    return launch(session(kernel, **options), [inputs])


def test_active_box_finds_boxes_only() -> None:
    shape = (4, 6)
    a = np.zeros(shape, bool)
    a[1:3, 2:5] = True
    assert element_maps.active_box(a, shape) == ((1, 3), (2, 5))
    assert element_maps.active_box(np.True_, shape) == ((0, 4), (0, 6))
    a[0, 0] = True  # no longer a box
    assert element_maps.active_box(a, shape) is None
    assert element_maps.active_box(np.zeros(shape, bool), shape) is None
    j = np.arange(6).reshape(1, 6)
    assert element_maps.active_box(j < 4, shape) == ((0, 4), (0, 4))


def test_rect_map_accepts_unit_steps_of_distinct_axes_inside_the_buffer() -> None:
    i = np.arange(4).reshape(4, 1)
    j = np.arange(6).reshape(1, 6)
    box = ((0, 4), (0, 6))
    m = element_maps.rect_map([j + 2, i, np.int64(3)], box, (8, 4, 5))
    assert m == RectMap((1, 0, None), (2, 0, 3), box)
    assert m.starts == (2, 0, 3) and m.sizes == (6, 4, 1) and m.injective()
    assert element_maps.rect_map([i, i], box, (8, 8)) is None  # a diagonal
    assert element_maps.rect_map([2 * i, j], box, (8, 8)) is None  # step 2
    assert element_maps.rect_map([i + j, j], box, (16, 8)) is None  # two axes in one dimension
    assert element_maps.rect_map([i + 5, j], box, (8, 8)) is None  # past the end: the general path reports it
    assert not element_maps.rect_map([i, np.int64(0)], box, (8, 8)).injective()  # every j to one element


def test_to_space_and_from_space_are_inverse_transposes() -> None:
    rng = np.random.default_rng(0)
    box = ((0, 3), (0, 5))
    m = RectMap((None, 1, 0), (7, 0, 0), box)  # buf[7, j, i]
    view = rng.standard_normal((1, 5, 3))
    space = m.to_space(view)
    assert space.shape == (3, 5)
    np.testing.assert_array_equal(space, view[0].T)
    np.testing.assert_array_equal(m.from_space(space), view)
    coords = m.coordinates()
    assert [c[7] for c in coords] == [7, 2, 1]  # iteration (1, 2) row-major is number 7: buf[7, 2, 1]


def test_transposed_broadcast_and_constant_index_accesses() -> None:
    rng = np.random.default_rng(1)
    x = random_inputs(rng, 1, (12, 20))[0]
    r = random_inputs(rng, 1, (12,))[0]

    def shapes(x_in, r_in, y, z):
        for i, j in T.Parallel(12, 20):
            y[j, i] = x_in[i, j] * 2.0 - r_in[i]  # transposed store, broadcast read
        for j in T.Parallel(20):
            z[3, j] = x_in[5, j] + y[j, 4]  # constant rows and a column of y

    res = one_pe(shapes, [x, r], [((20, 12), F32), ((4, 20), F32)], check_coverage=False)
    y, z = res.check()[0]
    np.testing.assert_array_equal(y, (x * np.float32(2) - r[:, None]).T)
    np.testing.assert_array_equal(z[3], x[5] + y[:, 4])
    assert np.isnan(z[[0, 1, 2]]).all()  # never written: poison


def test_if_keeps_a_box_or_not_and_touches_exactly_its_elements() -> None:
    rng = np.random.default_rng(2)
    x = random_inputs(rng, 1, (8, 16))[0]

    def guarded(x_in, y):
        for i, j in T.Parallel(8, 16):
            with T.If(j < 11):  # a box of iterations
                y[i, j] = x_in[i, j] + 1.0
            with T.If((i + j) % 3 == 0):  # not a box: the general path
                y[i, j] = x_in[i, j] * 3.0

    # Iterations (i, j) with j < 11 and (i + j) % 3 == 0 write y[i, j] twice (the same iteration:
    # program order, no race); the elements neither branch writes stay poison, which coverage names.
    res = one_pe(guarded, [x], [((8, 16), F32)])
    err = res.errors[0]
    ii, jj = np.meshgrid(np.arange(8), np.arange(16), indexing="ij")
    written = (jj < 11) | ((ii + jj) % 3 == 0)
    assert isinstance(err, KernelRuntimeError) and f"{written.size - written.sum()} of 128 elements" in str(err)
    y = one_pe(guarded, [x], [((8, 16), F32)], check_coverage=False).check()[0][0]
    want = np.where(jj < 11, x + np.float32(1), np.nan).astype(F32)
    want = np.where((ii + jj) % 3 == 0, x * np.float32(3), want)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("bug", ["neighbour", "one_column", "shifted_write"])
def test_rectangle_accesses_that_meet_across_iterations_race(bug: str) -> None:
    x = random_inputs(np.random.default_rng(3), 1, (8, 16))[0]

    def racy(x_in, y):
        for i, j in T.Parallel(8, 15):
            if bug == "neighbour":
                y[i, j] = x_in[i, j]
                y[i, j + 1] = x_in[i, j] * 2.0  # iteration (i, j) writes what (i, j + 1) wrote
            elif bug == "one_column":
                y[i, 0] = x_in[i, j]  # every j writes y[i, 0]
            else:
                y[i, j + 1] = y[i, j] + 1.0  # reads what iteration (i, j - 1) writes

    res = one_pe(racy, [x], [((8, 16), F32)], check_coverage=False)
    err = res.errors[0]
    assert isinstance(err, RaceError), repr(err)
    assert "touched by two iterations" in str(err)


def test_independent_rectangles_run_clean() -> None:
    x = random_inputs(np.random.default_rng(4), 1, (8, 16))[0]

    def clean(x_in, y):
        for i, j in T.Parallel(8, 16):
            y[i, j] = x_in[i, j]
            y[i, j] = y[i, j] * 2.0 + x_in[i, 3]  # each iteration its own element, and reads of inputs

    y = run(session(build(clean, inputs=[((8, 16), F32)], outputs=[((8, 16), F32)], grid=(1,), num_pes=1)),
            [[x]])[0][0]
    np.testing.assert_array_equal(y, x * np.float32(2) + x[:, 3:4])
