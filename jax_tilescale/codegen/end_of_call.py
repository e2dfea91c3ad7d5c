"""How a call-free kernel that communicates ends: with the end-of-call meeting of its PEs, or without
it where the kernel proves completion itself (issue 14, item 2; docs/calling_convention.md, "End of a
call").

The meeting (`ts_call_meet` in `ts_call_end`) makes every remote write into this PE complete when the
call returns, keeps peers from reading this PE's buffers after XLA may reuse them, and bounds how far
a PE runs ahead (a peer's next launch overwrites the address words this PE published, and writes into
the scratch half this PE zeroes). A kernel needs none of that when:

1. no peer reads this PE's memory (no gets, remote waits or peer loads: `KernelIR.remote_read`);
2. every statement that writes a peer is a block put with a fused signal, outside any branch (at the
   top level of the body or in static loops there, so every block runs it once per iteration), into an
   output (a zero-copy param: the writer first waits for this PE's publish of the launch, so it writes
   nothing before this PE's launch began); its signal word is a `T.alloc_signal` word (the verifier
   refuses any other), zero when the launch starts, so no wait passes before the put lands;
3. at every (block, iteration) each put's target PE, over the kernel's PEs, is a permutation of them,
   and its signal word, which depends on the block and the loop indices only, is signalled by no other
   (put, block, iteration): each PE then receives exactly one signal per word;
4. every word signalled is awaited somewhere in the kernel (`signal_wait_until(word, EQ or GE, v)`
   with the put's static, positive value, outside any branch, on a word that depends on the block and
   the loop indices only).

Then a PE's launch ends only after every write into its memory has landed (its blocks waited for each
signal, which the sender's block releases after its stores), no peer touches its memory afterwards,
and a peer writes into it again only after reading its publish of the next launch, which it makes
after this launch (and its zeroing) ended. The interpreter needs no change: for such a kernel every
transfer is awaited before the kernel's end, where it delivers what is left. Anything else keeps the
meeting, and the generated source says which condition failed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from ..ir.buffers import BufferKind
from ..ir.evaluate import evaluate
from ..ir.expr import PE_VAR, Expr, Var, VarKind, loads, program_id_var, static_value, variables
from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Cmp, Fence, Loop, Put, Quiet, Scope, SignalWait, Stmt, walk_stmts

# (block, loop iteration) points enumerated to prove the signal words distinct and awaited; more keep
# the meeting.
MAX_POINTS_CHECKED = 1 << 16


@dataclass(frozen=True)
class Ending:
    """`meet`: the launch's last block meets every PE of the kernel's PE space; `why`: the reason, for
    the comment the generated source carries."""

    meet: bool
    why: str


def end_of_call(kernel: KernelIR, call_free: bool) -> Ending:
    """The ending of a kernel that communicates (the caller asks only for those)."""
    reason = _needs_meeting(kernel, call_free)
    if reason is not None:
        return Ending(True, reason)
    return Ending(False, "every remote write into this PE is a put whose signal this PE waits for, and no peer "
                         "reads this PE's memory: the waits prove the call complete (codegen/end_of_call.py)")


def _needs_meeting(kernel: KernelIR, call_free: bool) -> str | None:
    """Why the kernel keeps the meeting, or None when it proves completion itself."""
    if not call_free:
        return "NVSHMEM's calls (completion through quiet and the meeting)"
    if kernel.num_pes == 1:
        return "a PE space of one PE (which ts_call_end never meets anyway)"
    return signalled_problem(kernel)


def signalled_problem(kernel: KernelIR) -> str | None:
    """Why conditions 1-4 above fail for `kernel`, or None when every remote write into a PE is a
    signalled block put that the PE awaits (codegen/stage_out.py builds on the same proof)."""
    if kernel.aliases:
        return "aliased outputs (their copy-in is read by peers)"
    if kernel.remote_read():
        return "peers read this PE's memory"
    placed: list[tuple[Put | SignalWait, tuple[Loop, ...]]] = []
    why = place_communication(kernel.body, (), placed)
    if why is not None:
        return why
    puts = [(s, loops) for s, loops in placed if isinstance(s, Put)]
    if not puts:
        return "no put with a signal"
    for p, _ in puts:
        why = _put_problem(p)
        if why is not None:
            return why
    points = math.prod(kernel.grid) * sum(math.prod(lp.extent for lp in loops) for _, loops in placed)
    if points > MAX_POINTS_CHECKED:
        return f"too many (block, iteration) points to check the signal words ({points})"
    try:
        return _check_words(kernel, placed)
    except ArithmeticError as e:  # e.g. a division by zero at some point: the kernel fails there anyway
        return f"an index that cannot be evaluated at every point ({e})"


def place_communication(body: tuple[Stmt, ...], loops: tuple[Loop, ...],
                        out: list[tuple[Put | SignalWait, tuple[Loop, ...]]]) -> str | None:
    """Collects the communicating statements with their enclosing loops; refuses any other place (a
    branch may skip a put or a wait on some blocks) and any other communicating statement."""
    for s in body:
        if isinstance(s, Loop):
            why = place_communication(s.body, (*loops, s), out)
            if why is not None:
                return why
        elif isinstance(s, (Put, SignalWait)):
            out.append((s, loops))
        elif s.communicates and not isinstance(s, (Quiet, Fence)):
            return f"{s.op_name} (only block puts with signals and signal waits prove completion)"
        elif any(t.communicates and not isinstance(t, (Quiet, Fence)) for b in s.bodies for t in walk_stmts(b)):
            return f"communication inside a branch ({s.op_name}: not run the same way by every block)"
    return None


def _put_problem(p: Put) -> str | None:
    what = f"the {p.op_name} at {p.loc}"
    if p.signal is None:
        return f"{what} has no signal"
    if p.scope is not Scope.BLOCK:
        return f"{what} is not block-wide"
    if p.dst.buffer.kind is not BufferKind.OUTPUT:
        return f"{what} writes {p.dst.buffer.kind.value} memory, not an output (a zero-copy param)"
    value = static_value(p.signal.value)
    if value is None or value <= 0:
        return f"{what} signals a value that is not a static positive number"
    if not depends_only_on(p.pe, (VarKind.PROGRAM_ID, VarKind.LOOP, VarKind.PE)):
        return f"{what} targets a PE that depends on more than the PE, the block and the loops"
    if not all(depends_only_on(e, (VarKind.PROGRAM_ID, VarKind.LOOP)) for e in p.signal.word.starts):
        return f"{what} signals a word that depends on more than the block and the loops"
    return None


def depends_only_on(e: Expr, kinds: tuple[VarKind, ...]) -> bool:
    """`e` reads no memory and no variable but those of `kinds` (so it can be evaluated here)."""
    return not loads(e) and all(v.kind in kinds for v in variables(e))


def _wait_problem(w: SignalWait) -> str | None:
    """A wait whose word depends on the PE may await different words on different PEs, which the proof
    does not follow. (A wait for anything but EQ/GE a static value is allowed; it proves nothing here.)"""
    if not all(depends_only_on(e, (VarKind.PROGRAM_ID, VarKind.LOOP)) for e in w.word.starts):
        return f"the {w.op_name} at {w.loc} waits on a word that depends on more than the block and the loops"
    return None


def points(kernel: KernelIR, loops: tuple[Loop, ...]) -> Iterator[dict[Var, int]]:
    """Every (block, loop indices) at which a statement inside `loops` runs, as variable bindings."""
    for block in itertools.product(*(range(n) for n in kernel.grid)):
        base = {program_id_var(axis): i for axis, i in enumerate(block)}
        for it in itertools.product(*(range(lp.extent) for lp in loops)):
            yield {**base, **{lp.var: i for lp, i in zip(loops, it, strict=True)}}


def _check_words(kernel: KernelIR, placed: list[tuple[Put | SignalWait, tuple[Loop, ...]]]) -> str | None:
    """At every point each put targets a permutation of the PEs and signals a word no other (put, point)
    signals; every word signalled is awaited somewhere (some block, some iteration) with the put's value,
    so each PE receives exactly one signal per word and waits for all of them."""
    awaited: set[tuple[object, tuple[int, ...], int]] = set()
    for w, loops in placed:
        if not isinstance(w, SignalWait):
            continue
        why = _wait_problem(w)
        if why is not None:
            return why
        value = static_value(w.value)
        if w.cmp in (Cmp.EQ, Cmp.GE) and value is not None:
            awaited.update((w.word.buffer, tuple(evaluate(e, env) for e in w.word.starts), value)
                           for env in points(kernel, loops))
    signalled: set[tuple[object, tuple[int, ...]]] = set()
    pes = range(kernel.num_pes)
    for p, loops in placed:
        if not isinstance(p, Put):
            continue
        assert p.signal is not None
        value = static_value(p.signal.value)
        for env in points(kernel, loops):
            if sorted(evaluate(p.pe, {**env, PE_VAR: pe}) for pe in pes) != list(pes):
                return f"the {p.op_name} at {p.loc} does not target each PE exactly once"
            word = (p.signal.word.buffer, tuple(evaluate(e, env) for e in p.signal.word.starts))
            if word in signalled:
                return f"two puts, blocks or iterations signal the same word ({p.signal.word})"
            signalled.add(word)
            if (*word, value) not in awaited:
                return f"the signal of the {p.op_name} at {p.loc} is not awaited with its value ({p.signal.word})"
    return None
