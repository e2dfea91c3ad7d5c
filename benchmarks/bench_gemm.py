"""GEMM sweep of issue 16: the T.Pipelined + T.gemm kernels of examples/gemm.py (bf16) and
examples/gemm_fp8.py (float8 e4m3) against jnp.dot and, where torch with CUDA is importable,
cuBLAS (torch.matmul, torch._scaled_mm for FP8), same run, same GPU.

    python benchmarks/bench_gemm.py            # the whole sweep, one table (about 10 minutes on an H200)
    python benchmarks/bench_gemm.py --shapes 16x4096x4096 --configs skinny --fp8-shapes 16x4096x4096 \
        --fp8-configs 128x256x128/4/g8,16x64x256/9/g1/t128/swap   # a decoder's 16 tokens, the swapped products too

Both are timed the same three ways, interleaved (`--rounds`, 5 by default, each running every variant once, so
that clock and temperature drift hit all alike; medians reported), each timed run preceded by
`--heat` seconds of the same runner (steady state under the GPU's power cap):
- loop: one jitted `fori_loop` of `reps` products, each reduced to one element so that nothing
  else is timed (the method of the issue and of shared/reference/gemm_ceiling.py), except where XLA finishes the
  product after our kernel (a split-K sum: `finishes_in_xla`), whose whole result the loop carries; cuBLAS's the same
  iterations recorded as one CUDA graph (the GPU's time, not torch's dispatch from Python);
- graph: the products back to back on the GPU, as cuBLAS's graph runs them (whose column it shares): the
  jitted `fori_loop` with GRAPH_UNROLL products per iteration (each on the same arrays passed as parameters of
  its own, so that XLA cannot merge the identical products), recorded by XLA as one CUDA graph
  (`compiler_options`: ts.testing.LOOP_GRAPH_OPTIONS, WHILE command buffers, each command serialised after the
  one before as in a stream capture: GRAPH_OPTIONS). Neither the loop form's
  per-iteration host pacing (XLA's WHILE runs from the host by default) nor a recorded WHILE's per-iteration
  condition (~5 us: one product per recorded iteration measured slower than the host's loop, NOTES
  2026-12-04) is in it then. Each of our kernels' graph runs is checked to have been replayed (fewer handler
  calls than products; the row's code column says `not replayed` otherwise). `--cold`: each of an iteration's
  products reads its own copy of A and B (cuBLAS's graph alike, timed apart from its loop then), so that a skinny
  product's weight comes from HBM as in a decoder, where the same arrays stay in the 50 MiB L2 between products
  (a 16 x 4096 x 4096 product's 32 MiB B does);
- calls: `reps` jitted calls dispatched back to back, full outputs, each dropped when the next call is
  dispatched, the last one blocked on (they run in order on the device's stream). Blocking on all of them at
  the end cost the host a few microseconds per output, which showed as 10-35% at 2048^3 (NOTES, 2026-12-03).
  A calls time marked `h` was host-bound: the loop of dispatches itself took at least HOST_BOUND of the timed
  run, so the GPU waited on the host's per-call cost (JAX's dispatch: ~40 us a call on the H200 machine, XLA's
  product alike, where torch's eager call takes 24; NOTES, 2026-12-04) and the row compares dispatch, not kernels.
`reps` is at least `--reps` and at small shapes as many as jnp.dot needs for `--min-run-ms` per timed
run, so that a dispatch and the host's wake-up are not part of what a row measures.
Every kernel result is first checked against jnp.dot in float32 (all elements, random data).
Prints one row per shape, config and lowering: time, TFLOP/s, ratio to XLA, the lowest and highest ratio to XLA of a
single round in the loop and in the graph form ("rounds": the pair timed in the same round, so a range that holds
1.0 says the median's distance from it is the run's drift), the lowering the loop took and ptxas's registers/spills.
`--rounds N` (default 5) times more rounds. `--lowerings auto,mma` times each config through each GEMM lowering
(jax_tilescale/codegen/gemm_select.py: sm90 = TMA + wgmma, mma = cp.async + ldmatrix + mma.sync, portable), in the
same interleaved rounds. `--trace`: the loop's wall time also holds the host's pacing of XLA's fori_loop (run from
the host by default); after the rounds each jitted loop runs under jax.profiler (`--heat` seconds, then once more:
that last loop is read), the graph forms too, and a second table gives the GPU's own time per product
(benchmarks/_gpu_trace.py; CUPTI can miss many of a recorded graph's kernels, a different runner's in each
process: its `n` column says how many of the run's it read; NOTES, twenty-sixth session). `--power`: the SM clock
and power (NVML) sampled while each runner runs, and the energy per product (benchmarks/_gpu_power.py): under the
700 W cap the clock says whether a slower runner needs more cycles or ran at a lower clock.

    python benchmarks/bench_gemm.py [--reps 20] [--shapes 8192x8192x8192,...] [--lowerings auto,mma]
        [--configs 128x256x64/4/g8,128x128x32/4/g8/t128,256x192x64/4/g8/direct]
    python benchmarks/bench_gemm.py --shapes decoder --configs table --fp8-shapes=   # a decoder's 20 projections

`--shapes` takes MxNxK entries and set names: `issue` (the default, issue 16's sweep) and `decoder` (DECODER_SHAPES).

`--configs table` times only the table's pick at each shape (the issue's sweep as a user runs it); `--configs
table,tuned` also `gemm(autotune=True)`'s choice (the tuner's lines on stderr say which it took and why);
`--configs skinny` the pick and every candidate of the table's skinny estimate, each estimate printed first (to
check or recalibrate gemm_table.BLOCK_S_PER_K against one run); in a list, `swapped` and `swapped/s2` stand for the
swapped product's tiles at each shape's M (gemm_table.swapped_config; left out above 64 rows), in `--fp8-configs`
`swapped` likewise;
`--configs auto` (the default) times at each shape the tile table's pick (codegen/gemm_table.py;
the row marked `/table`: `gemm()` called with no tile arguments), the CANDIDATES (non-persistent
128x256, persistent 256x192 (its epilogue through the ring's last stages), 128x256 and 128x192 ping-pong, two
128x128 blocks per SM) and, where the shape has at
most half as many tiles as SMs, split-K 2 and 4 (partials summed by XLA
afterwards, gemm()'s default) and split-K 4 reduced inside the kernel (`/s4/kernel`): the fastest
row per shape is "our best config".

    python benchmarks/bench_gemm.py --shapes 2048x2048x2048,4096x4096x4096,128x8192x8192,16384x8192x1024 \
        --fp8-shapes=        # issue 16's small and skinny shapes only (about 4 minutes)

A config's optional suffixes: `/sN` split-K over N blocks per tile (the partials summed by XLA
afterwards), `/kernel` with it: summed by the tile's last split inside the kernel instead
(examples/gemm.py's SplitK reduce="kernel"; `/xla` names the default; `/cluster`: a tile's splits are one
thread-block cluster adding through shared memory, reduce="cluster"), `/p` the persistent tile
loop, `/tN` threads, `/bN` N blocks per SM (ts.kernel's blocks_per_sm), `/mc` two-block clusters
multicasting the shared tile (gemm_sm90.MULTICAST), `/direct` the epilogue stored from registers
instead of through shared memory and TMA (gemm_sm90.TMA_STORE off), `/pp` a persistent kernel's
consumer warpgroups taking whole tiles in turn (ts.kernel's pingpong, GemmConfig.pingpong), `/swap` each tile
computed transposed, C^T = B^T A^T (GemmConfig.swap: a decoder's few tokens on wgmma's n), `/gc` a persistent grid's
groups of tile columns walking the rows (GemmConfig.group_columns), `/pr` with it the rows two at a time (each block
pair takes one tile column: with `/mc` the pair shares B's tile; GemmConfig.pair_rows), `/smemx1`,
`/smemx2` each consumer warpgroup re-reading every stage's A tile once or twice (gemm_sm90_probe: is the main
loop shared-memory bound?), `/nodep` launched
plainly instead of as a programmatic dependent of the kernel before it (codegen.cuda.DEPENDENT_LAUNCH off). `/mc` builds
a pair only where neighbouring blocks provably load the same tile (an even grid x; in a persistent kernel,
at every wave): the code column says "cluster 2" where it did.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import pathlib
import re
import sys
import time
from dataclasses import asdict

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _cublas_torch import cublas_runners, torch_cuda
from _gemm_configs import (  # noqa: F401 (the sets and parsers are bench_gemm's names too: tools and tests use them)
    CANDIDATES,
    CONFIGS,
    DECODER_SHAPES,
    FP8_SHAPES,
    SHAPE_SETS,
    SHAPES,
    SWITCHES,
    parse_config,
    parse_entry,
    per_shape_entry,
    shape_configs,
    shape_list,
    skinny_estimates,
)
from _gemm_report import FORMS, XLA, print_power, print_table, print_traced, row
from _gpu_power import Sampler, open_nvml
from _gpu_trace import last_run, product_step, traced
from gemm import device_sm_count, gemm, tuned_config
from gemm_fp8 import gemm_fp8, quantize

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.codegen.gemm_select import LOWERING_VAR, LOWERINGS
from jax_tilescale.codegen.gemm_table import FP8_DEFAULT
from jax_tilescale.compiler import compile_cubin, kernel_resources
from jax_tilescale.testing import LOOP_GRAPH_OPTIONS

GRAPH_UNROLL = 16  # products per iteration of the graph form's recorded loop (a multiple of it per timed run)
# The graph form's recording: loops as graphs, and every command after the one before it, as a stream capture
# (cuBLAS's graph) runs them; XLA's default mode may let independent products overlap in the graph.
GRAPH_OPTIONS = {**LOOP_GRAPH_OPTIONS, "xla_gpu_command_buffer_scheduling_mode": "SERIALIZE"}
FP8_CONFIGS = FP8_DEFAULT.describe()  # the 8192^3 tiles; `--fp8-configs` times others (`table`: fp8_pick, `tuned`)
FP8_ARGUMENTS = {"block_m", "block_n", "block_k", "num_stages", "group_m", "threads", "swap", "autotune"}  # gemm_fp8's


@contextlib.contextmanager
def codegen_settings(lowering: str, switches: dict[tuple, object]):
    """$TILESCALE_GEMM_LOWERING and the code generator switches, set while a kernel is lowered."""
    old_env, old = os.environ.get(LOWERING_VAR), {key: getattr(*key) for key in switches}
    os.environ[LOWERING_VAR] = lowering
    for (module, name), value in switches.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for (module, name), value in old.items():
            setattr(module, name, value)
        if old_env is None:
            os.environ.pop(LOWERING_VAR, None)
        else:
            os.environ[LOWERING_VAR] = old_env


def with_settings(lowering: str, switches: dict[tuple, object], fn):
    """`fn` run under `codegen_settings`: kernels are lowered at their first (compiling) call, so
    each runner's kernel takes its own lowering and switches."""
    def run(*args):
        with codegen_settings(lowering, switches):
            out = fn(*args)
        run.dispatch_s = getattr(fn, "dispatch_s", None)
        return out

    run.dispatch_s = None
    return run


