"""What every collective benchmark shares: sizes, inputs, the correctness check before timing, the
timing, nccl-tests' bandwidths, and the outputs (a printed table, a CSV, a PNG plot).

A benchmark (bench_allgather.py, bench_reduce_scatter.py, bench_all_to_all.py, bench_ring_shift.py)
names its `Family` and gives, for each size, a `Case`: the inputs, its kernels (jitted over the
mesh) and the jax.lax equivalent. `run` then, per size:

1. calls every kernel and the jax.lax equivalent once and checks each kernel's result against the
   reference (the jax.lax result unless the case names another), shard by shard on the devices;
   a kernel that fails gets no time and no bandwidth, and the run exits 1;
2. times each one: `warmup` calls, then `reps` repetitions of `iters` calls followed by one
   block_until_ready (launches overlap, as in a real program); the median over the repetitions;
3. computes nccl-tests' bandwidths (`Family`): algbw = bytes / time, busbw = algbw x the
   collective's factor, and the ratio to jax.lax (its time over ours: above 1, we are faster).

Sizes are bytes per rank: the input each rank holds (all-gather: its shard; reduce-scatter: the
whole vector it reduces; all-to-all: its send buffer; ring shift: the block it sends).
Outputs go to --out-dir (default $OUT, else /tmp/ts_bench): bench_<stem>.csv, and
bench_<stem>.png (bus bandwidth against size, ours and XLA's, the NVSHMEM put ceiling as a line)
when matplotlib is importable (`pip install .[bench]`; without it the run says so and writes no PNG).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_SIZES = "4K,16K,64K,256K,1M,4M,16M,64M,256M,1G"  # the range, powers of 4
DEFAULT_CEILING_GBPS = 365.0  # raw NVSHMEM putmem_nbi_block over H200 NVLink, one direction (DESIGN.md)
XLA = "xla"  # the variant name of the jax.lax equivalent
CSV_COLUMNS = ("collective", "npes", "device", "dtype", "bytes_per_rank", "variant", "params", "ok", "time_s",
               "algbw_gbps", "busbw_gbps", "xla_over_ours", "note")


# --- what is measured -------------------------------------------------------------------------
@dataclass(frozen=True)
class Family:
    """A collective and nccl-tests' bandwidth definitions for it (their PERFORMANCE.md):
    algbw = alg_ranks(npes) x bytes per rank / time, busbw = algbw x bus_factor(npes)."""

    title: str  # "all-gather"
    stem: str  # the output files: bench_<stem>.csv, bench_<stem>.png
    reference: str  # the jax.lax equivalent, for messages
    alg_ranks: Callable[[int], int]  # all-gather counts the whole output (npes shards); the others one rank's bytes
    bus_factor: Callable[[int], float]


def _ring_factor(n: int) -> float:
    return (n - 1) / n


ALL_GATHER = Family("all-gather", "allgather", "jax.lax.all_gather", lambda n: n, _ring_factor)
REDUCE_SCATTER = Family("reduce-scatter", "reduce_scatter", "jax.lax.psum_scatter", lambda n: 1, _ring_factor)
ALL_TO_ALL = Family("all-to-all", "all_to_all", "jax.lax.all_to_all", lambda n: 1, _ring_factor)
RING_SHIFT = Family("ring shift", "ring_shift", "jax.lax.ppermute", lambda n: 1, lambda n: 1.0)  # nccl-tests' sendrecv


@dataclass
class Case:
    """One size of a benchmark: inputs, our kernels and the jax.lax equivalent (jitted, same inputs).

    `reference` (default: `xla`) gives what each kernel's result must equal, within
    `tolerance` x max|reference| per element (0: exactly; data movement is exact); with a `reference`,
    the jax.lax result is checked against it too. `xla` may fail to
    compile on some backend (ragged_all_to_all); it is then reported, not timed, and `reference`
    must be given."""

    bytes_per_rank: int  # what the shapes really hold (a requested size is rounded down to whole rows)
    inputs: tuple[jax.Array, ...]
    ours: dict[str, Callable[..., Any]]
    xla: Callable[..., Any] | None
    reference: Callable[..., Any] | None = None
    tolerance: float = 0.0
    xla_tolerance: float | None = None  # the jax.lax result against `reference` (default: `tolerance`)
    params: dict[str, str] = field(default_factory=dict)  # per variant, e.g. {"push": "block_m=128"}
    xla_name: str = XLA


@dataclass(frozen=True)
class Row:
    bytes_per_rank: int
    variant: str
    params: str
    ok: bool | None  # None: not run (the jax.lax equivalent does not compile here)
    time_s: float | None
    algbw: float | None  # GB/s
    busbw: float | None
    xla_over_ours: float | None
    note: str = ""


# --- options and set-up -----------------------------------------------------------------------
def parse_size(text: str) -> int:
    """'4K', '64KiB', '1M', '1G', '4096' -> bytes (K, M, G are binary: 1K = 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"size {text!r}: a number of bytes with K, M or G (e.g. 4K, 1M, 1G)")
    return int(m.group(1)) * {"": 1, "K": KiB, "M": MiB, "G": GiB}[m.group(2).upper()]


