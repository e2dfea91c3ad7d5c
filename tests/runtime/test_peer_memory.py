"""runtime/peer_memory.py's exchange, without a GPU: each rank is a process, the key-value store a
shared dict, the CUDA driver a fake that hands out addresses and records the calls, and the exported
"allocation" a pipe's descriptor, which goes to the peer over the real Unix socket. What is checked is
the agreement: every PE ends with zero-copy on, with the peers' pools in its table, or every PE with
it off and the reason naming the PE that could not."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

from jax_tilescale import abi
from tests.conftest import needs_extension

POOL = 1 << 30
BASES = {0: 0x7000_0000_0000, 1: 0x7100_0000_0000, 2: 0x7200_0000_0000}
MAPPED = 0x9000_0000_0000  # where the fake driver "maps" peer k: MAPPED + k * POOL


class _KV:
    """jax.distributed's key-value calls over a shared dict."""

    def __init__(self, store) -> None:
        self.store = store

    def key_value_set(self, key: str, value: str) -> None:
        self.store[key] = value

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        deadline = time.monotonic() + timeout_ms / 1000
        while key not in self.store:
            if time.monotonic() > deadline:
                raise TimeoutError(key)
            time.sleep(0.002)
        return self.store[key]


class _FakeDriver:
    """Fills the out-parameters of the calls _map_peers makes; `fail` names a call that fails."""

    def __init__(self, fail: str | None, calls) -> None:
        self.fail, self.calls, self.next_peer = fail, calls, [0]
        self.cu = self

    def __call__(self, name: str, *args) -> None:
        self.calls.append(name)
        if name == self.fail:
            raise OSError(f"{name} failed with CUDA error 801")
        if name == "cuMemImportFromShareableHandle":
            args[0]._obj.value = 1234
            fd = args[1].value
            os.fstat(fd)  # a real descriptor arrived
        if name == "cuMemAddressReserve":
            args[0]._obj.value = MAPPED + self.next_peer.pop() * POOL

    def __getattr__(self, name: str):  # teardown's unchecked calls
        return lambda *a: self.calls.append(name) or 0


class _FakeExtension:
    def __init__(self, log) -> None:
        self.log = log

    def set_peer_memory(self, own, table, n_pes) -> None:
        self.log.append(("set", list(own), list(table), n_pes))

    def clear_peer_memory(self) -> None:
        self.log.append(("clear",))


def _rank(rank: int, nranks: int, store, results, export_off: dict, fail_call: dict, env_off: bool) -> None:
    from jax_tilescale.runtime import peer_memory as pm

    if env_off:
        os.environ[pm.ENV_VAR] = "0"
    log, calls = [], []

    def export(one_machine: bool, device: int):
        if os.environ.get(pm.ENV_VAR) == "0":
            return False, f"${pm.ENV_VAR}=0", (0, 0), -1
        if rank in export_off:
            return False, export_off[rank], (0, 0), -1
        r, w = os.pipe()
        os.close(w)
        return True, "", (BASES[rank], POOL), r

    driver = _FakeDriver(fail_call.get(rank), calls)
    pm._export = export
    pm._extension = lambda: _FakeExtension(log)

    def make_driver():
        driver.next_peer = [k for k in reversed(range(nranks)) if k != rank]
        return driver

    pm._Driver = make_driver
    status = pm.setup(_KV(store), rank, nranks, device=0, key="test", one_machine=True, timeout_s=20)
    results[rank] = (status.on, status.reason, dict(status.mapped), log, calls)


