"""Waits nobody satisfies end with a named WaitTimeoutError, and the job goes on (issue 5).

Run by tests/gpu/test_faults_gpu.py as its own two-rank job (`python -m jax_tilescale.launch -n 2`), so
that a hang cannot take the GPU suite with it. With a 2 s wait timeout:
  A. every PE waits for a signal nobody sends: each raises WaitTimeoutError naming the kernel, its PE, the
     statement and this file's line, the value (0) and the expectation (== 1);
  B. only PE 1 waits (for a word to reach its PE number): PE 1 raises, PE 0's call completes normally and
     its output is right;
  C. afterwards both ranks run all-gathers and check them (the GPU context and the symmetric workspace
     were not spoiled).
Each rank prints `rank R: OK` at the end and exits 0; any failed check raises (exit 1).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tilescale as ts
from jax_tilescale import language as T

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("allgather", ROOT / "examples" / "allgather.py")
allgather = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(allgather)

platform = ts.platform.setup()
mesh = jax.make_mesh((platform.num_devices,), ("x",))
rank, npes = jax.process_index(), mesh.size
assert allgather.check(mesh, 256, 128, "float32")
print(f"rank {rank}: all-gather ok", flush=True)

SIGNAL_LINE = 0
WORD_LINE = 0


@ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32), grid=(1,), wait_timeout_s=2)
def wait_for_a_signal_nobody_sends(src, dst):
    sig = T.alloc_signal()
    T.copy(src, dst)
    T.signal_wait_until(sig, T.Cmp.EQ, 1)  # SIGNAL_LINE: nobody signals


@ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32), grid=(1,), wait_timeout_s=2)
def only_pe_one_waits(src, dst):
    word = T.alloc_symmetric((1,), np.int32)
    T.copy(src, dst)
    T.wait_ge(word[0], T.get_pe())  # WORD_LINE: 0 >= pe holds on PE 0 only


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if f"# {marker}" in text)


SIGNAL_LINE, WORD_LINE = _line("SIGNAL_LINE:"), _line("WORD_LINE:")


def call(k):
    f = jax.jit(jax.shard_map(k, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    x = jax.device_put(jnp.arange(npes * 64 * 128, dtype=jnp.float32).reshape(npes * 64, 128),
                       NamedSharding(mesh, P("x")))
    return f, x


def expect_timeout(k, what: str, line: int, value_text: str) -> float:
    f, x = call(k)
    compiled = f.lower(x).compile()  # compiled first: the clock below measures the wait only
    t0 = time.monotonic()
    try:
        jax.block_until_ready(compiled(x))
        time.sleep(0.5)  # the exception is queued before the call's results; give it every chance
    except ts.WaitTimeoutError as e:
        took = time.monotonic() - t0
        msg = str(e)
        print(f"rank {rank}: caught after {took:.1f} s: WaitTimeoutError: {msg}", flush=True)
        assert f"kernel `{k.spec.name}`, PE {rank} of {npes}: {what} at {__file__}:{line} gave up" in msg, msg
        assert value_text in msg, msg
        assert e.fault is not None and e.fault["pe"] == rank, e.fault
        assert 2.0 <= took < 30.0, f"the wait gave up after {took:.1f} s with a 2 s timeout"
        return took
    raise AssertionError(f"rank {rank}: {k.spec.name} returned without WaitTimeoutError")


# A. Every PE waits for a signal nobody sends.
expect_timeout(wait_for_a_signal_nobody_sends, "T.signal_wait_until on sig[0]", SIGNAL_LINE,
               "the word is 0, expected == 1")

# B. Only PE 1 waits; PE 0's call is not disturbed.
if rank == 1:
    expect_timeout(only_pe_one_waits, "T.wait_ge on word[0]", WORD_LINE, "the word is 0, expected >= 1")
else:
    f, x = call(only_pe_one_waits)
    t0 = time.monotonic()
    out = jax.block_until_ready(f(x))
    time.sleep(3)  # no exception may arrive late either
    for shard in out.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(x.addressable_shards[0].data))
    print(f"rank {rank}: only_pe_one_waits returned normally after {time.monotonic() - t0:.1f} s", flush=True)

# C. The job goes on: correct kernels, twice.
for _ in range(2):
    assert allgather.check(mesh, 256, 128, "float32")
print(f"rank {rank}: OK", flush=True)
sys.exit(0)
