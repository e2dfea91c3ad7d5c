"""process_layout() and the launcher-variable checks, in one process with a fake key-value store
(tests/launch covers real multi-process jobs)."""

from __future__ import annotations

import jax
import pytest

from jax_tilescale.errors import LaunchError
from jax_tilescale.runtime import distributed


class FakeKV:
    """The slice of jax.distributed's client that the layout uses."""

    def __init__(self, nodes: dict[int, str] | None = None):
        self.store = {f"jax_tilescale/node/{r}": n for r, n in (nodes or {}).items()}

    def key_value_set(self, key, value, allow_overwrite=False):
        assert allow_overwrite or key not in self.store
        self.store[key] = value

    def key_value_dir_get(self, prefix):
        return [(k, v) for k, v in self.store.items() if k.startswith(prefix + "/")]

    def blocking_key_value_get(self, key, timeout_ms):
        if key not in self.store:
            raise RuntimeError(f"DEADLINE_EXCEEDED: {key}")
        return self.store[key]


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TILESCALE_NODE_ID", "TILESCALE_INIT_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    distributed._reset_for_tests()
    yield
    distributed._reset_for_tests()


def as_rank(monkeypatch, rank: int, world: int, client=None, node: str = "hostA"):
    monkeypatch.setattr(jax, "process_index", lambda *a, **k: rank)
    monkeypatch.setattr(jax, "process_count", lambda *a, **k: world)
    monkeypatch.setattr(distributed, "distributed_client", lambda: client)
    monkeypatch.setenv("TILESCALE_NODE_ID", node)


def test_single_process():
    assert distributed.process_layout() == (0, 0, 1, 1, 1)
    assert distributed.process_layout() is distributed.process_layout()  # computed once


def test_ranks_grouped_by_node_in_rank_order(monkeypatch):
    # Nodes need not hold consecutive ranks (e.g. a round-robin SLURM distribution).
    kv = FakeKV({0: "a\nhostA", 1: "b\nhostB", 3: "b\nhostB", 4: "a\nhostA", 5: "b"})  # 5: no host given
    as_rank(monkeypatch, 2, 6, kv, node="a")
    monkeypatch.setattr(distributed.socket, "gethostname", lambda: "hostA")
    layout = distributed.process_layout()
    assert layout == distributed.ProcessLayout(rank=2, local_rank=1, world_size=6, local_size=3, hosts=3)
    assert kv.store["jax_tilescale/node/2"].split("\n")[0] == "a"  # published for the others, with the host name


def test_nodes_on_one_machine_count_one_host(monkeypatch):
    """The launcher may run several "nodes" on one machine (two PEs sharing a GPU, tools/gpu_test.sh): peers
    there are still load/store reachable, which the code generator's call-free kernels need."""
    import socket

    host = socket.gethostname()
    kv = FakeKV({0: f"{host}/node0\n{host}"})
    as_rank(monkeypatch, 1, 2, kv, node=f"{host}/node1")
    layout = distributed.process_layout()
    assert (layout.local_size, layout.hosts) == (1, 1)


def test_launcher_variables_must_agree(monkeypatch):
    as_rank(monkeypatch, 1, 2, FakeKV({0: "n0"}), node="n1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")  # but rank 1 is alone on its node: local rank 0
    with pytest.raises(LaunchError, match=r"LOCAL_RANK is 1 but this process's index among .* its node is 0"):
        distributed.process_layout()


@pytest.mark.parametrize("var,value,match", [
    ("RANK", "3", r"RANK is 3 but jax.process_index\(\) is 0"),
    ("WORLD_SIZE", "4", r"WORLD_SIZE is 4 but jax.process_count\(\) is 1"),
    ("RANK", "zero", "not an integer"),
])
def test_check_launch_env(monkeypatch, var, value, match):
    monkeypatch.setenv(var, value)
    with pytest.raises(LaunchError, match=match):
        distributed.check_launch_env()


def test_a_rank_that_never_publishes_is_named(monkeypatch):
    as_rank(monkeypatch, 0, 3, FakeKV({2: "a"}), node="a")
    with pytest.raises(LaunchError, match=r"rank 1 did not publish its node within 0.1 s"):
        distributed.process_layout(timeout_s=0.1)


@pytest.mark.parametrize("value", ["0", "-3", "soon"])
def test_bad_timeout_variable(monkeypatch, value):
    monkeypatch.setenv("TILESCALE_INIT_TIMEOUT", value)
    with pytest.raises(LaunchError, match="TILESCALE_INIT_TIMEOUT"):
        distributed.env_seconds("TILESCALE_INIT_TIMEOUT", 120)
