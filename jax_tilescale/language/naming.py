"""What the user calls a buffer: the name an allocation's result is assigned to, and the rule that
makes any name a kernel's own (a valid, unique C identifier).

Messages (verifier errors, interpreter reports, IR text, GPU wait-timeouts) name buffers, so a
buffer is named as the user's code names it: inputs and outputs by the kernel function's parameters
(language/tracing.py), allocations by the variable they are assigned to (`acc = T.alloc_fragment(...)`
is `acc`), found here from the calling frame's bytecode.

Why the bytecode and not the kernel's AST (ast_rewrite.py): the bytecode is there for every frame
(a helper function that allocates, a kernel whose source cannot be read: a lambda, `exec`, the REPL),
and the instruction after the allocator's call is exactly what happens to its result at that call
site, so two allocations on one line, or one in a loop, are each told apart. The AST only covers the
kernel function itself, and only when its source can be read. The patterns read here are the plain
ones (`x = T.alloc_...(...)`, `x: T = ...`, `a = b = ...`, `(x := ...)`, `obj.x = ...`, a helper's
`return T.alloc_...(...)` assigned by its caller); a tuple assignment `a, b = T.alloc_...(...),
T.alloc_...(...)` stores only once the tuple is built, so there the call is found by its source
position among the file's tuple assignments (when the file can be read). Anything else (an
allocation inside an expression, a list comprehension) has no name here and the caller uses its
derived one.
"""

from __future__ import annotations

import ast
import bisect
import dis
import functools
import keyword
import linecache
import re
import sys
from types import CodeType, FrameType

from .source import in_package

# Instructions that bind the value on top of the stack to a name (3.13's STORE_FAST_* fuse a store
# with the next load or store: the first name is ours).
_STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "STORE_FAST_LOAD_FAST",
                     "STORE_FAST_STORE_FAST"})
_LOADS = frozenset({"LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_FAST_CHECK",
                    "LOAD_FAST_BORROW"})
_RETURNS = frozenset({"RETURN_VALUE"})


@functools.lru_cache(maxsize=512)
def _instructions(code: CodeType) -> tuple[tuple[int, ...], tuple[dis.Instruction, ...]]:
    instructions = tuple(dis.get_instructions(code))
    return tuple(i.offset for i in instructions), instructions


def _after_call(frame: FrameType) -> tuple[dis.Instruction, ...]:
    """The frame's instructions from the one after the call it is in (f_lasti is that call, or on
    3.11 its last inline cache entry: either way the next instruction starts after it)."""
    offsets, instructions = _instructions(frame.f_code)
    return instructions[bisect.bisect_right(offsets, frame.f_lasti):]


def _store_target(following: tuple[dis.Instruction, ...]) -> str | None:
    """The name the value a call just returned is stored to, or None (not a plain store)."""
    if not following:
        return None
    first = following[0]
    if first.opname == "COPY" and first.arg == 1 and len(following) > 1:  # `a = b = f()`, `(a := f())`
        first = following[1]
    if first.opname in _STORES:
        name = first.argval
        return name[0] if isinstance(name, tuple) else name
    if first.opname in _LOADS and len(following) > 1 and following[1].opname == "STORE_ATTR":  # `obj.x = f()`
        return following[1].argval
    return None


def assigned_name() -> str | None:
    """The name the user's code assigns the result of the allocator being called to, or None.

    Called from an allocator (code of this package): the innermost frame outside the package is the
    user's call. A user helper that returns the allocation (`return T.alloc_shared(...)`) passes the
    question on to its caller, while that caller is user code too."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and in_package(frame):
        frame = frame.f_back
    while frame is not None and not in_package(frame):
        following = _after_call(frame)
        name = _store_target(following) or _unpacked_target(frame)
        if name is not None:
            return name
        if not following or following[0].opname not in _RETURNS:
            return None
        frame = frame.f_back
    return None


def _unpacked_target(frame: FrameType) -> str | None:
    """`a, b = T.alloc_signal(n), T.alloc_signal(n)`: the name at the call's place in the target
    tuple. The bytecode evaluates the whole tuple before storing, so here the call is found by its
    source span (the CALL instruction's position) among the file's tuple assignments. A kernel the
    decorator recompiled (ast_rewrite.py) was parsed dedented: its columns are the file's less the
    indentation of its `def`."""
    code = frame.f_code
    offsets, instructions = _instructions(code)
    call = instructions[bisect.bisect_right(offsets, frame.f_lasti) - 1].positions
    if call is None or None in (call.lineno, call.end_lineno, call.col_offset, call.end_col_offset):
        return None
    lines = linecache.getlines(code.co_filename)
    if not lines or not 0 < call.lineno <= len(lines):
        return None
    targets = _tuple_targets("".join(lines))
    first = lines[code.co_firstlineno - 1] if 0 < code.co_firstlineno <= len(lines) else ""
    for shift in dict.fromkeys((0, len(first) - len(first.lstrip()))):
        name = targets.get((call.lineno, call.col_offset + shift, call.end_lineno, call.end_col_offset + shift))
        if name is not None:
            return name
    return None


@functools.lru_cache(maxsize=32)
def _tuple_targets(source: str) -> dict[tuple[int, int, int, int], str]:
    """The source spans of calls that are elements of a tuple assigned to a tuple of names
    (`a, b = f(), g()`), each with the name it is assigned to."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    found = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            for name, call in zip(target.elts, value.elts):
                if isinstance(name, ast.Name) and isinstance(call, ast.Call) and call.end_lineno is not None:
                    found[(call.lineno, call.col_offset, call.end_lineno, call.end_col_offset)] = name.id
    return found


# ---- a kernel's names: valid C identifiers, none a keyword or the code generator's own, unique ----

# C, C++ and CUDA words a buffer may not be called (the generated code spells buffers with prefixes,
# `p_acc`, but names are kept clear of these so that no backend ever has to rename one).
_RESERVED = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
    compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
    int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
    reinterpret_cast requires restrict return short signed sizeof static static_assert static_cast struct switch
    template this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
    wchar_t while xor xor_eq
    threadIdx blockIdx blockDim gridDim warpSize main
    int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t half nv_bfloat16
""".split())
# The code generator's own identifiers (`ts_where`, `ts_i0`, `TsLaunchArgs`, `TS_CMP_EQ`, `nvshmem_*`).
_GENERATED = re.compile(r"ts_|TS_|Ts[A-Z]|nvshmem")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def c_safe_name(name: str, fallback: str) -> str:
    """`name` as a valid C identifier that is no keyword and not the generator's: characters
    outside [A-Za-z0-9_] become `_` (a non-ASCII letter its code point, `é` -> `u00e9`), a leading
    digit gets `_`, a reserved word or prefix a trailing `_` (`int` -> `int_`); `fallback` if empty."""
    text = "".join(
        c if c.isascii() and (c.isalnum() or c == "_") else f"u{ord(c):04x}" if c.isalnum() else "_"
        for c in str(name)
    )
    if not text.strip("_"):
        text = fallback
    if text[0].isdigit():
        text = f"_{text}"
    if text in _RESERVED or keyword.iskeyword(text) or _GENERATED.match(text):
        text = f"{text}_"
    assert _IDENTIFIER.match(text), text
    return text


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or `name_1`, `name_2`, ... the first not in `taken` (which gets it); `int_` repeats as
    `int_1` (no double underscore)."""
    candidate, i = name, 0
    stem = name.rstrip("_") or name
    while candidate in taken:
        i += 1
        candidate = f"{stem}_{i}"
    taken.add(candidate)
    return candidate
