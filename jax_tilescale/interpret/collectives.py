"""Team collectives in the interpreter: the instances of barrier_all_block/_warp,
sync_all_block/_warp, broadcast* and fcollect* over the kernel's PE space (the same meaning as
the generated code, codegen/collectives.py); the world keeps them (`World.team_arrive`), the
statements' rules are collective_rules.py's.

NVSHMEM's rule: each call is one PE's call, and the k-th team collective call of each PE forms
instance k (whichever block makes it). An instance completes when every PE has made its call;
the calling blocks wait for that. The k-th calls must be the same statement on every PE, with the
same root and destination: anything else is an error naming each PE's call (on a GPU it would
pair unrelated calls).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import KernelRuntimeError
from ..ir.nodes import Broadcast, Fcollect, Stmt
from .memory import Block
from .waits import Wait


@dataclass(frozen=True)
class Call:
    """One PE's call of an instance: who, which statement, and what must agree across PEs."""

    block: Block
    stmt: Stmt
    agree: tuple[object, ...]  # e.g. the root and the destination's starts


class Instance:
    """Instance `index` of the team collectives: the calls of the PEs that have arrived."""

    def __init__(self, index: int, num_pes: int):
        self.index, self.num_pes = index, num_pes
        self.calls: dict[int, Call] = {}
        self.complete = False


class CollectiveWait(Wait):
    """A block waiting for its instance to complete (every PE has made its call)."""

    def __init__(self, instance: Instance, pe: int, block: Block, stmt: Stmt):
        self.instance, self.pe, self.block, self.stmt = instance, pe, block, stmt

    def ready(self) -> bool:
        return self.instance.complete

    def describe(self) -> str:
        inst = self.instance
        return (
            f"{self.stmt.op_name} (team collective call {inst.index + 1} of each PE: {len(inst.calls)} of "
            f"{inst.num_pes} PEs arrived), at {self.stmt.loc}"
        )


class TeamCollectives:
    """The per-PE call counts and the open instances of one launch."""

    def __init__(self, num_pes: int):
        self.num_pes = num_pes
        self._calls = [0] * num_pes
        self._open: dict[int, Instance] = {}

    def arrive(self, pe: int, call: Call) -> tuple[Instance, bool]:
        """Records `pe`'s next call; returns its instance and whether this call completed it."""
        k = self._calls[pe]
        self._calls[pe] = k + 1
        inst = self._open.get(k)
        if inst is None:
            inst = self._open[k] = Instance(k, self.num_pes)
        inst.calls[pe] = call
        if len(inst.calls) < self.num_pes:
            return inst, False
        del self._open[k]
        _check_agreement(inst)
        inst.complete = True
        return inst, True


def _check_agreement(inst: Instance) -> None:
    calls = sorted(inst.calls.items())
    first = calls[0][1]
    same_stmt = all(c.stmt is first.stmt for _, c in calls)
    if same_stmt and all(c.agree == first.agree for _, c in calls):
        return
    what = "different statements" if not same_stmt else "the same statement with different arguments"
    lines = [
        f"  PE {pe} (block {c.block}): {c.stmt.op_name} at {c.stmt.loc}" + (f", {_describe(c)}" if same_stmt else "")
        for pe, c in calls
    ]
    raise KernelRuntimeError(
        f"team collective call {inst.index + 1} of each PE pairs {what} (the k-th team collective of every PE "
        f"forms one instance, so they must match; with several blocks per PE the pairing follows the order "
        f"the blocks get there):\n" + "\n".join(lines)
    )


def _describe(c: Call) -> str:
    if isinstance(c.stmt, Broadcast):
        return f"root {c.agree[0]}, destination starts {c.agree[1]}"
    if isinstance(c.stmt, Fcollect):
        return f"destination starts {c.agree[0]}"
    return ""
