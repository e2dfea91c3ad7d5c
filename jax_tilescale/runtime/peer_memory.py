"""Zero-copy between the processes of one machine: every process maps every other's XLA memory pool,
once, so that call-free kernels reach their peers' buffers where XLA put them, with no staging copy
(docs/calling_convention.md, "Zero-copy"; benchmarks/NOTES.md has the measurements behind the choice).

Measured on the H200 machines (jax 0.11.2, 2026-12-01, tools/proto/zero_copy_probe.py): XLA's pool is
one VMM allocation (cuMemCreate) per process that admits POSIX file-descriptor export; legacy CUDA IPC
refuses it, and NVSHMEM 3.4.5's `nvshmemx_buffer_register_symmetric` fails on it (cuMemMap: not
supported) and leaves the process unusable. So: each process exports its pool's allocation
(cuMemRetainAllocationHandle, cuMemExportToShareableHandle), hands the descriptor to the others over a
Unix socket (SCM_RIGHTS), and maps theirs (cuMemImportFromShareableHandle, cuMemAddressReserve,
cuMemMap, cuMemSetAccess): about 2 ms per peer, once. The FFI handler gets the result
(`_ffi.set_peer_memory`) and hands a launch XLA's own buffer for each zero-copy param inside the pool;
buffers elsewhere (a pool that grew: XLA_PYTHON_CLIENT_PREALLOCATE=false) stay staged.

Collective: every process of the job calls `setup` at the same point (nvshmem_bootstrap.init), and
either every process ends with zero-copy on or every process with it off; `status()` says which and why.
$TILESCALE_ZERO_COPY=0 turns it off.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from .. import abi
from ..errors import LaunchError

ENV_VAR = "TILESCALE_ZERO_COPY"
_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_ATTR_RANGE_START, _ATTR_RANGE_SIZE, _ATTR_HANDLE_TYPES = 11, 12, 14  # CUpointer_attribute
_LOCATION_DEVICE, _ACCESS_READ_WRITE = 1, 3  # CUmemLocationType, CUmemAccess_flags
_MIN_POOL_BYTES = 64 << 20  # smaller than this, the allocation is not XLA's pool (a platform allocator)


@dataclass(frozen=True)
class PeerMemoryStatus:
    """Whether launches may hand peers XLA's own buffers, and why not when they may not."""

    on: bool
    reason: str = ""
    pool: tuple[int, int] = (0, 0)  # this process's exported allocation: base, size
    mapped: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # PE -> (its base, size, our address)


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_status = PeerMemoryStatus(False, "not set up (one process, or NVSHMEM not started)")
_keep: list[Any] = []  # an array inside the pool, so that XLA never frees the region (it frees only empty ones)
_maps: list[tuple[int, int, int]] = []  # (address, size, imported handle) to unmap at teardown


def status() -> PeerMemoryStatus:
    return _status


class _Driver:
    """The few CUDA driver calls this needs, through ctypes (each raises with the call's name)."""

    def __init__(self) -> None:
        self.cu = ctypes.CDLL("libcuda.so.1")

    def __call__(self, name: str, *args: Any) -> None:
        r = getattr(self.cu, name)(*args)
        if r != 0:
            raise OSError(f"{name} failed with CUDA error {r}")

    def attr(self, code: int, ptr: int) -> int:
        value = ctypes.c_uint64(0)
        self("cuPointerGetAttribute", ctypes.byref(value), code, ctypes.c_uint64(ptr))
        return value.value


