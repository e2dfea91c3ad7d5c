"""A tile queue (ir/tile_queue.py) around the Hopper GEMM lowering's pipelined loop (`gemm_sm90`,
`gemm_sm90_nest`): the persistent kernel with a dynamic tile scheduler,

    for tile in T.tile_queue(tiles):     # grid = (SM count,)
        tm, tn = <order of tile>
        T.clear(C_f)
        for ko in T.Pipelined(...): copy, copy, gemm
        T.copy(C_f, C[tm * bm, tn * bn])

A thread of its own, the first of the producer warpgroup's second warp, draws the tickets (an atomic add on
the queue's global counter) and hands each to the readers through a ring of TICKET_SLOTS words of shared
memory (`TileQueue.drawn`) with a full and an empty mbarrier per word, as the stages go through theirs: it
writes round r's ticket into word r % TICKET_SLOTS and arrives on its full barrier (a release); each reader
(every consumer warp, and the thread that issues the loads) waits on it (acquire), reads the ticket and
arrives on its empty barrier, which the drawing thread waits on before it writes the word again,
TICKET_SLOTS rounds later. So it draws up to two rounds ahead of the slowest reader, and every ticket is
published before anyone needs it; ping-pong's warpgroups look at the next round's ticket to know whether
to pass the turn (gemm_sm90_pingpong), which must not wait.

Why a thread of its own: an arrival on an mbarrier is a release, which waits until the thread's earlier
memory operations are performed, so a draw in the thread that issues the loads could hold a tile's first
stage behind the atomic's round trip to L2. Measured (benchmarks/NOTES.md, forty-seventh session, H100,
16384 x 8192 x 1024, the ping-pong pick from the queue): 1.24x XLA's cycles with the draw between two
tiles, 1.23x with its atomic issued a tile earlier, 1.25x with this drawing thread, against 1.02 for the
static deal; the busiest SM's tensor pipe idles ~2,500 cycles a tile more in all three. So the draw's
place was not the cost. Part of it was the ticket read as a signed int, which let nvcc turn the banded
order's select between two constant divisors into a division at run time, in the producer's k-loop; read
zero-extended (control.ticket_value) the divisions stay multiplications, and the queue took 1.13-1.19x
XLA's cycles, 0.91x timed against the static deal's 0.97 (forty-eighth session; its traced loops as fast as
the static deal's: the rest is not found). The cooperative 256x192 kernel from the queue runs level with
its static deal at 8192^3. The GEMM table keeps the static deal (`tile_queue` off).

The queue goes through this ring when it is the first statement of the planned loop's nest (the
verifier keeps it at the top level of the kernel) and the plan has this one loop (no multicast: a pair
of blocks would take different tiles); otherwise the portable code runs the loop (codegen/control.py's
queue, a block barrier a round). Where the producer's threads all copy tiles (`by_threads`: an operand
TMA cannot load) no thread is left over: the issuing thread draws each next round's ticket before the
tile's loads, and all of the producer's threads read the ring as the consumers do.
"""

from __future__ import annotations

from ..ir.nodes import Stmt
from ..ir.tile_queue import TICKET_SLOTS, TileQueue
from .common import INDENT, indent
from .context import Ctx
from .control import queue_draw, ticket_value
from .expr_printer import var_name

FULL, EMPTY = "ts_qfull", "ts_qempty"  # the ring's barriers (shared memory, after the stages' own)
ROUND = "ts_qr"  # a reader's round: the count of tickets it has read so far


def queue_of(nest: tuple[Stmt, ...]) -> TileQueue | None:
    """The tile queue around a planned loop's nest of statements, if it has one (outermost: the verifier keeps it at
    the top)."""
    return nest[0] if nest and isinstance(nest[0], TileQueue) else None


def refusal(loops: list) -> str | None:
    """Why the plan cannot take the tile queue around its loops (None: it can): one drawing thread draws for one
    loop's producer."""
    queued = [gl for gl in loops if queue_of(gl.nest) is not None]
    if queued and len(loops) != 1:
        return (f"loop at {queued[0].loop.loc}: in a tile queue the plan takes one pipelined loop (one thread draws "
                "the tickets for one producer): the portable code runs it")
    return None


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