def parse_sizes(text: str) -> list[int]:
    return [parse_size(s) for s in text.split(",") if s.strip()]


def size_label(nbytes: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B" if nbytes < KiB else f"{nbytes / KiB:.1f} KiB"


def add_common_options(ap: argparse.ArgumentParser, dtype: str = "bfloat16") -> None:
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes(DEFAULT_SIZES),
                    help=f"bytes per rank, comma separated, K/M/G binary (default {DEFAULT_SIZES})")
    ap.add_argument("--dtype", default=dtype, help=f"element type (default {dtype})")
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions; the median is reported (default 7)")
    ap.add_argument("--iters", type=int, default=0,
                    help="calls per repetition (default 0: 20 up to 64 MiB per rank, 5 above)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls before timing (default 2)")
    ap.add_argument("--npes", type=int, default=0, help="PEs (devices) to use (default 0: all)")
    ap.add_argument("--cpu-devices", type=int, default=2, help="simulated CPU devices when there is no GPU (default 2)")
    ap.add_argument("--out-dir", default=os.environ.get("OUT") or "/tmp/ts_bench",
                    help="where the CSV and the PNG go (default $OUT, else /tmp/ts_bench)")
    ap.add_argument("--ceiling-gbps", type=float, default=DEFAULT_CEILING_GBPS,
                    help=f"the NVSHMEM put ceiling drawn on the plot (default {DEFAULT_CEILING_GBPS:g}: H200 NVLink; "
                    "0: none)")
    ap.add_argument("--no-plot", action="store_true", help="write no PNG")


def add_row_options(ap: argparse.ArgumentParser, block: str = "rows per block") -> None:
    """--n (row length) and --block-m (`block`; 0: block_rows picks it), for benchmarks over rows."""
    ap.add_argument("--n", type=int, default=8192, help="row length in elements (default 8192)")
    ap.add_argument("--block-m", type=int, default=0, help=f"{block}; 0: sized to the shard (block_rows)")


def setup(args: argparse.Namespace) -> tuple[ts.platform.Platform, jax.sharding.Mesh]:
    """The platform and a one-axis mesh "x" over the first --npes devices (all by default)."""
    plat = ts.platform.setup(cpu_devices=args.cpu_devices)
    devices = jax.devices()
    npes = args.npes or len(devices)
    if npes < 2 or npes > len(devices):
        raise SystemExit(f"needs 2 to {len(devices)} PEs, asked for {npes} ({plat.describe()}); on GPUs: "
                         "python -m jax_tilescale.launch -n N <benchmark>, on CPU: --cpu-devices N")
    return plat, jax.make_mesh((npes,), ("x",), devices=devices[:npes])


