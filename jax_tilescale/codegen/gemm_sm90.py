"""Hopper lowering of `T.Pipelined` GEMM loops: TMA producer warpgroup, wgmma consumer warpgroups.

A kernel written the TileLang way,

    T.clear(C_f)
    for k in T.Pipelined(K // bk, num_stages=4):
        T.copy(A[by * bm, k * bk], A_s)        # global -> shared tiles
        T.copy(B[k * bk, bx * bn], B_s)
        T.gemm(A_s, B_s, C_f)                  # C_f: float32 fragment
    T.copy(C_f, C[by * bm, bx * bn])

is lowered, when `plan_with_reasons` finds every condition below, to the structure of a CUTLASS
"warp-specialised" mainloop:

- the block gets one more warpgroup (128 threads) than the kernel asked for: the producer. One
  of its threads runs every planned loop's copies as bulk tensor copies (TMA) into a ring of
  `num_stages` shared-memory stages, each completing on a "full" mbarrier; it waits on the
  stage's "empty" mbarrier before reusing it;
- the kernel's own threads (the consumers, `threads / 128` warpgroups) run the kernel body; a
  planned loop becomes: wait for the stage, issue the tile's wgmma instructions asynchronously,
  keep one stage's products in flight, release the previous stage;
- C_f lives in registers, in wgmma's accumulator layout: `T.clear`, `T.fill` and `T.copy` of the
  whole fragment are lowered element by element over each thread's own accumulators; a copy into a
  buffer another statement uses (a shared tile a `T.Parallel` then reads across threads) is followed
  by the consumers' barrier, as every block-level copy is.
- the kernel's last statement, the copy of the whole fragment into an fp16/bf16/fp32 output, is a TMA
  store (`TMA_STORE`): the consumers write their accumulators, converted, into the freed stage
  ring in the swizzled box layout, and one thread stores the boxes; the block's final
  wait is only for the boxes' shared-memory reads, not for their global writes;
- a tile whose source rows are not a multiple of 16 bytes (K = 777 in bf16), which TMA cannot
  address, is copied by the producer warpgroup's threads instead (gemm_sm90_load), so a tile
  configuration works at every shape;
- ragged edges (`Copy.clip_dims`): tiles loaded past the end of A or B need nothing, TMA fills the
  part of a box outside the tensor map's dimensions with zeros (and still counts the whole box's
  bytes on the mbarrier); the fragment's copies to and from a clipped window compare each
  element's row and column with the room left in the buffer (`gemm_emit.fragment_store` / `fragment_load`).

The shared tiles take a layout the tensor cores and TMA share (the widest swizzle of 128, 64 or 32
bytes that divides a tile row, see tilescale_sm90.cuh and gemm_sm90_load.swizzle_bytes). The
consumers synchronise with a named barrier over their own threads (`bar.sync 1, threads`), never
`__syncthreads`, which would wait for the producer.

Conditions (anything else takes the portable path of `compute.py`, and the generated source says why
in a comment): target sm_90; the kernel does not communicate; the loop is a top-level `T.Pipelined`
whose body is exactly two copies from 2-D kernel inputs into whole shared tiles and one `T.gemm` of
those tiles into a whole float32 fragment; fp16/bf16 tiles whose contiguous dimension is a multiple
of 16 (32-byte rows; 64, 128-byte rows, where it can), or float8 (e4m3/e5m2) tiles, both stored
K-major (A M x K, B N x K: `transpose_B=True`) with K a multiple of 128, and whose other dimension
is at most 256; `threads` a multiple of 128 (at most 512) with the M tile a multiple of 64 x
warpgroups; N at most 256; the fragment used only by T.clear/T.fill/whole T.copy, element-wise
updates (`T.Parallel`, gemm_pattern.register_epilogue) and the planned gemm; the tiles by nothing
else.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import ClassVar

from ..ir.kernel_ir import KernelIR
from ..ir.nodes import Buffer, BufferKind, Copy, Fill, Loop, Stmt, walk_stmts
from ..ir.tile_queue import TileQueue
from . import gemm_sm90_trace as trace
from .body import emit_body
from .common import INDENT, indent
from .context import Ctx, Frame
from .expr_printer import var_name
from .gemm_emit import SHARED_SYNC_NOTE, PairWalk, TensorCorePlan, acc_name, stage_bytes
from .gemm_pattern import (
    buffers_of,
    epilogue_statements,
    fragment_use_ok,
    match_gemm_step,
    shared_with_others,
    whole,
)
from .gemm_sm90_comm import CommRegions, candidate_loops, join_registers, nested_producer, plan_regions
from .gemm_sm90_edge import MMA, loop_variants, wrappers_wanted
from .gemm_sm90_fit import (
    PRODUCER_REGS,
    accumulators_fit,
    consumer_registers,
    register_advice,
    spill_note,
    tile_advice,
    wgmma_fits_launch,
)
from .gemm_sm90_load import (
    SWIZZLE_REPEAT_ROWS,
    SWIZZLES,
    TENSOR_MAP_FIELDS,
    WARPGROUP,
    GemmLoop,
    TensorMapSpec,
    iteration,
    plan_operand,
    producer_lines,
)
from .gemm_sm90_multicast import with_multicast
from .gemm_sm90_nest import consumer_tail, counter, inner_body, last_statement, nested_counters, nesting
from .gemm_sm90_pingpong import PingPong, asks_pingpong_it_may_take, plan_pingpong
from .gemm_sm90_probe import extra_reads_lines
from .gemm_sm90_queue import barrier_lines as queue_barrier_lines
from .gemm_sm90_queue import barrier_words as queue_barrier_words
from .gemm_sm90_queue import consumer_rounds, drawer_lines, queue_of
from .gemm_sm90_queue import init_lines as queue_init_lines
from .gemm_sm90_queue import refusal as queue_refusal
from .gemm_sm90_store import (
    TmaStore,
    plan_borrowed_store,
    plan_nested_store,
    plan_tma_store,
    staging_bytes,
    store_leader,
    tma_store_lines,
)
from .layout import shared_budget
from .wgmma import FP8_TYPES, TMA_DTYPE, WGMMA_INPUT_TYPES, k_per_instruction, wgmma_wrapper

__all__ = ["TENSOR_MAP_FIELDS", "Sm90Plan", "plan_with_reasons"]

SMEM_ALIGN = 1024  # swizzled tiles start at 1024-byte boundaries (the swizzle phase is the row's)


@dataclass
class Sm90Plan(TensorCorePlan):
    """What the Hopper lowering owns in one kernel: its loops, the register fragments they
    accumulate into (gemm_emit.TensorCorePlan lowers the fragments' other statements), and the
    warp-specialised frame around the kernel's statements."""

    loops: list[GemmLoop]
    consumers: int  # consumer warpgroups (the kernel's threads / 128)
    acc_slabs: dict[Buffer, int]  # accumulator fragment -> m64 slabs per consumer warpgroup
    acc_n: dict[Buffer, int]
    tensor_maps: list[TensorMapSpec]
    ptx_type: str
    cluster: int = 1  # blocks per cluster along grid x (2 when a loop multicasts a tile)
    stores: dict[Copy, TmaStore] = field(default_factory=dict)  # accumulator copies done by TMA store
    notes: list[str] = field(default_factory=list)
    regions: CommRegions | None = None  # a kernel that communicates: its head and tail (gemm_sm90_comm)
    blocks_per_sm: int = 1  # the kernel's: each block splits 1/blocks_per_sm of the register file
    pingpong: PingPong | None = None  # the consumer warpgroups take the tile loop's tiles in turn (gemm_sm90_pingpong)
    arch: ClassVar[str] = "sm_90a"  # wgmma and setmaxnreg need the architecture-specific target
    # Before a load, the consumers' earlier writes of the source.
    LOAD_SYNC: ClassVar = ("earlier writes of the source by other threads", None)

    def copy_sync(self, s: Copy, ctx: Ctx, store: bool) -> tuple[str | None, str | None]:
        """LOAD_SYNC's barrier before a load; after a copy whose window another statement uses, a barrier, as after
        every block-level copy (gemm_pattern.shared_with_others); none after C's store."""
        used = shared_with_others(s, self.register_buffers(), ctx.kernel.body)
        return (None if store else self.LOAD_SYNC[0]), (SHARED_SYNC_NOTE if used else None)

    # ---- facts for the layout and the kernel frame ----

    @property
    def user_threads(self) -> int:
        return self.consumers * WARPGROUP

    @property
    def consumer_regs(self) -> int:
        return consumer_registers(self.consumers, self.blocks_per_sm)

    @property
    def frame(self) -> Frame:
        """A producer warpgroup on top of the kernel's threads; `setmaxnreg` moves registers from it
        to the consumers."""
        if self.regions is None:
            return Frame(self.user_threads, WARPGROUP, PRODUCER_REGS, self.consumer_regs, (self.cluster, 1, 1),
                         blocks_per_sm=self.blocks_per_sm, consumers_apart=self.pingpong is not None)
        join = join_registers(self.consumer_regs, self.user_threads + WARPGROUP) if self.regions.tail else 0
        return Frame(self.user_threads, WARPGROUP, PRODUCER_REGS, self.consumer_regs, (self.cluster, 1, 1),
                     self.regions.head, self.regions.tail, join, self.blocks_per_sm)

    def register_buffers(self) -> frozenset[Buffer]:
        return frozenset(self.acc_slabs)

    def stage_buffers(self) -> dict[Buffer, int]:
        """The rings, each with the staging tiles of its own that follow it (gemm_sm90_nest)."""
        rings = stage_bytes(self.loops)
        for buf, extra in staging_bytes(self.stores).items():
            rings[buf] += extra
        return rings

    def barrier_words(self) -> int:
        return sum(2 * gl.stages for gl in self.loops) + (queue_barrier_words() if self.queue is not None else 0)

    @property
    def queue(self) -> TileQueue | None:
        """The tile queue whose tickets the producer draws for the consumers (gemm_sm90_queue), if any."""
        return queue_of(self.loops[0].nest) if self.loops else None

    def tensor_map_fields(self) -> tuple[int, ...]:
        fields = tuple(v for spec in self.tensor_maps for v in spec.encode())
        assert len(fields) == TENSOR_MAP_FIELDS * len(self.tensor_maps)
        return fields

    # ---- code ----

    def device_headers(self) -> tuple[str, ...]:
        return ("tilescale_sm90.cuh",)

    def declarations(self) -> list[str]:
        """The wgmma wrappers the kernel calls, and the tensor maps' parameter type."""
        wanted = {w for gl in self.loops for w in wrappers_wanted(gl, self._a_mn(gl), self._b_mn(gl))}
        helpers = [wgmma_wrapper(n, self.ptx_type, a_mn, b_mn, within) for n, a_mn, b_mn, within in sorted(wanted)]
        return [
            *"\n\n".join(helpers).splitlines(),
            "",
            "struct alignas(64) TsTensorMap { unsigned long long opaque[16]; };  // a CUtensorMap",
            f"struct TsTensorMaps {{ TsTensorMap m[{max(1, len(self.tensor_maps))}]; }};",
            "",
        ]

    def kernel_params(self) -> str:
        # no tensor map (every tile thread-copied, the epilogue from registers): the handler passes
        # `args` only (launch_handler.cc)
        return ", const __grid_constant__ TsTensorMaps ts_maps" if self.tensor_maps else ""

    @staticmethod
    def _a_mn(gl: GemmLoop) -> bool:
        return gl.gemm.transpose_a

    @staticmethod
    def _b_mn(gl: GemmLoop) -> bool:
        return not gl.gemm.transpose_b

    def setup(self, ctx: Ctx) -> list[str]:
        """The loops' full and empty mbarriers, initialised before the block splits."""
        lines = [f"uint64_t* const ts_bars = reinterpret_cast<uint64_t*>(ts_smem + {ctx.layout.mbarrier_offset});"]
        word = 0
        for gl in self.loops:
            lines.append(f"uint64_t* const {gl.full()} = ts_bars + {word};")
            lines.append(f"uint64_t* const {gl.empty()} = ts_bars + {word + gl.stages};")
            word += 2 * gl.stages
        if self.queue is not None:
            lines += queue_barrier_lines(word)
        lines.append("if (threadIdx.x == 0) {")
        for gl in self.loops:
            lines.append(f"{INDENT}for (int ts_s = 0; ts_s < {gl.stages}; ++ts_s) {{")
            lines.append(f"{INDENT * 2}ts_mbar_init(&{gl.full()}[ts_s], {gl.full_arrivals()});")
            lines.append(f"{INDENT * 2}ts_mbar_init(&{gl.empty()}[ts_s], {self._releases(gl)});")
            lines.append(f"{INDENT}}}")
        if self.queue is not None:
            # the ring's readers: every consumer warp, and the issuing thread (every producer warp where all copy)
            producer_readers = WARPGROUP // 32 if any(gl.by_threads for gl in self.loops) else 1
            lines += indent(queue_init_lines(self.consumers * WARPGROUP // 32 + producer_readers))
        # every thread of the block, the producer's too, meets here (not the consumers' barrier);
        # a cluster peer multicasts into our barriers: they must be initialised cluster-wide first (and
        # a kernel's own clusters meet before any block addresses a peer's tiles: ir/cluster.py)
        meet = "ts_cluster_sync();" if ctx.frame.cluster_blocks > 1 else "__syncthreads();"
        lines += [f"{INDENT}ts_mbar_init_fence();", "}", meet]
        return lines

    def producer(self, ctx: Ctx) -> list[str]:
        """The producer warpgroup's program (gemm_sm90_load)."""
        arrange = None
        if self.regions is not None:
            regions = self.regions
            arrange = functools.partial(nested_producer, ctx.kernel, regions, ctx)
        drawer = drawer_lines(self.queue, ctx) if self.queue is not None else []
        return producer_lines(self.loops, len(self.tensor_maps), self.user_threads, ctx, arrange, drawer)

    def accumulators(self) -> list[str]:
        return [*(f"float {acc_name(b)}[{slabs}][{self.acc_n[b] // 2}];" for b, slabs in self.acc_slabs.items()),
                *nested_counters(gl.index for gl in self.loops if gl.nest)]

    def consumer_exit(self) -> list[str]:
        """A tile loop's epilogue leaves its last TMA stores in flight (tma_store_lines): the shared
        memory they read must outlive them, and a tail that tells peers the output is written must
        come after the writes themselves."""
        if not any(st.in_flight for st in self.stores.values()):
            return []
        if self.regions is not None and self.regions.tail:
            return ["if (threadIdx.x == 0) ts_bulk_wait();  // the last tile's stores are written: the tail follows"]
        leader = store_leader(per_warpgroup=self.pingpong is not None)
        return [f"if ({leader}) ts_bulk_wait_read();  // the last tile's stores have read their staging tile"]

    def lines(self, stmt: Stmt, ctx: Ctx) -> list[str] | None:
        if isinstance(stmt, Fill) and any(gl.folded_clear is stmt for gl in self.loops):
            return ["// the loop's first products overwrite the accumulator (wgmma's scale-d 0): no clear"]
        if self.pingpong is not None and stmt is self.pingpong.tile_loop:
            return self.pingpong.tile_loop_lines(ctx, traced=STAGE_TRACE)
        if self.queue is not None and stmt is self.queue:  # cooperative: ping-pong's tile loop is the queue
            return consumer_rounds(stmt, emit_body(stmt.body, ctx), ctx)
        return super().lines(stmt, ctx)

    def _releases(self, gl: GemmLoop) -> int:
        """Arrivals that free a stage of the loop: every consumer warp (ping-pong: of the warpgroup whose tile it
        is), of both blocks of a multicast pair."""
        warps = 4 if self.pingpong else self.consumers * 4
        return warps * (2 if gl.multicast else 1)

    def _held(self, gl: GemmLoop) -> int:
        """How many of the loop's last stages its epilogue borrows as staging slots (0: none)."""
        st = self.stores.get(last_statement(gl.nest)) if gl.nest else None
        return st.slots if st is not None and st.borrowed else 0

    def _held_release(self, gl: GemmLoop, i: str) -> list[str]:
        """At the first k-step of every tile but the first, with its products issued: the store leader
        waits until the previous tile's stores have read the borrowed stages and releases them for
        every consumer warp at once."""
        held = self._held(gl)
        if not held:
            return []
        c = counter(gl.index)
        arrivals = self._releases(gl)  # every consumer warp's release, at once
        leader = store_leader(per_warpgroup=False)  # it committed the stores' bulk groups: only it can wait on them
        return [f"if ({i} == 0 && {c} > 0 && {leader}) {{  // the previous tile's staging stages",
                f"{INDENT}ts_bulk_wait_read();",
                *(f"{INDENT}ts_mbar_arrive_count(&{gl.empty()}[({c} - {j + 1}u) % {gl.stages}u], {arrivals}u);"
                  for j in range(held)),
                "}"]

    def _slab(self, buf: Buffer, m: str) -> str:
        """The fragment's row slab (64 rows) of this warpgroup's slab `m`: all of them are its own in ping-pong."""
        return m if self.pingpong else f"ts_wg * {self.acc_slabs[buf]} + {m}"

    def pair_walk(self, buf: Buffer) -> PairWalk:
        """wgmma's m64nNk16 layout: slab `ts_m` of this warpgroup, 8-column group `ts_j`, half `ts_h`."""
        slabs = self.acc_slabs[buf]
        return PairWalk(
            (f"const int ts_wg = threadIdx.x / {WARPGROUP}, ts_warp = (threadIdx.x % {WARPGROUP}) / 32, "
             "ts_lane = threadIdx.x % 32;",
             "(void)ts_wg; (void)ts_warp; (void)ts_lane;"),
            ("ts_m", slabs), ("ts_j", self.acc_n[buf] // 8),
            (f"const int ts_row = ({self._slab(buf, 'ts_m')}) * 64 + ts_warp * 16 + ts_lane / 4 + 8 * ts_h;",
             "const int ts_col = ts_j * 8 + (ts_lane % 4) * 2;"),
            lambda j: f"[ts_m][ts_j * 4 + ts_h * 2 + {j}]",
        )

    def store_lines(self, s: Copy, ctx: Ctx) -> list[str]:
        st = self.stores.get(s)
        if st is None:
            return super().store_lines(s, ctx)
        return tma_store_lines(s, st, self.acc_slabs[s.src.buffer], self.pair_walk(s.src.buffer), ctx,
                               per_warpgroup=self.pingpong is not None)

    def loop_lines(self, gl: GemmLoop, ctx: Ctx) -> list[str]:  # type: ignore[override]
        """Wait for the stage, issue its wgmma asynchronously, keep one stage in flight, release the previous."""
        i = var_name(gl.loop.var)
        it = iteration(gl, i)  # `i` unless the loop is nested in a tile loop (gemm_sm90_nest)
        acc = acc_name(gl.acc)
        slabs = self.acc_slabs[gl.acc]
        a_mn, b_mn = self._a_mn(gl), self._b_mn(gl)
        a, b = gl.a, gl.b
        descs: list[str] = []
        kin = k_per_instruction(self.ptx_type)
        wa, wb = a.swizzle, b.swizzle  # bytes per atom row (gemm_sm90_load.swizzle_bytes)
        # Leading byte offset: K-major, unused by swizzled layouts (16); MN-major, the next atom along M or N.
        # Stride byte offset: the next 8 rows of the atom (its swizzle pattern's repeat), both majors.
        a_lbo = a.rows * wa if a_mn else 16
        b_lbo = b.rows * wb if b_mn else 16
        slab_bytes = 64 * a.buffer.dtype.itemsize * a.rows if a_mn else 64 * wa  # an m64 slab of A's tile
        # Each instruction's descriptor is the ring's, plus the byte offset / 16 of its stage and its part of
        # the stage: one add (the start address field holds shared-memory offsets < 2^18 without carrying
        # into the next field), where building each one from its address took a mask, a shift and an or.
        for kk in range(gl.k // kin):
            kb = kk * 32  # the instruction's first byte along a K-major row (32 bytes per instruction)
            b_off = (kk * 16 * wb) if b_mn else ((kb // wb) * b.rows * wb + kb % wb)
            descs.append(f"const uint64_t ts_db{kk} = ts_db + {b_off // 16}u;")
            for m in range(slabs):
                slab = f"({self._slab(gl.acc, str(m))})"
                within = (kk * 16 * wa) if a_mn else ((kb // wa) * a.rows * wa + kb % wa)
                a_off = f"{slab} * {slab_bytes // 16}u + {within // 16}u"
                descs.append(f"const uint64_t ts_da{kk}_{m} = ts_da + ({a_off});")
                scale = "1"
                if kk == 0 and gl.gemm.clear_accum:
                    scale = "0"
                elif kk == 0 and gl.folded_clear is not None:
                    scale = f"({i} > 0)"  # the first stage overwrites: the clear before the loop is folded in
                descs.append(f"{MMA}({acc}[{m}], ts_da{kk}_{m}, ts_db{kk}, {scale});")
        fence = ["#pragma unroll", f"for (int ts_m = 0; ts_m < {slabs}; ++ts_m) ts_fence_regs({acc}[ts_m]);"]
        assert a.stage_bytes % 16 == 0 and b.stage_bytes % 16 == 0
        traced = STAGE_TRACE  # the diagnostic of gemm_sm90_trace: it writes over the product
        held = self._held(gl)
        bound = f" && {i} <= {gl.loop.extent - held}" if held else ""  # the last `held` stages: the epilogue's
        loop = [  # MMA stands for the wgmma wrapper until the loop's copies are made (gemm_sm90_edge)
            # a 32-bit counter: the consumers only derive the stage and the phase from it
            f"for (int {i} = 0; {i} < {gl.loop.extent}; ++{i}) {{",
            f"{INDENT}const int ts_s = (int)({it} % {gl.stages});",
            *indent(trace.before_stage_wait() if traced else [], 1),
            f"{INDENT}ts_mbar_wait(&{gl.full()}[ts_s], (uint32_t)(({it} / {gl.stages}) & 1));",
            *indent(trace.after_stage_wait(i) if traced else [], 1),
            f"{INDENT}const uint64_t ts_da = ts_da_ring + (uint32_t)(ts_s * {a.stage_bytes // 16});",
            f"{INDENT}const uint64_t ts_db = ts_db_ring + (uint32_t)(ts_s * {b.stage_bytes // 16});",
            *indent(fence, 1),
            f"{INDENT}ts_wgmma_fence();",
            *indent(descs, 1),
            f"{INDENT}ts_wgmma_commit();",
            *indent(extra_reads_lines(f"ts_smem_addr({ctx.pointers[a.buffer]}) + (uint32_t)(ts_s * {a.stage_bytes})",
                                      a.stage_bytes, WARPGROUP), 1),
            *indent(self.pingpong.early_turn_lines(i, gl.loop.extent, ctx) if self.pingpong is not None else [], 1),
            *indent(fence, 1),
            f"{INDENT}ts_wgmma_wait<1>();  // the previous stage's products are done: release it",
            *indent(fence, 1),
            *indent(self._held_release(gl, i), 1),
            f"{INDENT}if ({i} > 0{bound} && ts_lane == 0) {{",
            f"{INDENT * 2}ts_mbar_arrive(&{gl.empty()}[({it} - 1) % {gl.stages}]);",
            *([f"{INDENT * 2}ts_mbar_arrive_cluster(&{gl.empty()}[({it} - 1) % {gl.stages}], ts_crank ^ 1);"]
              if gl.multicast else []),
            f"{INDENT}}}",
            "}",
            # ping-pong: every stage of this tile waited for and its products issued: the other warpgroup may start
            *(self.pingpong.late_turn_lines(ctx) if self.pingpong is not None else []),
        ]
        return [
            *(trace.loop_start(pingpong=self.pingpong is not None) if traced else []),
            "const int ts_wg = threadIdx.x / 128, ts_lane = threadIdx.x % 32; (void)ts_wg;",
            f"const uint64_t ts_da_ring = ts_wgmma_desc(ts_smem_addr({ctx.pointers[a.buffer]}), {a_lbo}u, "
            f"{SWIZZLE_REPEAT_ROWS * wa}u, {SWIZZLES[wa][1]}u);",
            f"const uint64_t ts_db_ring = ts_wgmma_desc(ts_smem_addr({ctx.pointers[b.buffer]}), {b_lbo}u, "
            f"{SWIZZLE_REPEAT_ROWS * wb}u, {SWIZZLES[wb][1]}u);",
            *loop_variants(gl, loop, self.ptx_type, a_mn, b_mn),
            "ts_wgmma_wait<0>();",
            *fence,
            *(trace.loop_end(acc, gl.n) if traced else []),
            *(consumer_tail(gl.index, gl.empty(), gl.stages, gl.loop.extent, bool(gl.multicast), held=bool(held))
              if gl.nest else []),
        ]


# ---- planning ------------------------------------------------------------------------------------


def _plan_loop(loop: Loop, index: int, kernel: KernelIR, maps: list[TensorMapSpec], consumers: int,
               landing: frozenset[Buffer], tile_holders: int) -> GemmLoop | str:
    """The loop's plan, or why not. `tile_holders`: the consumer warpgroups whose m64 slabs make up one tile (all of
    them; one where the kernel asks for ping-pong, each warpgroup holding whole tiles: rechecked if it is refused)."""
    if loop.num_stages is None:
        return "not a T.Pipelined loop"
    step = match_gemm_step(loop, WGMMA_INPUT_TYPES, "wgmma",
                           lambda copy: plan_operand(copy, kernel.params, maps, TMA_DTYPE[copy.dst.buffer.dtype],
                                                     landing),
                           kinds="fp16/bf16/float8")
    if isinstance(step, str):
        return step
    g, a, b, m, n, k = step
    if m % (64 * tile_holders):
        return tile_advice(m, n, tile_holders, kernel.blocks_per_sm)
    if n > 256 or n % 8:
        return f"N tile {n} is not a multiple of 8 up to 256: take one (a multiple of 64 keeps 128-byte swizzles)"
    if not wgmma_fits_launch(n, consumers, kernel.blocks_per_sm):
        return register_advice(m, n, consumers, kernel.blocks_per_sm)
    ptx = WGMMA_INPUT_TYPES[g.a.buffer.dtype]
    if k % k_per_instruction(ptx):
        kin = k_per_instruction(ptx)
        return f"K tile {k} is not a multiple of {kin}: take one ({4 * kin} keeps 128-byte swizzles)"
    if ptx in FP8_TYPES and (g.transpose_a or not g.transpose_b):
        return ("float8 wgmma reads both tiles K-major: store A as M x K and B as N x K "
                "(T.gemm(A_s, B_s, C, transpose_B=True))")
    return GemmLoop(loop, index, a, b, g, g.c.buffer, m, n, k, loop.num_stages)


def _placement(kernel: KernelIR, loop: Loop, plannable: list[Loop] | None) -> tuple | str:
    """Where the plan may take `loop`, or why not. A kernel that communicates (`plannable`: its loops at
    the top level or directly in a top-level `if`, gemm_sm90_comm) takes no tile-loop nesting: (); the
    others: () at the top level, a tile loop's skeleton inside serial loops and ifs (gemm_sm90_nest)."""
    if plannable is None:
        return nesting(kernel, loop)
    if any(loop is p for p in plannable):
        return ()
    return "not at the top level of the kernel or directly in a top-level `if`"


def plan_with_reasons(kernel: KernelIR, arch: str) -> tuple[Sm90Plan | None, list[str]]:
    """The Hopper plan of `kernel` (None when no loop qualifies) and why each pipelined loop it
    leaves to the portable path does not qualify (the generated source's header prints them)."""
    reasons: list[str] = []
    if not arch.startswith("sm_90"):
        return None, [f"target {arch} is not sm_90"]
    stmts = list(walk_stmts(kernel.body))
    pipelined = [s for s in stmts if isinstance(s, Loop) and s.num_stages is not None]
    if not pipelined:
        return None, []
    communicates = any(s.communicates for s in stmts)
    # a communicating kernel may read a tile from one buffer or another (`if` around two loops)
    plannable = candidate_loops(kernel) if communicates else None
    # ... and read tiles of an output where peers' puts landed, after waiting for their signals
    landing = frozenset(b for b in kernel.remote_written() if b.kind is BufferKind.OUTPUT) if communicates \
        else frozenset()
    if kernel.threads % WARPGROUP or kernel.threads > 4 * WARPGROUP:
        return None, [f"threads={kernel.threads} is not 128, 256, 384 or 512"]
    consumers = kernel.threads // WARPGROUP
    # ping-pong asked for: each warpgroup would hold whole tiles, so a 64-row tile on two warpgroups may plan
    tile_holders = 1 if asks_pingpong_it_may_take(kernel, consumers, communicates) else consumers
    maps: list[TensorMapSpec] = []
    loops: list[GemmLoop] = []
    for loop in pipelined:
        nest = _placement(kernel, loop, plannable)
        if isinstance(nest, str):
            reasons.append(f"loop at {loop.loc}: {nest}")
            continue
        got = _plan_loop(loop, len(loops), kernel, maps, consumers, landing, tile_holders)
        if isinstance(got, str):
            reasons.append(f"loop at {loop.loc}: {got}")
        else:
            loops.append(dataclasses.replace(got, nest=tuple(nest)) if nest else got)
    if not loops:
        return None, reasons
    # Every other use of the tiles and accumulators must be one the plan lowers.
    owned = {id(gl.loop) for gl in loops}
    tiles = {op.buffer for gl in loops for op in (gl.a, gl.b)}
    accs = {gl.acc for gl in loops}
    inside = {id(s) for gl in loops for s in gl.loop.body} | epilogue_statements(stmts, accs)
    for s in stmts:
        if id(s) in owned or id(s) in inside:
            continue
        touched = buffers_of(s)
        if touched & tiles:
            return None, [*reasons, f"{s.op_name} at {s.loc} uses a pipelined tile outside its loop"]
        if touched & accs and not fragment_use_ok(s, accs):
            return None, [*reasons, f"{s.op_name} at {s.loc} uses the accumulator other than clear/fill/whole copy"]
    regions = None
    if communicates:
        got_regions = plan_regions(kernel, [gl.loop for gl in loops], tiles | accs)
        if isinstance(got_regions, str):
            return None, [*reasons, got_regions]
        regions = got_regions
    loops = [with_multicast(gl, kernel) if MULTICAST else gl for gl in loops]
    if (why := queue_refusal(loops)) is not None:
        return None, [*reasons, why]
    ptx = {WGMMA_INPUT_TYPES[gl.a.buffer.dtype] for gl in loops}
    if len(ptx) != 1:
        return None, [*reasons, f"the pipelined loops mix element types ({', '.join(sorted(ptx))})"]
    acc_n = {gl.acc: gl.n for gl in loops}
    loops = [_with_folded_clear(gl, kernel) for gl in loops]
    pingpong = plan_pingpong(kernel, loops, consumers, communicates)
    notes = []
    if isinstance(pingpong, str):  # asked for and not possible: the shared schedule, and the header says why
        notes.append(pingpong)
        pingpong = None
    split = [gl for gl in loops if gl.m % (64 * consumers)]  # planned for ping-pong's whole tiles, shared after all
    if pingpong is None and split:
        advice = [f"loop at {gl.loop.loc}: {tile_advice(gl.m, gl.n, consumers, kernel.blocks_per_sm)}" for gl in split]
        return None, [*reasons, *notes, *advice]
    # ping-pong: each consumer warpgroup holds whole tiles (all the m64 slabs) and stages its own
    slabs = {gl.acc: gl.m // 64 // (1 if pingpong else consumers) for gl in loops}
    notes += [spill_note(gl.m, gl.n, slabs[gl.acc], consumers, kernel.blocks_per_sm) for gl in loops
              if not accumulators_fit(slabs[gl.acc], gl.n, consumers, kernel.blocks_per_sm)]
    cluster = 2 if any(gl.multicast for gl in loops) else 1
    stores = _tma_stores(kernel, loops, maps, arch, staging_copies=2 if pingpong else 1)
    plan = Sm90Plan(loops, consumers, slabs, acc_n, maps, ptx.pop(), cluster, stores, regions=regions,
                    notes=notes, blocks_per_sm=kernel.blocks_per_sm, pingpong=pingpong)
    return plan, reasons


# ---- the epilogue: the accumulator's store through shared memory and TMA ----------------------------

# A cooperative tile loop's epilogue stages through its last stages' A tiles (plan_borrowed_store), not a staging
# tile beside the rings: 256x192/4 persistent 0.93 -> 1.01x XLA at 8192^3 (benchmarks/NOTES.md, 2026-12-04).
# False: the staging tile (bench_gemm.py's "/noring" configs)
BORROW_RING = True
TMA_STORE = True  # False: every accumulator copy stores from registers (bench_gemm.py's "/direct" configs)


def _tma_stores(kernel: KernelIR, loops: list[GemmLoop], maps: list[TensorMapSpec],
                arch: str = "sm_90", staging_copies: int = 1) -> dict[Copy, TmaStore]:
    if not TMA_STORE:
        return {}
    stores = plan_tma_store(kernel, loops, maps)
    if any(gl.nest for gl in loops):  # tile loops: a staging tile of their own, where it fits
        used = sum(stage_bytes(loops).values()) + 8 * sum(2 * gl.stages for gl in loops) + SMEM_ALIGN
        used += 8 * queue_barrier_words() if queue_of(loops[0].nest) is not None else 0
        used += sum(b.nbytes for b in kernel.allocs if b.kind is BufferKind.SHARED and b not in stage_bytes(loops))
        room = shared_budget(arch, kernel.blocks_per_sm) - used - SMEM_ALIGN
        borrowed = plan_borrowed_store(kernel, loops, maps, room) if BORROW_RING and staging_copies == 1 else {}
        stores |= borrowed
        rest = [gl for gl in loops if last_statement(gl.nest) not in borrowed]
        stores |= plan_nested_store(kernel, rest, maps, room, staging_copies)
    return stores


# ---- the accumulator's clear before its loop, folded into the loop's first products ----------------

FOLD_CLEARS = True  # False: T.clear before a loop zeroes the registers (the A/B of benchmarks/NOTES.md)


def _with_folded_clear(gl: GemmLoop, kernel: KernelIR) -> GemmLoop:
    """The loop with the `T.clear` (fill with 0) of its whole accumulator that comes right before it
    in the same body, where the loop runs at least once and its gemm accumulates: the loop's first
    products overwrite the accumulator instead (wgmma's scale-d 0 on the first stage's first
    instruction), which saves a register write per accumulator while the tensor cores wait (each
    tile of a persistent kernel)."""
    if not FOLD_CLEARS or not (isinstance(gl.loop.extent, int) and gl.loop.extent >= 1) or gl.gemm.clear_accum:
        return gl
    body = inner_body(gl.nest) if gl.nest else kernel.body
    at = next((n for n, s in enumerate(body) if s is gl.loop), None)
    before = body[at - 1] if at else None
    if isinstance(before, Fill) and before.dst.buffer is gl.acc and before.value == 0 and whole(before.dst):
        return dataclasses.replace(gl, folded_clear=before)
    return gl


# ---- switches read while planning and emitting ----------------------------------------------------------------

STAGE_TRACE = False  # the consumers' stage waits written over the product (gemm_sm90_trace; tools/stage_trace.py)
MULTICAST = False  # measured slower on H200, persistent kernels too (benchmarks/NOTES.md); tests turn it on