def loop_and_calls(product, reps: int, whole: bool = False):
    """(loop, calls): functions of (a, b) that run `reps` products, jitted (see the docstring). `whole`: the loop
    also carries each product's whole result and returns the last (`finishes_in_xla`)."""
    def body(x, y):
        def step(i, carry):
            out = product(x, y)
            return carry[0] + out[0, 0].astype(jnp.float32), (out if whole else carry[1])

        kept = _zeros_like_result(product, x, y) if whole else ()
        acc, last = jax.lax.fori_loop(0, reps, step, (jnp.float32(0), kept))
        return (acc, last) if whole else acc

    loop = jax.jit(body)
    call = jax.jit(product)

    def calls(a, b):
        t0 = time.perf_counter()
        out = None
        for _ in range(reps):
            out = call(a, b)
        calls.dispatch_s = time.perf_counter() - t0  # the host's share: see interleaved_times
        return out

    calls.dispatch_s = None
    return (lambda a, b: loop(a, b)), calls


def _zeros_like_result(product, x, y) -> jax.Array:
    result = jax.eval_shape(product, x, y)
    return jnp.zeros(result.shape, result.dtype)


def finishes_in_xla(kern) -> bool:
    """Whether a product's last step is XLA's, after our kernel: a split-K sum of partials (examples/gemm.py's
    SplitK, reduce="xla"). Taking one element of such a product let XLA fuse the sum into that element's slice
    and compute one element of it, so the loop and graph forms timed the partials' kernel without their sum
    (twenty-seventh session, NOTES); those forms carry the whole result of each such product instead, which XLA
    must then write in full."""
    return getattr(kern, "reduce", None) == "xla" and getattr(kern, "splits", 1) > 1


