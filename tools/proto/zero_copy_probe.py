"""Probe for issue 14, item 3 (zero-copy): can peers address XLA's own buffers?

Run on the GPU machine, one process per PE (two PEs may share one GPU under MPS):

    python -m jax_tilescale.launch -n 2 tools/proto/zero_copy_probe.py
    STEPS=probe_zero_copy bash tools/gpu_test.sh      # two PEs on one GPU when only one is lent

For one XLA buffer per PE (1 MiB of float32 holding the PE's index) it prints:
1. what the CUDA driver says of its allocation (cuPointerGetAttribute: range start and size, whether
   legacy CUDA IPC can export it, the VMM handle types it allows, its memory pool);
2. VMM export of the whole allocation as a POSIX file descriptor (cuMemRetainAllocationHandle +
   cuMemExportToShareableHandle), the descriptor passed to the peer over a Unix socket (SCM_RIGHTS),
   imported and mapped there (cuMemImportFromShareableHandle, cuMemAddressReserve, cuMemMap,
   cuMemSetAccess), the time of each step, the peer's first word read through the mapping (must be the
   peer's index) and a word written into the peer's buffer through it (the peer checks it through XLA);
3. legacy CUDA IPC (`cuIpcGetMemHandle`) on the allocation: whether it exports;
4. last (it has crashed the MPS server before, taking every PE with it), only with PROBE_NVSHMEM=1:
   `nvshmemx_buffer_register_symmetric` on the whole allocation.

Nothing here changes the library; it decides which zero-copy design to build (benchmarks/NOTES.md,
"Zero-copy").
"""

from __future__ import annotations

import ctypes
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_tilescale as ts
from jax_tilescale import _jax_compat
from jax_tilescale.runtime import nvshmem_bootstrap, peer_memory

ATTRS = {  # CUpointer_attribute (cuda.h), the ones that say what the allocation admits
    "legacy_ipc_capable": 10,
    "range_start": 11,
    "range_size": 12,
    "allowed_handle_types": 14,
    "mempool_handle": 17,
    "mapping_size": 18,
    "mapping_base": 19,
}
# The runtime's own pieces (runtime/peer_memory.py, which this probe led to): the CUDA structs and the
# descriptor's passing over a Unix socket.
POSIX_FD = peer_memory._POSIX_FD
KEY = "zc_probe"


def pointer_attrs(cu: ctypes.CDLL, ptr: int) -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for name, code in ATTRS.items():
        value = ctypes.c_uint64(0)
        r = cu.cuPointerGetAttribute(ctypes.byref(value), code, ctypes.c_uint64(ptr))
        out[name] = value.value if r == 0 else f"error {r}"
    return out


def check(r: int, what: str) -> None:
    if r != 0:
        raise RuntimeError(f"{what} -> CUDA error {r}")


