"""Telling a Python truth test of a kernel condition from a structural comparison.

`tx == 0` builds a kernel condition (ir/expr.py `Compare`), and Python asks its truth in two very
different situations: a truth test in user code (`if tx == 0:` in a helper function that the
kernel decorator did not rewrite: a kernel branch Python cannot take, so it must be an error, not a
silent False) and structural equality (containers, dictionaries and dataclass equality compare IR
nodes with `==`: "the same expression?"). Python does not say which operation asks, so this reads
the instruction that the asking frame executes (its bytecode at `f_lasti`). Those instructions
differ between Python versions: one table per version below, each checked by
tests/ir/test_truth_test.py for every truth-test form (`if`, `elif`, `while`, `and`, `or`, `not`,
`assert`, `a if c else b`) and against the structural comparisons (3.11 in CI, 3.12 on the GPU
machine).

On a Python version not in the table the two cannot be told apart. The documented fallback:
`bool()` of an undecided condition is structural equality (False), as in IR code, and a
RuntimeWarning at the user's line (once per line) says that an `if` there would not be traced.
ir/expr.py reaches this through the tracer's `TraceHooks.truth_test` (it must not import
language/).
"""

from __future__ import annotations

import dis
import sys
import warnings
from types import FrameType

from .source import in_package

# The instructions that take the truth of the value on top of the stack, per Python version.
TRUTH_TEST_INSTRUCTIONS: dict[tuple[int, int], frozenset[str]] = {
    (3, 11): frozenset({
        "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE",  # if, elif, while, assert, a if c else b
        "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE",  # the test at the bottom of a while loop
        "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP",  # `and`, `or` as values
        "UNARY_NOT",  # not
    }),
    # 3.12 folded the forward/backward jumps into one and compiles `and`/`or` values to COPY + jump.
    (3, 12): frozenset({"POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "UNARY_NOT"}),
}


def truth_test_opcodes(version: tuple[int, int]) -> frozenset[int] | None:
    """The opcodes of the truth-test instructions of Python `version` (None: not supported).
    Only the running interpreter's opcode numbers are known, so `version` must be it."""
    names = TRUTH_TEST_INSTRUCTIONS.get(version)
    if names is None:
        return None
    unknown = sorted(n for n in names if n not in dis.opmap)
    if unknown:
        raise RuntimeError(f"internal: the truth-test table of Python {version} names {unknown}, which this "
                           f"interpreter ({sys.version.split()[0]}) does not have")
    return frozenset(dis.opmap[n] for n in names)


def _this_pythons_opcodes() -> frozenset[int] | None:
    try:
        return truth_test_opcodes(sys.version_info[:2])
    except RuntimeError:  # a wrong table must not break the import; tests/ir/test_truth_test.py reports it
        return None


_OPCODES = _this_pythons_opcodes()


def is_truth_test(frame: FrameType) -> bool:
    """Whether `frame` (the one asking for the truth of an undecided kernel condition) is user
    code doing a Python truth test. The package's own frames compare structurally."""
    if in_package(frame):
        return False
    opcodes = _OPCODES
    if opcodes is None:
        warnings.warn_explicit(
            f"jax_tilescale cannot tell on Python {sys.version_info[0]}.{sys.version_info[1]} whether this asks for "
            "the truth of a kernel condition (an `if` on a kernel value outside a @ts.kernel body: not traced, it "
            "takes the else side) or compares expressions; it is treated as a comparison (False). Use `with "
            "T.If(cond):` or `T.if_then_else` outside kernel bodies (supported versions: "
            f"{', '.join(f'{a}.{b}' for a, b in sorted(TRUTH_TEST_INSTRUCTIONS))})",
            RuntimeWarning, frame.f_code.co_filename, frame.f_lineno,
        )
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in opcodes
