"""NVSHMEM bootstrap errors on CPU (the GPU path itself is covered by tests/gpu)."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import jax
import pytest

from jax_tilescale.errors import LaunchError
from jax_tilescale.runtime import nvshmem_bootstrap as boot


@dataclass(frozen=True)
class FakeDevice:
    id: int
    platform: str = "gpu"
    local_hardware_id: int = 0
    process_index: int = 0


def unset_env(monkeypatch, name: str) -> None:
    """Unsets `name` for this test and restores it afterwards, even if the code under test sets it."""
    monkeypatch.setenv(name, "placeholder")  # records the original value for teardown
    monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setattr(boot, "_info", None)
    for name in ("NVSHMEM_DISABLE_NVLS", "NCCL_NVLS_ENABLE", "WORLD_SIZE", "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"):
        unset_env(monkeypatch, name)


def test_several_local_gpus_is_an_error_naming_the_launcher(monkeypatch):
    monkeypatch.setattr(jax, "local_devices", lambda *a, **k: [FakeDevice(0), FakeDevice(1, local_hardware_id=1)])
    with pytest.raises(LaunchError, match="one PE per process") as info:
        boot.init()
    assert "python -m jax_tilescale.launch -n N script.py" in str(info.value)
    assert not boot.is_initialized()


def test_cpu_device_is_an_error(monkeypatch):
    monkeypatch.setattr(jax, "local_devices", lambda *a, **k: [FakeDevice(0, platform="cpu")])
    with pytest.raises(LaunchError, match="needs a CUDA GPU"):
        boot.ensure_initialized()


def test_missing_nvshmem4py_names_the_gpu_extra(monkeypatch):
    monkeypatch.setattr(jax, "local_devices", lambda *a, **k: [FakeDevice(0)])
    monkeypatch.setitem(sys.modules, "nvshmem", None)  # makes `import nvshmem.core` fail
    monkeypatch.setitem(sys.modules, "nvshmem.core", None)
    with pytest.raises(LaunchError, match=r"pip install 'jax-tilescale\[gpu\]'"):
        boot.init()


def test_world_size_without_jax_distributed_is_an_error(monkeypatch):
    monkeypatch.setattr(jax, "local_devices", lambda *a, **k: [FakeDevice(0)])
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(LaunchError, match=r"jax.distributed.initialize"):
        boot.init()


def test_env_defaults_are_set_but_never_override(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "7")
    boot.set_env_defaults()
    assert os.environ["NVSHMEM_DISABLE_NVLS"] == "1"
    assert os.environ["NCCL_NVLS_ENABLE"] == "7"


class FakeUid:
    def __init__(self, fill: int):
        self.buf = ctypes.create_string_buffer(bytes([fill]) * 128, 128)
        self.ptr = ctypes.addressof(self.buf)


class FakeCore:
    def __init__(self):
        self.calls: list[tuple] = []

    def get_unique_id(self, empty=False):
        return FakeUid(0 if empty else 7)

    def init(self, **kw):
        self.calls.append(("init", kw))

    def my_pe(self):
        return self.calls[-1][1]["rank"]

    def n_pes(self):
        return self.calls[-1][1]["nranks"]


class FakeCudaDevice:
    current: int | None = None

    def __init__(self, ordinal: int):
        self.ordinal = ordinal

    def set_current(self):
        FakeCudaDevice.current = self.ordinal


class FakeKV:
    """The slice of jax.distributed's client the bootstrap uses, shared by simulated ranks (threads)."""

    def __init__(self):
        self.store: dict[str, bytes | str] = {}
        self.cond = threading.Condition()

    def key_value_set(self, key, value):
        with self.cond:
            assert key not in self.store, key
            self.store[key] = value
            self.cond.notify_all()

    key_value_set_bytes = key_value_set

    def blocking_key_value_get(self, key, timeout_ms):
        with self.cond:
            assert self.cond.wait_for(lambda: key in self.store, timeout_ms / 1000), key
            return self.store[key]

    blocking_key_value_get_bytes = blocking_key_value_get


def test_single_process_init_makes_the_uid_locally(monkeypatch):
    core = FakeCore()
    monkeypatch.setattr(jax, "local_devices", lambda *a, **k: [FakeDevice(0, local_hardware_id=3)])
    monkeypatch.setattr(boot, "_import_nvshmem4py", lambda: (core, FakeCudaDevice))
    info = boot.init()
    assert info == boot.NvshmemInfo(rank=0, nranks=1, cuda_device=3)
    assert FakeCudaDevice.current == 3
    ((_, kw),) = core.calls
    assert kw["rank"] == 0 and kw["nranks"] == 1 and kw["initializer_method"] == "uid"
    assert boot.ensure_initialized() is info  # idempotent: no second init
    assert len(core.calls) == 1


def test_uid_travels_through_the_key_value_store():
    kv, core = FakeKV(), FakeCore()
    with ThreadPoolExecutor(2) as pool:
        uids = list(pool.map(lambda r: boot._exchange_unique_id(core, kv, rank=r, nranks=2, timeout_s=10), [0, 1]))
    assert [ctypes.string_at(u.ptr, 128) for u in uids] == [bytes([7]) * 128] * 2
    assert os.environ["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] == "lo"  # both ranks on one host: loopback
    assert kv.store[f"{boot._KEY_PREFIX}/{boot._generation}/ifname"] == "lo"


def test_explicit_bootstrap_interface_is_kept(monkeypatch):
    monkeypatch.setenv("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "eth0")
    kv = FakeKV()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda r: boot._exchange_unique_id(FakeCore(), kv, rank=r, nranks=2, timeout_s=10), [0, 1]))
    assert kv.store[f"{boot._KEY_PREFIX}/{boot._generation}/ifname"] == "eth0"