def main() -> None:
    plat = ts.platform.setup()
    info = nvshmem_bootstrap.ensure_initialized()
    me, n = info.rank, info.nranks
    peer = (me + 1) % n
    client = _jax_compat.distributed_client()
    cu = ctypes.CDLL("libcuda.so.1")
    print(f"PE {me} of {n} ({plat.describe()})")

    x = jnp.full((1 << 18,), float(me), jnp.float32)  # 1 MiB
    x.block_until_ready()
    ptr = x.unsafe_buffer_pointer()
    attrs = pointer_attrs(cu, ptr)
    print(f"XLA buffer at {ptr:#x}, 1 MiB; allocation: " + ", ".join(
        f"{k}={v:#x}" if isinstance(v, int) and k != "legacy_ipc_capable" else f"{k}={v}" for k, v in attrs.items()))
    base, size = attrs["range_start"], attrs["range_size"]
    assert isinstance(base, int) and isinstance(size, int)

    handle = (ctypes.c_byte * 64)()
    r = cu.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(base))
    print(f"legacy CUDA IPC export of the allocation: cuIpcGetMemHandle -> {r} (0: exportable)")

    # The current context: JAX made the primary context; make it current on this thread.
    dev = jax.local_devices()[0].local_hardware_id
    ctx = ctypes.c_void_p()
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    t0 = time.perf_counter()
    h = ctypes.c_uint64()
    check(cu.cuMemRetainAllocationHandle(ctypes.byref(h), ctypes.c_uint64(base)), "cuMemRetainAllocationHandle")
    fd = ctypes.c_int(-1)
    check(cu.cuMemExportToShareableHandle(ctypes.byref(fd), h, POSIX_FD, ctypes.c_uint64(0)),
          "cuMemExportToShareableHandle")
    t_export = time.perf_counter() - t0
    print(f"VMM export of the allocation as a POSIX fd: fd {fd.value} in {t_export * 1e6:.0f} us")
    server = peer_memory._serve(KEY, me, fd.value, n - 1, 60.0)
    client.key_value_set(f"zc_probe/{me}", f"{base} {size} {ptr - base}")

    _pbase, psize, poff = (int(v) for v in client.blocking_key_value_get(f"zc_probe/{peer}", 60_000).split())
    t0 = time.perf_counter()
    pfd = peer_memory._fetch(KEY, peer, 30.0)
    t_fd = time.perf_counter() - t0
    t0 = time.perf_counter()
    ph = ctypes.c_uint64()
    check(cu.cuMemImportFromShareableHandle(ctypes.byref(ph), ctypes.c_void_p(pfd), POSIX_FD),
          "cuMemImportFromShareableHandle")
    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    va = ctypes.c_uint64()
    check(cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(psize), ctypes.c_size_t(0), ctypes.c_uint64(0),
                                 ctypes.c_uint64(0)), "cuMemAddressReserve")
    check(cu.cuMemMap(va, ctypes.c_size_t(psize), ctypes.c_size_t(0), ph, ctypes.c_uint64(0)), "cuMemMap")
    desc = peer_memory._AccessDesc(peer_memory._Location(1, dev), 3)  # device `dev`, read-write
    check(cu.cuMemSetAccess(va, ctypes.c_size_t(psize), ctypes.byref(desc), ctypes.c_size_t(1)), "cuMemSetAccess")
    t_map = time.perf_counter() - t0
    word = ctypes.c_float(-1.0)
    check(cu.cuMemcpyDtoH_v2(ctypes.byref(word), ctypes.c_uint64(va.value + poff), ctypes.c_size_t(4)), "read")
    print(f"peer {peer}'s allocation ({psize / 2**30:.1f} GiB): fd passed in {t_fd * 1e6:.0f} us, imported in "
          f"{t_import * 1e6:.0f} us, mapped + access set in {t_map * 1e6:.0f} us; its buffer's first word read "
          f"through the mapping: {word.value} (expected {float(peer)})")
    # Write into the peer's buffer (word 1) through the mapping; the peer reads it through XLA.
    mark = ctypes.c_float(100.0 + me)
    check(cu.cuMemcpyHtoD_v2(ctypes.c_uint64(va.value + poff + 4), ctypes.byref(mark), ctypes.c_size_t(4)), "write")
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    # Bandwidth of a device-to-device copy out of the peer's allocation through the mapping (256 MiB).
    nbytes = 256 << 20
    big = jnp.zeros((nbytes // 4,), jnp.float32) + me
    big.block_until_ready()
    client.key_value_set(f"zc_probe_big/{me}", str(big.unsafe_buffer_pointer() - base))
    big_off = int(client.blocking_key_value_get(f"zc_probe_big/{peer}", 60_000))
    local = jnp.empty((nbytes // 4,), jnp.float32)
    local.block_until_ready()
    times = []
    for _ in range(6):
        t = time.perf_counter()
        check(cu.cuMemcpyDtoD_v2(ctypes.c_uint64(local.unsafe_buffer_pointer()),
                                 ctypes.c_uint64(va.value + big_off), ctypes.c_size_t(nbytes)), "copy")
        check(cu.cuCtxSynchronize(), "sync")
        times.append(time.perf_counter() - t)
    t_med = sorted(times[1:])[len(times[1:]) // 2]
    print(f"cuMemcpyDtoD of 256 MiB out of the peer's mapped allocation: {t_med * 1e3:.3f} ms "
          f"({nbytes / t_med / 1e9:.0f} GB/s); copy holds the peer's value: "
          f"{bool(np.all(np.asarray(local[:1024]) == peer))}")
    client.key_value_set(f"zc_probe_done/{me}", "1")
    client.blocking_key_value_get(f"zc_probe_done/{peer}", 60_000)
    got = float(np.asarray(x[1]))
    print(f"word 1 of my buffer, written by PE {peer} through its mapping, read through XLA: {got} "
          f"(expected {100.0 + peer}) -> {'OK' if got == 100.0 + peer else 'WRONG'}")
    server.close()

    if os.environ.get("PROBE_NVSHMEM") == "1":
        shm = ctypes.CDLL("libnvshmem_host.so.3")
        shm.nvshmemx_buffer_register_symmetric.restype = ctypes.c_void_p
        shm.nvshmemx_buffer_register_symmetric.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        t0 = time.perf_counter()
        sym = shm.nvshmemx_buffer_register_symmetric(ctypes.c_void_p(base), ctypes.c_size_t(size), 0)
        took = (time.perf_counter() - t0) * 1e6
        print(f"nvshmemx_buffer_register_symmetric(whole allocation) -> {sym} in {took:.0f} us")
    jax.block_until_ready(x)


if __name__ == "__main__":
    main()
