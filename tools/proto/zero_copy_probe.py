"""Probe for issue 14, item 3 (zero-copy): can peers address XLA's own buffers?

Run on the GPU machine, one process per PE (two PEs may share one GPU under MPS):

    python -m jax_tilescale.launch -n 2 tools/proto/zero_copy_probe.py
    STEPS=probe_zero_copy bash tools/gpu_test.sh      # two PEs on one GPU when only one is lent

For one XLA buffer per PE (1 MiB of float32 holding the PE's index) it prints, from rank 0 and each
rank's log:
1. what the CUDA driver says of its allocation (cuPointerGetAttribute: range start and size, whether
   legacy CUDA IPC can export it, the VMM handle types it allows, its memory pool): which mechanism
   the allocation admits at all;
2. `nvshmemx_buffer_register_symmetric` (NVSHMEM 3.4's host API; collective) on the buffer itself and
   on the whole allocation range: the symmetric address it returns, or null, and the time per
   register/unregister pair; where it works, `nvshmem_ptr` of the peer's registered buffer and a copy
   of its first word, which must read the peer's index;
3. legacy CUDA IPC (`cuIpcGetMemHandle`) on the allocation: whether it exports.

Nothing here changes the library; it decides which zero-copy design to build (benchmarks/NOTES.md,
"Zero-copy").
"""

from __future__ import annotations

import ctypes
import time

import jax
import jax.numpy as jnp

import jax_tilescale as ts
from jax_tilescale.runtime import nvshmem_bootstrap

ATTRS = {  # CUpointer_attribute (cuda.h), the ones that say what the allocation admits
    "legacy_ipc_capable": 10,
    "range_start": 11,
    "range_size": 12,
    "allowed_handle_types": 14,
    "mempool_handle": 17,
    "mapping_size": 18,
    "mapping_base": 19,
}


def pointer_attrs(cu: ctypes.CDLL, ptr: int) -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for name, code in ATTRS.items():
        value = ctypes.c_uint64(0)
        r = cu.cuPointerGetAttribute(ctypes.byref(value), code, ctypes.c_uint64(ptr))
        out[name] = value.value if r == 0 else f"error {r}"
    return out


def try_register(shm: ctypes.CDLL, cu: ctypes.CDLL, ptr: int, size: int, peer: int, label: str, reps: int = 5) -> None:
    """Registers [ptr, ptr + size) on every PE (collective), reads the peer's first word through
    nvshmem_ptr, unregisters; prints what happened."""
    t0 = time.perf_counter()
    sym = shm.nvshmemx_buffer_register_symmetric(ctypes.c_void_p(ptr), ctypes.c_size_t(size), 0)
    t_reg = time.perf_counter() - t0
    if not sym:
        print(f"{label}: nvshmemx_buffer_register_symmetric({size} B) returned null ({t_reg * 1e6:.0f} us)")
        return
    peer_ptr = shm.nvshmem_ptr(ctypes.c_void_p(sym), peer)
    word = ctypes.c_float(-1.0)
    read = "nvshmem_ptr gave null"
    if peer_ptr:
        r = cu.cuMemcpyDtoH_v2(ctypes.byref(word), ctypes.c_uint64(peer_ptr), ctypes.c_size_t(4))
        read = f"peer's first word {word.value} (cuMemcpyDtoH {r})"
    t1 = time.perf_counter()
    rc = shm.nvshmemx_buffer_unregister_symmetric(ctypes.c_void_p(sym), ctypes.c_size_t(size))
    t_unreg = time.perf_counter() - t1
    pair = []
    for _ in range(reps):  # the cost of doing it per call, if it had to be
        t = time.perf_counter()
        s = shm.nvshmemx_buffer_register_symmetric(ctypes.c_void_p(ptr), ctypes.c_size_t(size), 0)
        shm.nvshmemx_buffer_unregister_symmetric(ctypes.c_void_p(s), ctypes.c_size_t(size))
        pair.append(time.perf_counter() - t)
    print(f"{label}: registered at {sym:#x} in {t_reg * 1e6:.0f} us; {read}; unregister rc {rc} in "
          f"{t_unreg * 1e6:.0f} us; register+unregister median {sorted(pair)[len(pair) // 2] * 1e6:.0f} us")


def main() -> None:
    plat = ts.platform.setup()
    info = nvshmem_bootstrap.ensure_initialized()
    me, n = info.rank, info.nranks
    peer = (me + 1) % n
    cu = ctypes.CDLL("libcuda.so.1")
    shm = ctypes.CDLL("libnvshmem_host.so.3")
    shm.nvshmemx_buffer_register_symmetric.restype = ctypes.c_void_p
    shm.nvshmemx_buffer_register_symmetric.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    shm.nvshmemx_buffer_unregister_symmetric.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    shm.nvshmem_ptr.restype = ctypes.c_void_p
    shm.nvshmem_ptr.argtypes = [ctypes.c_void_p, ctypes.c_int]
    print(f"PE {me} of {n} ({plat.describe()})")

    x = jnp.full((1 << 18,), float(me), jnp.float32)  # 1 MiB
    x.block_until_ready()
    ptr = x.unsafe_buffer_pointer()
    attrs = pointer_attrs(cu, ptr)
    print(f"XLA buffer at {ptr:#x}, 1 MiB; allocation: " + ", ".join(
        f"{k}={v:#x}" if isinstance(v, int) and k != "legacy_ipc_capable" else f"{k}={v}" for k, v in attrs.items()))

    handle = (ctypes.c_byte * 64)()
    start = attrs["range_start"] if isinstance(attrs["range_start"], int) else ptr
    r = cu.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(start))
    print(f"legacy CUDA IPC export of the allocation: cuIpcGetMemHandle -> {r} (0: exportable)")

    try_register(shm, cu, ptr, 1 << 20, peer, "the buffer itself")
    size = attrs["range_size"]
    if isinstance(size, int) and size > 0 and isinstance(attrs["range_start"], int):
        # The whole allocation: sizes may differ between PEs, which the collective may refuse.
        try_register(shm, cu, attrs["range_start"], size, peer, f"the whole allocation ({size / 2**20:.0f} MiB)")
    jax.block_until_ready(x)


if __name__ == "__main__":
    main()