def graph_loop(product, reps: int, whole: bool = False, copies: list | None = None):
    """A function of (a, b) that runs `reps` products (a multiple of GRAPH_UNROLL) as the graph form (the
    docstring): GRAPH_UNROLL products per iteration of a loop XLA records as one CUDA graph. `whole`: every product's
    whole result is carried (as loop_and_calls'). `copies` (`cold_copies`, `--cold`): GRAPH_UNROLL (x, y) pairs that
    the iteration's products read in place of a and b, one pair each."""
    if copies is not None and len(copies) != GRAPH_UNROLL:
        raise ValueError(f"the graph form's products read {GRAPH_UNROLL} pairs of operands, not {len(copies)}")
    if reps % GRAPH_UNROLL:
        raise ValueError(f"the graph form runs whole iterations of {GRAPH_UNROLL} products, not {reps}")

    def unrolled(*pairs):  # GRAPH_UNROLL (x, y) pairs: the same two arrays, as distinct parameters
        def step(i, carry):
            acc, kept = carry
            outs = []
            for j in range(GRAPH_UNROLL):
                out = product(pairs[2 * j], pairs[2 * j + 1])
                acc = acc + out[0, 0].astype(jnp.float32)
                outs.append(out)
            return acc, (tuple(outs) if whole else kept)

        kept = tuple(_zeros_like_result(product, *pairs[:2]) for _ in range(GRAPH_UNROLL)) if whole else ()
        acc, kept = jax.lax.fori_loop(0, reps // GRAPH_UNROLL, step, (jnp.float32(0), kept))
        return (acc, kept) if whole else acc

    graph = jax.jit(unrolled, compiler_options=GRAPH_OPTIONS)
    # The same buffers through distinct parameters: XLA cannot tell the products equal, so it keeps every one
    # (with one pair of parameters its CSE merged an iteration's products into one; an optimisation barrier did
    # not stop it), and every product reads what the others read (L2 alike, as in the other forms), unless
    # `copies` gives each product operands of its own.
    def run(a, b):
        return graph(*((a, b) * GRAPH_UNROLL if copies is None else (x for pair in copies for x in pair)))

    run.jitted = graph  # for tests: the compiled loop keeps GRAPH_UNROLL products
    return run


def timing_forms(product, reps: int, whole: bool | None = None, copies: list | None = None) -> dict:
    """FORMS -> a function of (a, b) running `reps` products that way (the docstring); `whole`: the loop and graph
    forms carry each product's whole result (by default where `finishes_in_xla(product)`); `copies`: the graph
    form's operands, a pair a product (graph_loop)."""
    whole = finishes_in_xla(product) if whole is None else whole
    loop, calls = loop_and_calls(product, reps, whole)
    return {"loop": loop, "graph": graph_loop(product, reps, whole, copies), "calls": calls}


def cold_copies(a, b) -> list:
    """`--cold`: GRAPH_UNROLL distinct copies of (a, b), the same values in buffers of their own, so that each
    product of the graph form's iteration reads operands no other product of it has just read: a skinny product's
    weight then comes from HBM, as a decoder's layers' weights do, not from the L2 the products before left it in."""
    return [(jnp.array(a, copy=True), jnp.array(b, copy=True)) for _ in range(GRAPH_UNROLL)]


def whole_iterations(reps: int) -> int:
    """`reps` rounded up to whole iterations of the graph form's loop."""
    return -(-reps // GRAPH_UNROLL) * GRAPH_UNROLL


def handler_calls_per_run(run, a, b, runs: int = 3) -> list[int]:
    """Our launch handler's calls in each of `runs` runs of `run(a, b)` after a first one (xla_ffi/module.cc counts
    them)."""
    from jax_tilescale import _ffi

    jax.block_until_ready(run(a, b))
    calls = []
    for _ in range(runs):
        _ffi.take_handler_times()
        jax.block_until_ready(run(a, b))
        calls.append(_ffi.take_handler_times()[0])
    return calls


def replayed(run, a, b, reps: int) -> bool:
    """Whether one run of `reps` products of our kernel launched most of them from XLA's recorded graph, not
    through the launch handler."""
    return handler_calls_per_run(run, a, b, runs=1)[0] < reps


def reps_for(a, b, reps: int, min_run_ms: float) -> int:
    """Products per timed run at this shape: at least `reps`, and enough that jnp.dot's loop takes
    `min_run_ms` (at 2048^3, 20 products are 0.8 ms, where one dispatch and the host's wake-up after
    `block_until_ready`, tens of microseconds, moved single rows by 10-40%: benchmarks/NOTES.md)."""
    loop, _ = loop_and_calls(lambda x, y: x @ y, reps)
    jax.block_until_ready(loop(a, b))
    t0 = time.perf_counter()
    jax.block_until_ready(loop(a, b))
    per_product = (time.perf_counter() - t0) / reps
    return whole_iterations(max(reps, min(4000, math.ceil(min_run_ms * 1e-3 / per_product))))


def interleaved_times(runners: dict[str, object], a, b, reps: int, rounds: int = 5, heat_s: float = 0.5,
                      sampler: Sampler | None = None, readings: dict | None = None,
                      host: dict | None = None) -> dict[str, list[float]]:
    """Seconds per product of each runner, one figure per round: `rounds` rounds in which every runner runs
    once, in turn (clocks and temperature drift alike for all of them). Before each timed run the
    runner runs untimed for `heat_s` seconds: an H200 doing GEMMs reaches its power cap within
    about half a second and its SM clock then depends on the kernel's energy per FLOP, so each
    runner is timed in its own steady state, not in the cool-down left by the one before it (a
    slow runner followed by a fast one flattered the fast one by up to ~15%: benchmarks/NOTES.md).
    With a `sampler` (benchmarks/_gpu_power.py), the SM clock and power are sampled from the second half
    of each heat through the timed run, one reading per runner and round appended to `readings[name]`.
    A runner that records `dispatch_s` (the seconds its host loop took, before the block: the calls runners)
    gets that share of each timed run appended to `host[name]`."""
    for run in runners.values():
        jax.block_until_ready(run(a, b))
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            run_for(run, a, b, heat_s / 2)
            if sampler is not None:
                sampler.start()
            run_for(run, a, b, heat_s / 2)
            t0 = time.perf_counter()
            jax.block_until_ready(run(a, b))
            elapsed = time.perf_counter() - t0
            times[name].append(elapsed / reps)
            if host is not None and getattr(run, "dispatch_s", None) is not None:
                host.setdefault(name, []).append(run.dispatch_s / elapsed)
            if sampler is not None and (reading := sampler.stop()) is not None and readings is not None:
                readings.setdefault(name, []).append(reading)
    return times


def run_for(run, a, b, seconds: float) -> None:
    """`run(a, b)` again and again, each blocked on, until `seconds` have passed (none for 0)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        jax.block_until_ready(run(a, b))


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def round_ratios(times: dict, ref, name) -> tuple[float, float]:
    """(lowest, highest) over the rounds of ref's time / name's time in the same round: the pair ran minutes
    apart at most, so this range says whether a median ratio below 1.0 is the kernel or the run's drift."""
    ratios = [r / t for r, t in zip(times[ref], times[name])]
    return min(ratios), max(ratios)


def graph_spreads(times: dict, t: dict, ref: str, cublas: str) -> dict:
    """Each runner's (lowest, highest) per-round ratio to `ref` in the graph form. cuBLAS's loop is a CUDA graph
    already, so one timing serves both of its columns (its loop median fills its graph time in `t` too), unless it
    was timed in a graph of its own (`--cold`)."""
    spread = {name: round_ratios(times, (ref, "graph"), (name, "graph")) for name, how in times if how == "graph"}
    if (cublas, "loop") in times and (cublas, "graph") not in times:
        t[cublas, "graph"] = t[cublas, "loop"]
        spread[cublas] = round_ratios(times, (ref, "graph"), (cublas, "loop"))
    return spread


def resources(kern, a, b, lowering: str = "auto", switches: dict[tuple, object] | None = None, extra=()) -> str:
    with codegen_settings(lowering, switches or {}):
        module = generate_cuda(kern.trace(a, b, *extra), "sm_90", gemm_lowering=lowering)
    cubin = compile_cubin(module.source, arch=module.arch, entry=module.entry, nvshmem=False)
    compiled = kernel_resources(cubin, module.entry)
    path = "wgmma" if module.arch == "sm_90a" else "mma.sync" if "ts_mma_16816_" in module.source else "portable"
    path += ", cluster 2" if "__cluster_dims__(2" in module.source else ""  # a pair built (/mc may not build one)
    return f"{path}, {compiled.summary() if compiled else '? regs, spills ? B'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=20, help="products per timed run, at least (see --min-run-ms)")
    ap.add_argument("--min-run-ms", type=float, default=20.0,
                    help="more products per timed run where jnp.dot would take less than this (small shapes)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds per shape (medians reported)")
    ap.add_argument("--heat", type=float, default=0.5, help="seconds each runner runs untimed before each timed run")
    ap.add_argument("--shapes", default="issue",
                    help=f"MxNxK,... or a set's name ({', '.join(SHAPE_SETS)}); default: issue 16's sweep")
    ap.add_argument("--configs", default=CONFIGS,
                    help="tiles/stages/group[/tTHREADS], comma-separated (`table`: the table's pick)")
    ap.add_argument("--lowerings", default="auto", help=f"GEMM lowerings to time each config with: {LOWERINGS}")
    ap.add_argument("--fp8-shapes", default=FP8_SHAPES, help="shapes of the FP8 e4m3 comparison ('' for none)")
    ap.add_argument("--fp8-configs", default=FP8_CONFIGS,
                    help="examples/gemm_fp8.py's tiles to time, --configs entries (tN and swap suffixes only; "
                         "`table`: gemm_fp8() without tile arguments; `tuned`: gemm_fp8(autotune=True); "
                         "`swapped`: the swapped product's tiles at each shape up to 64 rows)")
    ap.add_argument("--no-torch", action="store_true", help="leave cuBLAS through torch out")
    ap.add_argument("--cold", action="store_true",
                    help="the graph column's products each read their own copy of A and B (GRAPH_UNROLL copies; "
                         "cuBLAS's graph column likewise): operands from HBM, not from L2 (bf16 table only)")
    ap.add_argument("--trace", action="store_true",
                    help="after the rounds, trace each loop (jax.profiler: --heat seconds of it, then the loop that "
                         "is read; XLA's first and last) and report the GPU's own time per product: kernel duration "
                         "and start-to-start interval (benchmarks/_gpu_trace.py)")
    ap.add_argument("--power", action="store_true",
                    help="sample the SM clock and power (NVML) while each runner runs; a third table gives them "
                         "and the energy per product, from the instantaneous power and from the energy counter "
                         "(benchmarks/_gpu_power.py; the counter moves every 100 ms: with --heat 2 for its figures)")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    try:
        args.fp8_configs = fp8_configs(args.fp8_configs)
    except ValueError as err:
        ap.error(str(err))
    lowerings = args.lowerings.split(",")
    for lowering in lowerings:
        if lowering not in LOWERINGS:
            ap.error(f"--lowerings: {lowering!r} is not one of {LOWERINGS}")
    torch = None if args.no_torch else torch_cuda()
    print(f"device: {jax.devices()[0].device_kind}; jax {jax.__version__}; "
          f"cuBLAS through torch: {torch.__version__ if torch else 'not available'}")
    if args.cold:
        print(f"--cold: the graph column's products read {GRAPH_UNROLL} copies of A and B in turn (from HBM where "
              f"the copies exceed the L2); the loop and calls columns read one pair (L2-warm where it fits)")
    rows, trace_rows, power_rows = [], [], []
    sampler = None
    if args.power:
        nvml = open_nvml()
        if nvml is None:
            ap.error("--power: no NVIDIA driver (libnvidia-ml.so.1) on this machine")
        sampler = Sampler(nvml)
        print(f"power: NVML's {'instantaneous' if nvml.instant else 'averaged (about 1 s)'} reading")
    all_configs: dict[str, tuple] = {}
    for shape in shape_list(args.shapes):
        m, n, k = map(int, shape.split("x"))
        configs = {c: parse_config(c) for c in shape_configs(args.configs, m, n, k)}
        if "tuned" in configs:  # the tuner's choice (timed at the shape's first call), built and named as such
            tuned = tuned_config(m, n, k, jnp.dtype(jnp.bfloat16), device_sm_count())
            chosen = (f"tuned={tuned.label}", (asdict(tuned.config), {}))  # its fields as gemm()'s arguments
            configs = dict(chosen if c == "tuned" else (c, v) for c, v in configs.items())
        all_configs.update({c: v for c, v in configs.items() if "/table" not in c and "/s" not in c})
        ka, kb = jax.random.split(jax.random.key(0))
        a = jax.random.normal(ka, (m, k), jnp.bfloat16)
        b = jax.random.normal(kb, (k, n), jnp.bfloat16)
        want = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
        scale = float(jnp.max(jnp.abs(want)))
        reps = reps_for(a, b, args.reps, args.min_run_ms)
        print(f"{shape}: {reps} products per timed run", flush=True)
        if args.configs == "skinny":
            for entry, seconds in sorted(skinny_estimates(m, n, k).items(), key=lambda e: e[1]):
                print(f"  skinny estimate {entry}: {seconds * 1e3:.3f} ms", flush=True)
        kernels = {(f"ts {c}" + ("" if low == "auto" else f" {low}"), low, c): gemm(m, n, k, jnp.bfloat16, **cfg)
                   for c, (cfg, _) in configs.items() for low in lowerings}
        runners = {}
        copies = cold_copies(a, b) if args.cold else None
        for name, product in [(XLA, lambda x, y: x @ y), *((key[0], kv) for key, kv in kernels.items())]:
            runners.update({(name, how): run for how, run in timing_forms(product, reps, copies=copies).items()})
        for (name, low, c) in kernels:
            for how in FORMS:
                runners[name, how] = with_settings(low, configs[c][1], runners[name, how])
        if torch is not None:
            for how, run in cublas_runners(torch, a, b, reps, cold=GRAPH_UNROLL if args.cold else 0).items():
                runners["cuBLAS torch", how] = run
        readings: dict[tuple, list] = {}
        host: dict[tuple, list] = {}
        times = interleaved_times(runners, a, b, reps, rounds=args.rounds, heat_s=args.heat, sampler=sampler,
                                  readings=readings, host=host)
        power_rows += [(shape, name, how, readings[name, how], median(times[name, how]))
                       for name, how in runners if (name, how) in readings]
        if args.trace:  # XLA's and ours, loop and graph forms (torch's loop is a CUDA graph, not a jitted loop)
            # XLA's loop traced first and again last, so that the order (the GPU's heat, its clocks) is not
            # mistaken for the kernels' difference: ratios are to the mean of its two intervals
            order = [XLA, *(key[0] for key in kernels), XLA]
            for how in ("loop", "graph"):
                for i, name in enumerate(order):
                    label = (f"{XLA} (again)" if i == len(order) - 1 else name) + ("" if how == "loop" else " graph")
                    where = pathlib.Path(os.environ.get("OUT", "/tmp")) / "bench_gemm_traces" / re.sub(r"\W+", "_",
                                                                                                     label)
                    events = last_run(traced(runners[name, how], (a, b), where, args.heat), reps)
                    trace_rows.append((shape, how, label, product_step(events)))
        t = {key: median(v) for key, v in times.items()}
        t.update({("host", *key): median(v) for key, v in host.items()})
        spread = {name: round_ratios(times, (XLA, "loop"), (name, "loop")) for name, how in times
                  if how == "loop"}
        spread_graph = graph_spreads(times, t, XLA, "cuBLAS torch")
        ref = {how: t[XLA, how] for how in FORMS}
        cub = {how: t.get(("cuBLAS torch", how)) for how in FORMS}
        rows.append(row(shape, XLA, t, XLA, ref, cub, "-", True, spread, spread_graph))
        if torch is not None:
            rows.append(row(shape, "cuBLAS torch", t, "cuBLAS torch", ref, cub, "-", True, spread, spread_graph))
        for (name, low, c), kern in kernels.items():
            got = with_settings(low, configs[c][1], jax.jit(kern))(a, b)
            err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))
            res = resources(kern, a, b, low, configs[c][1])
            if not replayed(runners[name, "graph"], a, b, reps):
                res += ", not replayed"  # the graph column timed launches through the handler
            rows.append(row(shape, name, t, name, ref, cub, res, err <= 2e-2 * scale, spread, spread_graph))
    print_table(rows)  # the bf16 table first: a failure in the FP8 comparison below loses nothing of it
    if trace_rows:
        print_traced(trace_rows)
    if power_rows:
        print_power(power_rows)
    fp8_rows = []
    for shape in filter(None, args.fp8_shapes.split(",")):
        # `--configs table`: our bf16 side is the table's pick (gemm() without tile arguments)
        bf16_configs = {c: v for c, v in all_configs.items() if "/p" not in c} or {"table": ({}, {})}
        fp8_rows += _fp8_rows(shape, bf16_configs, torch, args)
    if fp8_rows:
        print_table(fp8_rows)


