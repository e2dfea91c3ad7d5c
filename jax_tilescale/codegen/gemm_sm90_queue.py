"""A tile queue (ir/tile_queue.py) around the Hopper GEMM lowering's pipelined loop (`gemm_sm90`,
`gemm_sm90_nest`): the persistent kernel with a dynamic tile scheduler,

    for tile in T.tile_queue(tiles):     # grid = (SM count,)
        tm, tn = <order of tile>
        T.clear(C_f)
        for ko in T.Pipelined(...): copy, copy, gemm
        T.copy(C_f, C[tm * bm, tn * bn])

The producer thread draws the tickets (an atomic add on the queue's global counter) and hands each to
the consumer warpgroups through a ring of TICKET_SLOTS words of shared memory (`TileQueue.drawn`) with
a full and an empty mbarrier per word, as the stages go through theirs: the producer writes round r's
ticket into word r % TICKET_SLOTS and arrives on its full barrier (a release); each consumer warp
waits on it (acquire), reads the ticket and arrives on its empty barrier, which the producer waits on
before it writes the word again, TICKET_SLOTS rounds later. Where the static form has the producer
recompute the tile from the loop variable, here only the producer knows it first.

The producer draws a round ahead: it issues the atomic for round r + 1's ticket before round r's loads
and publishes the ticket after them, so the atomic's round trip to L2 (1-2 us with 132 SMs drawing)
overlaps a tile's loads instead of standing between two tiles (drawn between them, blocking, the ping-pong
pick ran 1.24x XLA's cycles at 16384 x 8192 x 1024 against 1.02: benchmarks/NOTES.md, forty-seventh
session), and the consumers find every ticket published before they need it; ping-pong's warpgroups look
at the next round's ticket to know whether to pass the turn (gemm_sm90_pingpong), published once the
tile's last load is issued, before the tile's main loop can end. The cost: a block holds one tile more in
reserve than it is loading, a tile's worth of lost balance in the last wave at most.

The queue goes through this ring when it is the first statement of the planned loop's nest (the
verifier keeps it at the top level of the kernel) and the plan has this one loop (no multicast: a pair
of blocks would take different tiles); otherwise the portable code runs the loop (codegen/control.py's
queue, a block barrier a round). Where the producer's threads all copy tiles (`by_threads`: an operand
TMA cannot load), one of them draws and all of them read the ring, as the consumers do.
"""

from __future__ import annotations

import math

from ..ir.tile_queue import TICKET_SLOTS, TileQueue
from .common import INDENT, indent
from .context import Ctx
from .control import queue_draw
from .expr_printer import var_name

FULL, EMPTY = "ts_qfull", "ts_qempty"  # the ring's barriers (shared memory, after the stages' own)
ROUND = "ts_qr"  # the round: the count of tickets this block has drawn so far


def barrier_words() -> int:
    """8-byte mbarrier words of the ticket ring: a full and an empty one per word."""
    return 2 * TICKET_SLOTS


def barrier_lines(first_word: int) -> list[str]:
    """The ring's barriers, at mbarrier word `first_word` on (after the stages' own)."""
    return [f"uint64_t* const {FULL} = ts_bars + {first_word};",
            f"uint64_t* const {EMPTY} = ts_bars + {first_word + TICKET_SLOTS};"]


def init_lines(reader_warps: int) -> list[str]:
    """Their initialisation (by thread 0, before the block splits): full counts the drawing thread's one arrival,
    empty every reader warp's (each consumer warp reads every round's ticket, ping-pong's warpgroups too, to keep
    count; and each producer warp where all the producer's threads copy tiles)."""
    return [f"for (int ts_s = 0; ts_s < {TICKET_SLOTS}; ++ts_s) {{",
            f"{INDENT}ts_mbar_init(&{FULL}[ts_s], 1);",
            f"{INDENT}ts_mbar_init(&{EMPTY}[ts_s], {reader_warps});",
            "}"]


def _drawn(q: TileQueue, ctx: Ctx) -> str:
    return f"reinterpret_cast<volatile int32_t*>({ctx.pointers[q.drawn]})"


def _slot(r: str) -> str:
    return f"({r}) % {TICKET_SLOTS}u"


def _phase(r: str) -> str:
    return f"(uint32_t)((({r}) / {TICKET_SLOTS}u) & 1u)"