def setup(client: Any, rank: int, nranks: int, device: int, key: str, one_machine: bool,
          timeout_s: float = 60.0) -> PeerMemoryStatus:
    """Exports this process's pool, maps every peer's, and tells the handler (collective; see the module
    docstring). Never raises for a machine that cannot do it: zero-copy is then off, with the reason."""
    global _status
    if nranks == 1:
        return _status
    ms = int(timeout_s * 1000)
    # The sockets' names must not meet another job's on this machine: rank 0 picks a token for this one.
    if rank == 0:
        client.key_value_set(f"{key}/token", secrets.token_hex(8))
    key = f"{key}/{client.blocking_key_value_get(f'{key}/token', ms)}"
    ok, why, pool, fd = _export(one_machine, device)
    client.key_value_set(f"{key}/pool/{rank}", f"{pool[0]} {pool[1]}" if ok else f"off PE {rank}: {why}")
    # Every PE reads the same words in the same order, so all agree, and all report the first PE's reason.
    pools: dict[int, tuple[int, int]] = {}
    reason = ""
    for r in range(nranks):
        got = client.blocking_key_value_get(f"{key}/pool/{r}", ms)
        if got.startswith("off "):
            reason = reason or got[4:]
        else:
            base, size = (int(v) for v in got.split())
            pools[r] = (base, size)
    if not reason:  # every PE exported its pool: each maps the others', then they agree again
        server, mapped, mine = None, {}, "ok"
        try:
            server = _serve(key, rank, fd, nranks - 1, timeout_s)
            mapped = _map_peers(key, rank, nranks, device, pools, timeout_s)
        except (OSError, LaunchError) as e:
            mine = f"off PE {rank} could not map its peers' memory: {e}"
        client.key_value_set(f"{key}/mapped/{rank}", mine)
        for r in range(nranks):
            got = client.blocking_key_value_get(f"{key}/mapped/{r}", ms)
            if got != "ok":
                reason = reason or got[4:]
        if server is not None:  # every peer has taken its descriptor, or failed and said so
            server.close()
    if fd >= 0:
        os.close(fd)
    if reason:
        teardown()
        _status = PeerMemoryStatus(False, reason)
        return _status
    ffi = _extension()
    slots = abi.DEFINES["TS_PEER_ALLOCS"]
    table = [0] * (3 * nranks * slots)
    for pe, (base, size, va) in mapped.items():  # slot 0 of each peer: its pool
        table[3 * pe * slots: 3 * pe * slots + 3] = [base, size, va]
    ffi.set_peer_memory([pool[0], pool[1]], table, nranks)
    _status = PeerMemoryStatus(True, "", pool, mapped)
    return _status


def teardown() -> None:
    """Zero-copy off: the handler forgets the table, this process unmaps its peers' pools."""
    global _status
    try:
        _extension().clear_peer_memory()
    except (ImportError, LaunchError):
        pass
    if _maps:
        drv = _Driver()
        for va, size, handle in _maps:
            drv.cu.cuMemUnmap(ctypes.c_uint64(va), ctypes.c_size_t(size))
            drv.cu.cuMemAddressFree(ctypes.c_uint64(va), ctypes.c_size_t(size))
            drv.cu.cuMemRelease(ctypes.c_uint64(handle))
        _maps.clear()
    _keep.clear()
    _status = PeerMemoryStatus(False, "torn down")


def _extension() -> Any:
    from .ffi_registry import load_extension

    return load_extension()


def _export(one_machine: bool, device: int) -> tuple[bool, str, tuple[int, int], int]:
    """(ok, why not, (base, size) of XLA's pool on CUDA device `device`, exported descriptor or -1)."""
    if os.environ.get(ENV_VAR, "1") == "0":
        return False, f"${ENV_VAR}=0", (0, 0), -1
    if not one_machine:
        return False, "the job spans several machines (a peer's memory is mapped only on its own machine)", (0, 0), -1
    try:
        drv = _Driver()
        # A transfer, not a computation: this runs while a kernel's call is being lowered.
        probe = jax.device_put(np.zeros((64,), np.float32), jax.local_devices()[0])
        probe.block_until_ready()
        ptr = probe.unsafe_buffer_pointer()
        base, size = drv.attr(_ATTR_RANGE_START, ptr), drv.attr(_ATTR_RANGE_SIZE, ptr)
        if size < _MIN_POOL_BYTES:
            return False, (f"XLA's buffers are not in one large memory pool (the allocation holding a probe buffer "
                           f"is {size} bytes: XLA_PYTHON_CLIENT_PREALLOCATE=false or "
                           "XLA_PYTHON_CLIENT_ALLOCATOR=platform?)"), (0, 0), -1
        if not drv.attr(_ATTR_HANDLE_TYPES, ptr) & _POSIX_FD:
            return False, "XLA's memory pool does not admit export as a file descriptor (not VMM memory)", (0, 0), -1
        drv("cuCtxSetCurrent", _primary_context(drv, device))
        handle = ctypes.c_uint64()
        drv("cuMemRetainAllocationHandle", ctypes.byref(handle), ctypes.c_uint64(base))
        fd = ctypes.c_int(-1)
        try:
            drv("cuMemExportToShareableHandle", ctypes.byref(fd), handle, _POSIX_FD, ctypes.c_uint64(0))
        finally:
            drv.cu.cuMemRelease(handle)  # the retain's reference; the descriptor holds its own
    except (OSError, AttributeError, RuntimeError) as e:
        return False, f"exporting XLA's memory pool failed: {e}", (0, 0), -1
    _keep.append(probe)
    return True, "", (base, size), fd.value