def fp8_configs(text: str) -> dict[str, dict]:
    """`--fp8-configs`: entry -> gemm_fp8's keyword arguments (parse_config's, of those gemm_fp8 takes)."""
    out = {}
    for entry in filter(None, text.split(",")):
        if entry == "swapped":  # the swapped product's tiles at each shape's M (fp8_shape_configs)
            out[entry] = {"swap": True}
            continue
        cfg, switches = parse_entry(entry)  # `table`: gemm_fp8() without tile arguments (gemm_table.fp8_pick)
        extra = sorted(set(cfg) - FP8_ARGUMENTS) + [name for _, name in switches]
        if extra:
            raise ValueError(f"--fp8-configs {entry!r}: examples/gemm_fp8.py takes no {', '.join(extra)} (tiles, "
                             f"stages, group, tN and swap only)")
        out[entry] = cfg
    if not out:
        raise ValueError("--fp8-configs names no configuration")
    return out


def fp8_shape_configs(configs: dict[str, dict], m: int) -> dict[str, dict]:
    """The --fp8-configs entries at a shape of M rows: `swapped` becomes gemm_table.swapped_config's FP8 tiles there
    (left out above SWAP_MAX_M rows), every other entry as parsed."""
    out = {}
    for entry, cfg in configs.items():
        if entry == "swapped":
            if (tiles := per_shape_entry(entry, m, itemsize=1)) is not None:
                out[tiles] = parse_config(tiles)[0]
        else:
            out[entry] = cfg
    return out