def producer_rounds(q: TileQueue, inner: list[str], ctx: Ctx, issuer: str | None = None) -> list[str]:
    """The producer's rounds: the tile variable bound to the round's ticket, the next round's atomic issued, `inner`
    (the copies of the queue's tile, the skeleton of the statements between the queue and the loop around them),
    then the next ticket settled and published. `issuer`: None where one thread runs the producer, else the
    condition of the thread that draws among the producer warpgroup's threads, which all copy tiles (`by_threads`):
    they learn each round's ticket from the ring as the consumers do (and release it with them)."""
    tile = var_name(q.var)
    counter = f"reinterpret_cast<int32_t*>({ctx.pointers[q.counter]})"
    last = q.last_ticket(math.prod(ctx.kernel.grid))

    def publish(r: str) -> list[str]:  # round r's ticket, ts_qnext, into its word once every reader has its last
        return [f"if ({r} >= {TICKET_SLOTS}u) ts_mbar_wait(&{EMPTY}[{_slot(r)}], {_phase(f'{r} - {TICKET_SLOTS}u')});",
                f"{_drawn(q, ctx)}[{_slot(r)}] = ts_qnext;",
                f"ts_mbar_arrive(&{FULL}[{_slot(r)}]);  // a release: the readers' wait sees the word"]

    take = f"ts_qnext = ts_queue_take({counter});  // the next round's ticket: the atomic's trip overlaps the loads"
    settle = [f"ts_queue_settle({counter}, ts_qnext, {last});", *publish(f"{ROUND} + 1u")]
    first = [f"ts_qnext = {queue_draw(q, ctx)};", *publish("0u")]
    if issuer is not None:
        return [
            "{  // the tile queue's rounds: the tickets drawn by one thread, handed to all a round ahead",
            f"{INDENT}int32_t ts_qnext = 0;",
            f"{INDENT}if ({issuer}) {{",
            *indent(first, 2),
            f"{INDENT}}}",
            f"{INDENT}for (uint32_t {ROUND} = 0;; ++{ROUND}) {{",
            *indent(read_ticket(q, ROUND, ctx, tile), 2),
            f"{INDENT * 2}if ({tile} >= {q.extent}) break;  // none left: the block is done",
            f"{INDENT * 2}if ({issuer}) {take}",
            *indent(inner, 2),
            f"{INDENT * 2}if ({issuer}) {{",
            *indent(settle, 3),
            f"{INDENT * 2}}}",
            f"{INDENT}}}",
            "}",
        ]
    return [
        "{  // the tile queue's rounds: the tickets drawn, and handed to the consumers a round ahead",
        f"{INDENT}int32_t ts_qnext;",
        *indent(first),
        f"{INDENT}for (uint32_t {ROUND} = 0; ts_qnext < {q.extent}; ++{ROUND}) {{",
        f"{INDENT * 2}const int64_t {tile} = ts_qnext;",
        f"{INDENT * 2}{take}",
        *indent(inner, 2),
        *indent(settle, 2),
        f"{INDENT}}}",
        "}",
    ]


def read_ticket(q: TileQueue, r: str, ctx: Ctx, into: str, release: bool = True) -> list[str]:
    """`into` := round `r`'s ticket (every consumer thread), the word released by each warp after its lanes
    read it (`release`; False: a look ahead at a round the warp will read again)."""
    lines = [f"ts_mbar_wait(&{FULL}[{_slot(r)}], {_phase(r)});",
             f"const int64_t {into} = {_drawn(q, ctx)}[{_slot(r)}];"]
    if release:
        lines += ["__syncwarp();  // every lane has its copy: the warp releases the word",
                  f"if (threadIdx.x % 32 == 0) ts_mbar_arrive(&{EMPTY}[{_slot(r)}]);"]
    return lines


def consumer_rounds(q: TileQueue, body: list[str], ctx: Ctx) -> list[str]:
    """The cooperative consumers' rounds: every warpgroup takes every ticket and runs `body` for it."""
    tile = var_name(q.var)
    return [
        f"for (uint32_t {ROUND} = 0;; ++{ROUND}) {{  // {q.extent} tiles dealt to the blocks as they ask",
        *indent(read_ticket(q, ROUND, ctx, tile)),
        f"{INDENT}if ({tile} >= {q.extent}) break;  // none left: the block is done",
        *indent(body),
        "}",
    ]