def drawer_lines(q: TileQueue, ctx: Ctx) -> list[str]:
    """The drawing thread's program (a thread of the producer warpgroup that issues no copies): draw round r's
    ticket once every reader has read round r - TICKET_SLOTS's, publish it, stop after the first past the tiles.
    Its arrival on a word's full barrier is a release, which waits for its own atomic to come back from L2: in
    the thread that issues the loads, each stage's arrival (a release too) stood behind the atomic (benchmarks/
    NOTES.md, forty-seventh session); here nothing waits for it but the next draw."""
    r = "ts_qd"
    return [
        f"for (uint32_t {r} = 0;; ++{r}) {{  // the tile queue's tickets, drawn for the block's readers",
        *indent(_publish(q, r, ctx)),
        f"{INDENT}if (ts_qt >= {q.extent}) break;  // the block's last: every reader leaves on it",
        "}",
    ]


def round_head(q: TileQueue, ctx: Ctx, lone: bool = False) -> list[str]:
    """The head of a reader's loop over the queue's rounds: the round's ticket read into the tile variable
    (`read_ticket`; `lone`: by the issuing thread alone), the loop left on the first ticket past the tiles. The
    caller adds the round's body and the closing brace."""
    tile = var_name(q.var)
    return [f"for (uint32_t {ROUND} = 0;; ++{ROUND}) {{  // {q.extent} tiles dealt to the blocks as they ask",
            *indent(read_ticket(q, ROUND, ctx, tile, lone=lone)),
            f"{INDENT}if ({tile} >= {q.extent}) break;  // none left: the block is done"]


def producer_rounds(q: TileQueue, inner: list[str], ctx: Ctx, issuer: str | None = None) -> list[str]:
    """The producer's rounds: each round's ticket read from the ring, the tile variable bound to it, `inner` (the
    copies of the queue's tile, the skeleton of the statements between the queue and the loop around them).
    `issuer`: None where one thread issues the loads (the drawing thread, `drawer_lines`, draws for it), else the
    condition of the producer thread that issues where all of them copy tiles (`by_threads`: no thread is left
    to draw, and they all read every ticket, so the drawing thread's loop runs in the issuer, before the loads)."""
    if issuer is None:
        return [*round_head(q, ctx, lone=True), *indent(inner), "}"]
    # after the exit test: a block draws once per tile it takes and once past the tiles, no more (ir/tile_queue.py)
    draw_next = [f"if ({issuer}) {{  // the next round's, once every reader has read the word's last",
                 *indent(_publish(q, f"{ROUND} + 1u", ctx)),
                 "}"]
    return ["{  // the tile queue's rounds: the issuer draws each next ticket before the tile's loads",
            f"{INDENT}if ({issuer}) {{",
            *indent(_publish(q, "0u", ctx, first=True), 2),
            f"{INDENT}}}",
            *indent([*round_head(q, ctx), *indent(draw_next), *indent(inner), "}"]),
            "}"]


def _publish(q: TileQueue, r: str, ctx: Ctx, first: bool = False) -> list[str]:
    """Round `r`'s ticket drawn into its word, once every reader has read the word's last (round r - TICKET_SLOTS;
    none before the `first` round), and its full barrier arrived on."""
    wait = f"if ({r} >= {TICKET_SLOTS}u) ts_mbar_wait(&{EMPTY}[{_slot(r)}], {_phase(f'{r} - {TICKET_SLOTS}u')});"
    return [*([] if first else [wait]),
            f"const int32_t ts_qt = {queue_draw(q, ctx, r)};",
            f"{_drawn(q, ctx)}[{_slot(r)}] = ts_qt;",
            f"ts_mbar_arrive(&{FULL}[{_slot(r)}]);  // a release: the readers' wait sees the word"]


def read_ticket(q: TileQueue, r: str, ctx: Ctx, into: str, release: bool = True, lone: bool = False) -> list[str]:
    """`into` := round `r`'s ticket, the word released by each warp after its lanes read it (`release`; False: a
    look ahead at a round the warp will read again), or by the thread itself where it reads alone (`lone`: the
    producer thread that issues the loads)."""
    lines = [f"ts_mbar_wait(&{FULL}[{_slot(r)}], {_phase(r)});",
             f"const int64_t {into} = {ticket_value(f'{_drawn(q, ctx)}[{_slot(r)}]')};"]
    if lone:
        lines.append(f"ts_mbar_arrive(&{EMPTY}[{_slot(r)}]);  // read: the drawing thread may reuse the word")
    elif release:
        lines += ["__syncwarp();  // every lane has its copy: the warp releases the word",
                  f"if (threadIdx.x % 32 == 0) ts_mbar_arrive(&{EMPTY}[{_slot(r)}]);"]
    return lines


def consumer_rounds(q: TileQueue, body: list[str], ctx: Ctx) -> list[str]:
    """The cooperative consumers' rounds: every warpgroup takes every ticket and runs `body` for it."""
    return [*round_head(q, ctx), *indent(body), "}"]
