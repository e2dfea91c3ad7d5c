"""A Python truth test of an undecided kernel condition in user code is refused; structural
comparisons are not (language/truth.py reads the asking instruction, one table per Python version).

The tests run for every version of the table, each on its own interpreter: 3.11 in CI, 3.12 on the
GPU machine (`python -m pytest tests/ir/test_truth_test.py` there); the other versions' cases are
skipped, naming where they run.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from jax_tilescale import language as T
from jax_tilescale.language import truth
from jax_tilescale.language.tracing import trace_kernel

I32 = np.dtype(np.int32)
VERSIONS = sorted(truth.TRUTH_TEST_INSTRUCTIONS)
THIS = sys.version_info[:2]


def trace(fn):
    return trace_kernel(fn, name="k", inputs=[((4,), I32)], outputs=[((4,), I32)], grid=(1,), threads=32,
                        mesh_axes=("x",), num_pes=2)


def on(version: tuple[int, int]) -> None:
    if version != THIS:
        pytest.skip(f"checks Python {version[0]}.{version[1]}'s table; run it on that interpreter")


# Helpers outside a @ts.kernel body (the decorator does not rewrite them): each asks Python for the
# truth of `c`, in one of the forms Python has.
def _if(c):
    if c:
        return 1
    return 0


def _if_not(c):
    if not c:
        return 1
    return 0


def _elif(c):
    first = False
    if first:
        return 2
    elif c:
        return 1
    return 0


def _while(c):
    while c:
        return 1
    return 0


def _while_bottom(c):
    tests, i = [True, c], 0
    while tests[i]:  # True at the top, then `c` at the bottom of the loop (3.11: a backward jump)
        i += 1
    return i


def _and(c):
    return c and 1


def _or(c):
    return c or 1


def _not(c):
    return not c


def _assert(c):
    assert c


def _ternary(c):
    return 1 if c else 0


def _comprehension(c):
    return [x for x in (1, 2) if c]


FORMS = [_if, _if_not, _elif, _while, _while_bottom, _and, _or, _not, _assert, _ternary, _comprehension]


@pytest.mark.parametrize("form", FORMS, ids=[f.__name__.strip("_") for f in FORMS])
@pytest.mark.parametrize("version", VERSIONS, ids=[f"{a}.{b}" for a, b in VERSIONS])
def test_a_truth_test_of_a_kernel_condition_in_user_code_is_refused(version, form) -> None:
    on(version)

    def k(x, out):
        form(T.get_pe() == 1)

    with pytest.raises(TypeError, match="kernel condition known only at run time"):
        trace(k)


# Structural comparisons from user code: Python compares the elements with `==` and asks the
# truth of the result itself (not a truth test of the program's).
STRUCTURAL = {
    "tuple ==": lambda a, b: (a,) == (b,),
    "in": lambda a, b: a in [b],
    "dict lookup": lambda a, b: {a: "a"}.get(b),
    "list.count": lambda a, b: [a, a].count(b),
}


@pytest.mark.parametrize("compare", list(STRUCTURAL.values()), ids=list(STRUCTURAL))
@pytest.mark.parametrize("version", VERSIONS, ids=[f"{a}.{b}" for a, b in VERSIONS])
def test_structural_comparisons_are_not_truth_tests(version, compare) -> None:
    on(version)
    seen = []

    def k(x, out):
        a, b = T.get_pe() + (-1), T.get_pe() + (-2)
        assert hash(a) == hash(b)  # (CPython's hash(-1) == hash(-2)): the dictionary must compare them
        seen.append(compare(a, b))

    trace(k)
    assert seen[0] in (False, None, 0)


def test_this_python_has_a_table_of_instructions_it_knows() -> None:
    assert THIS in truth.TRUTH_TEST_INSTRUCTIONS, (
        f"Python {THIS[0]}.{THIS[1]}: add its truth-test instructions to language/truth.py "
        "(dis the forms of this file)")
    assert truth.truth_test_opcodes(THIS) == truth._OPCODES is not None


def test_the_package_compares_structurally_while_tracing() -> None:
    def k(x, out):  # binop's `a == Const(0)` tests and the verifier's dictionaries run in the package
        T.putmem(out[T.ds(T.get_pe() * 2 + 0, 2)], x[T.ds(0 + T.get_pe() * 2, 2)], pe=(T.get_pe() + 1) % 2)

    assert len(trace(k).body) == 1


def test_an_unknown_python_version_falls_back_to_structural_equality_with_a_warning(monkeypatch) -> None:
    monkeypatch.setattr(truth, "_OPCODES", None)
    taken = []

    def k(x, out):
        taken.append(_if(T.get_pe() == 1))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace(k)
    assert taken == [0]  # the else side: structural equality
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert messages and "cannot tell on Python" in messages[0] and "T.If" in messages[0]
    assert any(w.filename == __file__ for w in caught)
