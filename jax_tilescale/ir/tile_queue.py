"""A tile queue: the kernel's blocks deal a range of tiles among themselves as they ask for them.

    for tile in T.tile_queue(tiles):     # a persistent kernel: grid = (SM count,)
        tm, tn = <order of tile>
        ...

runs the body once for every tile number 0 .. tiles-1, each on exactly one block: a block takes its
next tile from a counter that all blocks of the launch share (one int32 word of global scratch, an
atomic add per tile), and ends the loop when the counter has passed `tiles`. Where a static deal
(`for w in T.serial(waves): tile = w * blocks + T.program_id(0)`) fixes which block computes which
tile, the queue lets a block that runs fast take more tiles and one held up (a slow SM, a late start)
take fewer, and the last wave goes to the blocks that are free first (benchmarks/NOTES.md, "A dynamic
tile scheduler").

Which tile a block gets, and how many, differs from run to run; what each tile's body computes must
not depend on it (the tile number is the only thing the body learns). Tickets are taken in counter
order, so a block's tiles rise.

The counter is left zero for the next launch (`left_zero`, no end-of-call pass): every block takes
exactly one ticket past the last tile (the one that ends its loop), so the launch takes
`tiles + blocks` tickets in all, and the block that draws the last of them (`tiles + blocks - 1`)
sets the word back to zero; by then no block will read it again.

`static_rounds` W (`T.tile_queue(n, static_rounds=W)`): a block's first W rounds take tiles `w * blocks + block`
(the static deal, no atomic), the rounds after draw from the counter, offset by `W * blocks`: the deal is static
where the blocks run level and dynamic in the launch's tail, where a slow SM would hold the launch
(benchmarks/NOTES.md, forty-ninth session). `W * blocks <= n`, so that every block reaches the drawn rounds and
draws once past the tiles (which resets the counter as above, its last raw value `n - W * blocks + blocks - 1`).

Where it may stand (verify_control): at the top level of the kernel's body (once per launch: in a loop
the blocks would run the queue's rounds out of step with each other), not in a kernel with clusters,
and with nothing in its body that every block must reach the same number of times (barrier_all /
sync_all, team collectives, cluster statements, another queue): the blocks run different numbers of
tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from .buffers import Buffer
from .cluster import ClusterCopy, ClusterSync
from .expr import Var
from .nodes import BarrierAll, Stmt

# Words of the block's shared memory through which its threads learn each round's ticket (`TileQueue.drawn`): the
# drawing thread writes round r's into word r % TICKET_SLOTS, so it draws at most TICKET_SLOTS rounds ahead of the
# slowest reader (the Hopper GEMM plan's drawing thread: a block holds that many tiles in reserve at most).
TICKET_SLOTS = 2


@dataclass(frozen=True)
class TileQueue(Stmt):
    """`for tile in T.tile_queue(n):` the body for every tile 0 .. n-1, each on the one block that drew it
    from `counter` (the module doc). `var` is the tile number (VarKind.LOOP, range 0 .. n-1)."""

    var: Var
    extent: int
    body: tuple[Stmt, ...]
    counter: Buffer  # one int32 word of global scratch, left zero (the language allocates it)
    drawn: Buffer  # TICKET_SLOTS int32 words of shared memory: the rounds' tickets, for the block's threads
    static_rounds: int = 0  # a block's first rounds dealt statically (tile w * blocks + block), the rest drawn
    op_name = "tile_queue"

    @property
    def bodies(self) -> tuple[tuple[Stmt, ...], ...]:
        return (self.body,)

    def static_tiles(self, blocks: int) -> int:
        """Tiles dealt statically in a launch of `blocks` blocks (the drawn tickets start there)."""
        return self.static_rounds * blocks

    def last_ticket(self, blocks: int) -> int:
        """The counter's value drawn last in a launch of `blocks` blocks (a ticket less the static tiles): its drawer
        sets the counter back to zero."""
        return self.extent - self.static_tiles(blocks) + blocks - 1


def needs_every_block(s: Stmt) -> bool:
    """Whether `s` must be reached the same number of times by every block (or every block of a cluster),
    which a queue's body, run a different number of times on each block, cannot promise."""
    return (isinstance(s, (BarrierAll, ClusterSync, ClusterCopy, TileQueue)) or type(s).team_collective)