def _fp8_rows(shape: str, configs: dict, torch, args) -> list:
    """FP8 e4m3 at `shape`: our FP8 kernel, our bf16 kernel (each config) on the same values,
    torch._scaled_mm; ratios to our best bf16 config (the xXLA columns) and to torch (xcuBLAS)."""
    import ml_dtypes
    import numpy as np

    m, n, k = map(int, shape.split("x"))
    fp8 = np.dtype(ml_dtypes.float8_e4m3fn)
    rng = np.random.default_rng(0)
    a8, sa = quantize(rng.standard_normal((m, k)).astype(np.float32), fp8)
    b8, sb = quantize(rng.standard_normal((n, k)).astype(np.float32), fp8)
    a16 = jnp.asarray(a8.astype(np.float32), jnp.bfloat16)  # the same values (e4m3 fits in bf16)
    b16 = jnp.asarray(b8.astype(np.float32).T, jnp.bfloat16)
    ours8 = {f"ts fp8 {entry}": gemm_fp8(m, n, k, fp8, **cfg)
             for entry, cfg in fp8_shape_configs(args.fp8_configs, m).items()}
    ja8, jb8, jsa, jsb = (jnp.asarray(x) for x in (a8, b8, sa, sb))
    reps = whole_iterations(args.reps)
    runners = {}
    for name, kern in ours8.items():
        for how, run in timing_forms((lambda f: lambda x, y: f(x, y, jsa, jsb))(kern), reps).items():
            runners[name, how] = run
    bf16 = {f"ts bf16 {c}": gemm(m, n, k, jnp.bfloat16, **cfg) for c, (cfg, _) in configs.items()}
    for name, kern in bf16.items():
        for how, run in timing_forms(kern, reps).items():
            runners[name, how] = (lambda f: lambda *_: f(a16, b16))(run)
    if torch is not None and hasattr(torch, "_scaled_mm"):
        for how, run in cublas_runners(torch, None, None, reps, fp8=(a8, b8, sa, sb)).items():
            runners["torch._scaled_mm", how] = run
    host: dict[tuple, list] = {}
    times = interleaved_times(runners, ja8, jb8, reps, rounds=args.rounds, heat_s=args.heat, host=host)
    t = {key: median(v) for key, v in times.items()}
    t.update({("host", *key): median(v) for key, v in host.items()})
    best = min(bf16, key=lambda name: t[name, "loop"])
    spread = {name: round_ratios(times, (best, "loop"), (name, "loop")) for name, how in times if how == "loop"}
    spread_graph = graph_spreads(times, t, best, "torch._scaled_mm")
    ref = {how: t[best, how] for how in FORMS}
    cub = {how: t.get(("torch._scaled_mm", how)) for how in FORMS}
    want = (a8.astype(np.float64) * float(sa[0])) @ (b8.astype(np.float64) * float(sb[0])).T
    rows = [row(f"{shape} fp8", name, t, name, ref, cub, "-", True, spread, spread_graph) for name in bf16]
    for name, kern in ours8.items():
        got = np.asarray(jax.jit(kern)(ja8, jb8, jsa, jsb).astype(jnp.float32), np.float64)
        ok = float(np.max(np.abs(got - want))) <= 2e-2 * float(np.max(np.abs(want)))
        rows.append(row(f"{shape} fp8", name, t, name, ref, cub,
                         resources(kern, ja8, jb8, "auto", {}, extra=(jsa, jsb)), ok, spread, spread_graph))
    if cub["loop"] is not None:
        rows.append(row(f"{shape} fp8", "torch._scaled_mm", t, "torch._scaled_mm", ref, cub, "-", True, spread,
                         spread_graph))
    return rows


if __name__ == "__main__":
    main()