def _primary_context(drv: _Driver, device: int) -> ctypes.c_void_p:
    ctx = ctypes.c_void_p()
    drv("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), device)
    return ctx


def _socket_name(key: str, rank: int) -> str:
    return f"\0jax_tilescale/{os.getuid()}/{key}/{rank}"  # abstract: nothing on disk to clean up


def _serve(key: str, rank: int, fd: int, clients: int, timeout_s: float) -> socket.socket:
    """Hands `fd` to each peer that connects (each maps it), in a thread, until the socket (returned)
    is closed or timeout_s passes."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(_socket_name(key, rank))
    srv.listen(max(clients, 1))
    srv.settimeout(timeout_s)

    def run() -> None:
        try:
            for _ in range(clients):
                conn, _ = srv.accept()
                with conn:
                    socket.send_fds(conn, [b"fd"], [fd])
        except OSError:
            pass  # a peer that never came: its own mapping failed, and the agreement turns zero-copy off
        finally:
            srv.close()

    threading.Thread(target=run, name="jax_tilescale-peer-memory", daemon=True).start()
    return srv


def _fetch(key: str, peer: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout_s)
            s.connect(_socket_name(key, peer))
            _, fds, _, _ = socket.recv_fds(s, 16, 1)
            if not fds:
                raise OSError(f"PE {peer} sent no descriptor")
            return fds[0]
        except (ConnectionRefusedError, FileNotFoundError):
            if time.monotonic() > deadline:
                raise OSError(f"PE {peer}'s socket did not open within {timeout_s:.0f} s") from None
            time.sleep(0.01)
        finally:
            s.close()


def _map_peers(key: str, rank: int, nranks: int, device: int, pools: dict[int, tuple[int, int]],
               timeout_s: float) -> dict[int, tuple[int, int, int]]:
    drv = _Driver()
    mapped: dict[int, tuple[int, int, int]] = {}
    desc = _AccessDesc(_Location(_LOCATION_DEVICE, device), _ACCESS_READ_WRITE)
    for peer in range(nranks):
        if peer == rank:
            continue
        base, size = pools[peer]
        fd = _fetch(key, peer, timeout_s)
        handle = ctypes.c_uint64()
        try:
            drv("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD)
        finally:
            os.close(fd)
        va = ctypes.c_uint64()
        try:
            drv("cuMemAddressReserve", ctypes.byref(va), ctypes.c_size_t(size), ctypes.c_size_t(0),
                ctypes.c_uint64(0), ctypes.c_uint64(0))
            drv("cuMemMap", va, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_uint64(0))
        except OSError:  # nothing of this peer stays behind: the reservation and the imported handle go
            if va.value:
                drv.cu.cuMemAddressFree(va, ctypes.c_size_t(size))
            drv.cu.cuMemRelease(handle)
            raise
        _maps.append((va.value, size, handle.value))  # teardown unmaps, frees and releases from here on
        drv("cuMemSetAccess", va, ctypes.c_size_t(size), ctypes.byref(desc), ctypes.c_size_t(1))
        mapped[peer] = (base, size, va.value)
    return mapped