def _run(nranks: int = 2, export_off: dict | None = None, fail_call: dict | None = None, env_off: bool = False):
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        store, results = manager.dict(), manager.dict()
        procs = [ctx.Process(target=_rank, args=(r, nranks, store, results, export_off or {}, fail_call or {},
                                                 env_off)) for r in range(nranks)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0, f"rank process exited with {p.exitcode}"
        return dict(results)


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_pe_maps_every_peers_pool_and_hands_the_table_over(nranks):
    results = _run(nranks)
    slots = abi.DEFINES["TS_PEER_ALLOCS"]
    for rank, (on, reason, mapped, log, calls) in results.items():
        assert on, reason
        peers = [k for k in range(nranks) if k != rank]
        assert sorted(mapped) == peers
        assert {k: mapped[k][:2] for k in peers} == {k: (BASES[k], POOL) for k in peers}
        (kind, own, table, n_pes), = log
        assert kind == "set" and own == [BASES[rank], POOL] and n_pes == nranks
        for k in range(nranks):
            entry = table[3 * k * slots: 3 * k * slots + 3]
            assert entry == ([BASES[k], POOL, mapped[k][2]] if k != rank else [0, 0, 0])
        assert calls.count("cuMemMap") == nranks - 1 and calls.count("cuMemSetAccess") == nranks - 1


def test_one_pe_that_cannot_export_turns_it_off_everywhere_and_says_which():
    results = _run(2, export_off={1: "XLA's memory pool does not admit export"})
    for on, reason, _, log, calls in results.values():
        assert not on and reason == "PE 1: XLA's memory pool does not admit export"
        assert ("set",) not in [e[:1] for e in log] and "cuMemMap" not in calls


def test_a_pe_whose_mapping_fails_turns_it_off_everywhere_and_unmaps():
    results = _run(2, fail_call={0: "cuMemSetAccess"})
    for rank, (on, reason, _, log, calls) in results.items():
        assert not on
        assert "PE 0 could not map its peers' memory: cuMemSetAccess failed with CUDA error 801" in reason
        assert not any(e[0] == "set" for e in log) and ("clear",) in log
        if rank == 0:  # what it had mapped is unmapped and released
            assert {"cuMemUnmap", "cuMemAddressFree", "cuMemRelease"} <= set(calls)


def test_the_variable_turns_it_off():
    results = _run(2, env_off=True)
    for on, reason, _, _, _ in results.values():
        assert not on and "TILESCALE_ZERO_COPY=0" in reason


def test_one_process_has_nothing_to_exchange():
    from jax_tilescale.runtime import peer_memory as pm

    before = pm.status()
    assert pm.setup(None, 0, 1, device=0, key="k", one_machine=True) is before and not before.on


def test_a_failed_map_leaves_neither_the_reservation_nor_the_import_behind():
    results = _run(2, fail_call={1: "cuMemMap"})
    on, reason, _, _, calls = results[1]
    assert not on and "PE 1 could not map its peers' memory: cuMemMap failed" in reason
    assert "cuMemAddressFree" in calls and "cuMemRelease" in calls and "cuMemUnmap" not in calls
    assert not results[0][0] and results[0][1] == reason  # the other PE turned it off too, for the same reason


# ---- the handler's side (xla_ffi/peer_memory.h), through the extension -------------------------------


@needs_extension
def test_the_handler_holds_exactly_the_ranges_it_was_given_until_cleared():
    from jax_tilescale import _ffi

    slots = abi.DEFINES["TS_PEER_ALLOCS"]
    try:
        _ffi.set_peer_memory([0x1000, 0x2000, 0x10000, 0x100], [0] * (3 * 2 * slots), 2)
        assert _ffi.peer_memory_on()
        assert _ffi.peer_memory_holds(0x1000, 0x2000)  # the whole first range
        assert _ffi.peer_memory_holds(0x2f00, 0x100) and not _ffi.peer_memory_holds(0x2f00, 0x101)  # its end
        assert not _ffi.peer_memory_holds(0xfff, 2)  # starts before it
        assert _ffi.peer_memory_holds(0x10080, 0x80) and not _ffi.peer_memory_holds(0x10100, 1)
        assert _ffi.take_zero_copy_counts() == (0, 0)  # no launch has run
    finally:
        _ffi.clear_peer_memory()
    assert not _ffi.peer_memory_on() and not _ffi.peer_memory_holds(0x1000, 1)


@needs_extension
@pytest.mark.parametrize("own, table_words, n_pes", [
    ([], 3 * 4, 1),                            # no range
    ([0x1000], 3 * 4, 1),                      # half a pair
    ([1, 1] * 5, 3 * 4, 1),                    # more ranges than TS_PEER_ALLOCS
    ([0x1000, 0x100], 3 * 4 - 1, 1),           # a table of the wrong length
    ([0x1000, 0x100], 0, 0),                   # no PEs
])
def test_the_handler_refuses_a_malformed_registry(own, table_words, n_pes):
    from jax_tilescale import _ffi

    with pytest.raises(ValueError, match="peer memory"):
        _ffi.set_peer_memory(own, [0] * table_words, n_pes)
    assert not _ffi.peer_memory_on()
