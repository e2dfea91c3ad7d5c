"""NVSHMEM bootstrap: one PE per process (PE = jax.process_index()), started by nvshmem4py from a unique id
that rank 0 makes and sends to the others through jax.distributed's key-value store.

XLA does not own NVSHMEM (jaxlib 0.11 rejects its NVSHMEM flag), so this module does; the FFI handler then
uses the same libnvshmem_host that nvshmem4py loaded.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

import jax

from .. import _jax_compat
from ..errors import LaunchError
from . import peer_memory, watchdog
from .distributed import process_layout
from .ffi_registry import load_extension

# NVLink multicast must stay off on the machines we run on (it can take a shared host's GPUs down).
_ENV_DEFAULTS = {"NVSHMEM_DISABLE_NVLS": "1", "NCCL_NVLS_ENABLE": "0"}
_IFNAME_VAR = "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"
_UID_BYTES = 128  # sizeof(nvshmemx_uniqueid_t)
_KEY_PREFIX = "jax_tilescale/nvshmem"
_LAUNCH_HINT = "launch one process per GPU with `python -m jax_tilescale.launch -n N script.py`"


@dataclass(frozen=True)
class NvshmemInfo:
    rank: int  # this process's NVSHMEM PE (== jax.process_index())
    nranks: int  # number of PEs (== jax.process_count())
    cuda_device: int  # CUDA ordinal of this process's GPU


_lock = threading.Lock()
_info: NvshmemInfo | None = None
_generation = 0  # bumps on finalize, so a re-init uses fresh key-value keys


def is_initialized() -> bool:
    return _info is not None


def ensure_initialized(timeout_s: float = 300.0) -> NvshmemInfo:
    """init() unless this process has already done it."""
    info = _info
    return info if info is not None else init(timeout_s)


def set_env_defaults() -> None:
    """Sets the variables every process must have before NVSHMEM (and NCCL) start, unless already set."""
    for name, value in _ENV_DEFAULTS.items():
        os.environ.setdefault(name, value)


def init(timeout_s: float = 300.0) -> NvshmemInfo:
    """Starts NVSHMEM in this process (idempotent). Every process of the job must call it.

    Needs one GPU per process and, with several processes, ``jax.distributed.initialize(...)`` first.
    """
    global _info
    with _lock:
        if _info is not None:
            return _info
        set_env_defaults()
        # jax.local_devices() starts XLA's GPU backend first: XLA then creates the primary context with its own
        # flags, and cuda.core / NVSHMEM below merely retain it. The other order makes XLA log "the primary
        # context is active and has a different flag set".
        device = _single_local_gpu()
        rank, nranks = jax.process_index(), jax.process_count()
        client = _distributed_client(nranks)
        # Plain launches (SLURM, mpirun, a user's own jax.distributed.initialize) work too: the layout comes from
        # jax.distributed and must agree with a launcher's RANK / LOCAL_RANK / WORLD_SIZE where they are set.
        process_layout(timeout_s)
        if client is not None:
            watchdog.install(client, rank)  # a rank that fails stops the others instead of hanging them
        nvshmem_core, cuda_device_cls = _import_nvshmem4py()
        cuda_device = int(getattr(device, "local_hardware_id", None) or 0)
        dev = cuda_device_cls(cuda_device)
        dev.set_current()
        uid = _exchange_unique_id(nvshmem_core, client, rank, nranks, timeout_s)
        nvshmem_core.init(device=dev, uid=uid, rank=rank, nranks=nranks, initializer_method="uid")
        my_pe, n_pes = int(nvshmem_core.my_pe()), int(nvshmem_core.n_pes())
        if (my_pe, n_pes) != (rank, nranks):
            raise LaunchError(f"NVSHMEM started as PE {my_pe} of {n_pes}, expected {rank} of {nranks}")
        if client is not None:  # zero-copy between the processes of one machine (runtime/peer_memory.py)
            peer_memory.setup(client, rank, nranks, cuda_device, f"{_KEY_PREFIX}/{_generation}/peer_memory",
                              one_machine=process_layout(timeout_s).hosts == 1, timeout_s=min(timeout_s, 60.0))
        _info = NvshmemInfo(rank=rank, nranks=nranks, cuda_device=cuda_device)
        return _info


def finalize() -> None:
    """Frees the symmetric workspace and stops NVSHMEM (collective: every process must call it)."""
    global _info, _generation
    with _lock:
        if _info is None:
            return
        try:
            ffi = load_extension()
        except LaunchError:
            ffi = None
        if ffi is not None:
            ffi.release_workspace()
        peer_memory.teardown()
        import nvshmem.core

        nvshmem.core.finalize()
        _info = None
        _generation += 1


def _single_local_gpu() -> Any:
    devices = jax.local_devices()
    if len(devices) > 1:
        raise LaunchError(
            f"this process drives {len(devices)} devices, but NVSHMEM has one PE per process and each PE one GPU: "
            f"{_LAUNCH_HINT} (or call jax.distributed.initialize(..., local_device_ids=[i]) in each process)"
        )
    device = devices[0]
    if device.platform != "gpu":
        raise LaunchError(
            f"NVSHMEM needs a CUDA GPU but this process's device is {device.platform!r}; "
            "on CPU, run kernels with interpret=True"
        )
    return device


def _distributed_client(nranks: int) -> Any:
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if nranks == 1 and world > 1:
        raise LaunchError(
            f"WORLD_SIZE is {world} but jax.process_count() is 1: call jax.distributed.initialize(...) before "
            f"starting NVSHMEM, or {_LAUNCH_HINT}"
        )
    if nranks == 1:
        return None
    client = _jax_compat.distributed_client()
    if client is None:
        raise LaunchError(
            f"jax.process_count() is {nranks} but jax.distributed has no client: call jax.distributed.initialize(...) "
            f"first, or {_LAUNCH_HINT}"
        )
    return client


def _import_nvshmem4py() -> tuple[Any, Any]:
    try:
        import nvshmem.core as nvshmem_core
    except ImportError as e:
        raise LaunchError(
            f"nvshmem4py is not installed ({e}); GPU kernels need it: pip install 'jax-tilescale[gpu]' "
            "(nvshmem4py-cu13, nvidia-nvshmem-cu13, cuda-python)"
        ) from e
    try:
        from cuda.core import Device
    except ImportError:
        from cuda.core.experimental import Device  # cuda.core < 0.4
    return nvshmem_core, Device


def _exchange_unique_id(core: Any, client: Any, rank: int, nranks: int, timeout_s: float) -> Any:
    if nranks == 1:
        return core.get_unique_id()
    key = f"{_KEY_PREFIX}/{_generation}"
    timeout_ms = int(timeout_s * 1000)
    # On one host, bootstrap over loopback (verified on the 2 x H200 machine) rather than whichever interface
    # NVSHMEM would pick; rank 0 decides, since the unique id carries its address, and tells the others.
    client.key_value_set(f"{key}/host/{rank}", socket.gethostname())
    if rank == 0:
        hosts = {client.blocking_key_value_get(f"{key}/host/{r}", timeout_ms) for r in range(nranks)}
        if len(hosts) == 1 and not os.environ.get(_IFNAME_VAR):
            os.environ[_IFNAME_VAR] = "lo"
        client.key_value_set(f"{key}/ifname", os.environ.get(_IFNAME_VAR, ""))
        uid = core.get_unique_id()
        client.key_value_set_bytes(f"{key}/uid", ctypes.string_at(uid.ptr, _UID_BYTES))
        return uid
    ifname = client.blocking_key_value_get(f"{key}/ifname", timeout_ms)
    if ifname and not os.environ.get(_IFNAME_VAR):
        os.environ[_IFNAME_VAR] = ifname
    raw = client.blocking_key_value_get_bytes(f"{key}/uid", timeout_ms)
    if len(raw) != _UID_BYTES:
        raise LaunchError(f"the NVSHMEM unique id from rank 0 has {len(raw)} bytes, expected {_UID_BYTES}")
    uid = core.get_unique_id(empty=True)
    ctypes.memmove(uid.ptr, raw, _UID_BYTES)
    return uid