def random_sharded(mesh: jax.sharding.Mesh, shape: Sequence[int], dtype: Any, spec: P, seed: int) -> jax.Array:
    """Standard normal values of the global `shape`, made where they live (each device its shards: no
    host copy, no transfer between processes)."""
    make = jax.jit(lambda k: jax.random.normal(k, tuple(shape), jnp.float32).astype(dtype),
                   out_shardings=NamedSharding(mesh, spec))
    return make(jax.random.key(seed))


def block_rows(m: int, row_bytes: int, target_blocks: int = 64, max_block_bytes: int = 2 * MiB) -> int:
    """Rows per block: about `target_blocks` row blocks for `m` rows (one block-wide put sustains
    only a few tens of GB/s, so small buffers need many blocks), each moving at most ~2 MiB; a
    divisor of m."""
    rows = max(1, min(m // target_blocks, max(1, max_block_bytes // row_bytes)))
    while m % rows:
        rows -= 1
    return rows


def row_shape(bytes_per_rank: int, itemsize: int, row_len: int, rows_multiple: int = 1) -> tuple[int, int]:
    """(rows, row length) of a rank's buffer of about `bytes_per_rank`: rows of `row_len` elements,
    shorter for small buffers so that there are at least `rows_multiple` rows, and the rows a
    multiple of `rows_multiple` (the size rounds down to whole rows)."""
    elements = max(1, bytes_per_rank // itemsize)
    n = max(1, min(row_len, elements // rows_multiple))
    rows = max(rows_multiple, (elements // n) // rows_multiple * rows_multiple)
    return rows, n


# --- check and time ---------------------------------------------------------------------------
def _agree(ok: bool, worst: float) -> tuple[bool, float]:
    """Every process's verdict combined (each checks only the shards it holds)."""
    if jax.process_count() == 1:
        return ok, worst
    from jax.experimental import multihost_utils

    both = multihost_utils.process_allgather(np.array([float(ok), worst], np.float64))
    both = np.asarray(both).reshape(-1, 2)
    return bool(np.all(both[:, 0] > 0)), float(np.max(both[:, 1]))


@jax.jit
def _shard_error(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """max|a - b|, max|b| and whether NaNs differ, in float32, fused (no full-size copies)."""
    a, b = a.astype(jnp.float32), b.astype(jnp.float32)
    return (jnp.max(jnp.abs(a - b), initial=0.0), jnp.max(jnp.abs(b), initial=0.0),
            jnp.any(jnp.isnan(a) != jnp.isnan(b)).astype(jnp.float32))


def check(got: Any, want: Any, tolerance: float) -> tuple[bool, str]:
    """Every output leaf of `got` against `want`, shard by shard on the device that holds it:
    |got - want| <= tolerance x max|want| (per shard); NaN never passes. Same verdict on every process."""
    gots, wants = jax.tree.leaves(got), jax.tree.leaves(want)
    if len(gots) != len(wants):
        return _agree(False, math.inf)[0], f"{len(gots)} outputs, reference {len(wants)}"
    ok, worst = True, 0.0
    for g, w in zip(gots, wants):
        if g.shape != w.shape:
            return _agree(False, math.inf)[0], f"shape {g.shape}, reference {w.shape}"
        w_shards = {s.device: s.data for s in w.addressable_shards}
        for shard in g.addressable_shards:
            err, top, nan_mismatch = (float(v) for v in _shard_error(shard.data, w_shards[shard.device]))
            bad = nan_mismatch > 0 or math.isnan(err)
            ok &= not bad and err <= tolerance * top
            worst = math.inf if bad else max(worst, err)
    ok, worst = _agree(ok, worst)
    return ok, f"max |error| {worst:.3g}" + (f" (allowed {tolerance:g} x max|reference|)" if tolerance else "")


def with_nvshmem_calls(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (a jitted function, lowered at its first call) compiled with NVSHMEM's calls instead of
    call-free: every buffer its peers touch staged and copied (TILESCALE_CALL_FREE=0 while it lowers).
    A comparison row for zero-copy, in the same process; on the interpreter the same as `fn`."""
    from jax_tilescale.codegen.call_free import ENV_VAR

    def call(*args: Any) -> Any:
        old = os.environ.get(ENV_VAR)
        os.environ[ENV_VAR] = "0"
        try:
            return fn(*args)
        finally:
            if old is None:
                del os.environ[ENV_VAR]
            else:
                os.environ[ENV_VAR] = old

    return call


def median_time(f: Callable[..., Any], inputs: Sequence[jax.Array], iters: int, reps: int, warmup: int) -> float:
    """Seconds per call: the median over `reps` repetitions of `iters` calls and one block_until_ready."""
    for _ in range(warmup):
        jax.block_until_ready(f(*inputs))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            out = f(*inputs)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / iters)
    return float(np.median(times))


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def measure(family: Family, case: Case, npes: int, args: argparse.Namespace) -> list[Row]:
    """The rows of one size: every kernel checked, then timed with the jax.lax equivalent."""
    nbytes = case.bytes_per_rank
    iters = args.iters or (20 if nbytes <= 64 * MiB else 5)
    xla_note, want_xla = "", None  # want_xla stays None when the jax.lax equivalent does not run here
    if case.xla is not None:
        try:
            want_xla = jax.block_until_ready(case.xla(*case.inputs))
        except Exception as e:  # a jax.lax collective this backend does not lower: say so, measure ours
            xla_note = f"{family.reference} does not run here: {_first_line(e)}"
    else:
        xla_note = f"{family.reference} not available in this JAX"
    xla_ran = want_xla is not None
    if want_xla is not None and case.reference is not None:  # the jax.lax result checked too, against the reference
        want = jax.block_until_ready(case.reference(*case.inputs))
        tol = case.tolerance if case.xla_tolerance is None else case.xla_tolerance
        ok_xla, detail = check(want_xla, want, tol)
        if not ok_xla:
            xla_note = f"{family.reference} differs from the reference: {detail}"
    elif want_xla is not None:
        want, ok_xla = want_xla, True
    else:
        if case.reference is None:
            raise ValueError(f"{family.title}: no reference to check against ({xla_note})")
        want, ok_xla = jax.block_until_ready(case.reference(*case.inputs)), False

    verdicts: dict[str, tuple[bool, str]] = {}
    for name, fn in case.ours.items():
        verdicts[name] = check(fn(*case.inputs), want, case.tolerance)
    del want, want_xla

    def row(name: str, fn: Callable[..., Any] | None, ok: bool | None, note: str, t_xla: float | None) -> Row:
        params = case.params.get(name, "")
        if not ok or fn is None:
            return Row(nbytes, name, params, ok, None, None, None, None, note)
        t = median_time(fn, case.inputs, iters, args.reps, args.warmup)
        algbw = family.alg_ranks(npes) * nbytes / t / 1e9
        ratio = None if t_xla is None else t_xla / t
        return Row(nbytes, name, params, True, t, algbw, algbw * family.bus_factor(npes), ratio, note)

    xla_row = row(case.xla_name, case.xla, ok_xla if xla_ran else None, xla_note, None)
    if xla_row.time_s is not None:
        xla_row = Row(**{**xla_row.__dict__, "xla_over_ours": 1.0})
    rows = [row(name, fn, verdicts[name][0], verdicts[name][1], xla_row.time_s) for name, fn in case.ours.items()]
    return [*rows, xla_row]


# --- the run and its outputs ------------------------------------------------------------------
def run(family: Family, make_case: Callable[[int], Case], args: argparse.Namespace,
        plat: ts.platform.Platform, mesh: jax.sharding.Mesh, what: str = "") -> int:
    """Every size of --sizes: checked, timed, printed, written. Returns the exit status: 0 when
    every kernel matched the reference at every size, 1 otherwise."""
    rows: list[Row] = []
    for nbytes in args.sizes:
        case = make_case(nbytes)
        rows += measure(family, case, mesh.size, args)
        del case
    device = jax.devices()[0].device_kind
    failed = [r for r in rows if r.variant != XLA and r.ok is False]
    if plat.is_lead:
        print(f"{family.title}, {mesh.size} x {device}, {args.dtype}{', ' + what if what else ''}; "
              f"{plat.describe(used=mesh.size)}; {datetime.date.today().isoformat()}")
        print_table(rows)
        ours = list(dict.fromkeys(r.variant for r in rows if r.variant != XLA))
        if failed:
            for r in failed:
                print(f"check FAILED: {r.variant} at {size_label(r.bytes_per_rank)} per rank differs from the "
                      f"reference ({r.note}): not timed")
        else:
            print(f"check: {', '.join(ours)} matched the reference at all {len(args.sizes)} sizes "
                  f"(checked before timing; the note column of the CSV says how closely)")
        for note in sorted({r.note for r in rows if r.variant == XLA and r.note}):
            print(f"note: {note}")
        os.makedirs(args.out_dir, exist_ok=True)
        path = os.path.join(args.out_dir, f"bench_{family.stem}.csv")
        write_csv(path, family, mesh.size, device, args.dtype, rows)
        print(f"wrote {path}")
        if not args.no_plot:
            png = os.path.join(args.out_dir, f"bench_{family.stem}.png")
            title = f"{family.title}, {mesh.size} x {device}, {args.dtype}, {datetime.date.today().isoformat()}"
            print(plot(png, title, rows, args.ceiling_gbps))
    return 1 if failed else 0


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(rows: Sequence[Row]) -> None:
    head = ("size/rank", "variant", "params", "ok", "time us", "algbw GB/s", "busbw GB/s", "xla/ours")
    widths = (10, 9, max([6, *(len(r.params) for r in rows)]), 3, 11, 10, 10, 8)
    print("  ".join(f"{h:>{w}}" for h, w in zip(head, widths)))
    for r in rows:
        ok = {True: "yes", False: "NO", None: "-"}[r.ok]
        cells = (size_label(r.bytes_per_rank), r.variant, r.params, ok, _fmt(r.time_s and r.time_s * 1e6, ".1f"),
                 _fmt(r.algbw, ".2f"), _fmt(r.busbw, ".2f"),
                 "-" if r.xla_over_ours is None else f"{r.xla_over_ours:.2f}x")
        print("  ".join(f"{c:>{w}}" for c, w in zip(cells, widths)))


def write_csv(path: str, family: Family, npes: int, device: str, dtype: str, rows: Sequence[Row]) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(CSV_COLUMNS)
        for r in rows:
            out.writerow((family.title, npes, device, dtype, r.bytes_per_rank, r.variant, r.params,
                          "" if r.ok is None else int(r.ok), _fmt(r.time_s, ".6e"), _fmt(r.algbw, ".3f"),
                          _fmt(r.busbw, ".3f"), _fmt(r.xla_over_ours, ".4f"), r.note))


def plot(path: str, title: str, rows: Sequence[Row], ceiling_gbps: float) -> str:
    """Bus bandwidth against bytes per rank, one line per variant, the put ceiling dashed; returns
    what was done (a line for the log)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install '.[bench]'): no PNG written"
    fig, ax = plt.subplots(figsize=(8, 5))
    for variant in dict.fromkeys(r.variant for r in rows):
        pts = [(r.bytes_per_rank, r.busbw) for r in rows if r.variant == variant and r.busbw is not None]
        if pts:
            xs, ys = zip(*pts)
            label = "XLA (jax.lax)" if variant == XLA else f"ours: {variant}"
            ax.plot(xs, ys, marker="o", linestyle="--" if variant == XLA else "-", label=label)
    if ceiling_gbps > 0:
        ax.axhline(ceiling_gbps, color="gray", linestyle=":", label=f"NVSHMEM put ceiling {ceiling_gbps:g} GB/s")
    sizes = sorted({r.bytes_per_rank for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [size_label(s).replace(" ", "") for s in sizes], rotation=45)
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("bus bandwidth, GB/s")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"wrote {path}"
