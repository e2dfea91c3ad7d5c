"""A rank fails while its peer's kernel waits on the GPU for a signal from it (tools/gpu_test.sh).

Both ranks first run an all-gather (NVSHMEM and the symmetric workspace are up); then rank 1 raises and
rank 0 launches a kernel that waits for rank 1's signal, which never comes. Run as two "nodes", so
that no launcher stops rank 0: its watchdog must end it within seconds, naming rank 1, although its
main thread is blocked on the GPU. Expected: node 1 exits 1, node 0 exits 79 (PEER_FAILED_STATUS).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import jax
import jax.numpy as jnp
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
assert allgather.check(mesh, 256, 128, "float32")
print(f"rank {jax.process_index()}: all-gather ok", flush=True)


@ts.kernel(out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32), grid=(1,))
def wait_for_rank_one(src, dst):
    sig = T.alloc_signal()
    T.copy(src, dst)
    T.signal_wait_until(sig, T.Cmp.EQ, 1)  # rank 1 would set it; it fails instead


f = jax.jit(jax.shard_map(wait_for_rank_one, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
x = jax.device_put(jnp.ones((mesh.size * 64, 128), jnp.float32), NamedSharding(mesh, P("x")))
compiled = f.lower(x).compile()  # compiled ahead: rank 0 then only launches
if jax.process_index() == 1:
    time.sleep(2)  # rank 0 is in the kernel by now
    raise RuntimeError("rank 1 fails on purpose while rank 0 waits for it")
t0 = time.monotonic()
print("rank 0: launching a kernel that waits for rank 1", flush=True)
jax.block_until_ready(compiled(x))
print(f"rank 0: UNEXPECTED: the wait ended after {time.monotonic() - t0:.1f} s", flush=True)
