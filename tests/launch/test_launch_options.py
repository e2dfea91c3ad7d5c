"""The launcher's options and the variables that stand for them, checked before any rank starts."""

from __future__ import annotations

import socket

import pytest

from jax_tilescale import launch_options
from jax_tilescale.launch_options import parse_args

_VARS = ("GPUS", "NODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TILESCALE_INIT_TIMEOUT", "TILESCALE_DEVICES")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(launch_options, "visible_gpu_count", lambda: 0)


def test_global_ranks_of_a_node(monkeypatch):
    monkeypatch.setenv("NODES", "3")
    monkeypatch.setenv("NODE_RANK", "2")
    monkeypatch.setenv("GPUS", "4")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    cfg, command = parse_args(["--init-timeout", "7", "train.py", "--lr", "3"])
    assert command == ["train.py", "--lr", "3"]
    assert cfg.world_size == 12 and cfg.init_timeout_s == 7
    env = cfg.rank_env(1)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["NODE_RANK"]) == ("9", "1", "12", "2")
    assert env["TILESCALE_COORDINATOR"] == "10.0.0.1:29500" and env["TILESCALE_INIT_TIMEOUT"] == "7"
    assert env["TILESCALE_NODE_ID"].endswith("/node2")
    # Several nodes: NVSHMEM's bootstrap interface is left to NVSHMEM (or the user), never forced to loopback.
    assert "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME" not in env


def test_one_node_defaults():
    cfg, _ = parse_args(["-n", "2", "x.py"])
    assert (cfg.nodes, cfg.node_rank, cfg.master_addr, cfg.init_timeout_s) == (1, 0, "127.0.0.1", None)
    assert 1 <= cfg.master_port <= 65535 and cfg.timeout_s is None
    assert cfg.rank_env(0).get("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo") == "lo"
    cfg, _ = parse_args(["-n2", "--timeout=2.5", "x.py"])
    assert (cfg.procs_per_node, cfg.timeout_s) == (2, 2.5)


def _usage_error(capsys, argv, env=None) -> str:
    with pytest.raises(SystemExit) as info:
        parse_args(argv, env=env or {})
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert err.startswith("usage: python -m jax_tilescale.launch"), err  # argparse's style
    return err.splitlines()[-1]


@pytest.mark.parametrize("argv,env,msg", [
    # ports: 0 would wait out the join timeout, 99999 is not a port
    (["--master-port", "0", "x.py"], {},
     "--master-port 0: must be an integer from 1 to 65535 (the coordinator's port)"),
    (["--master-port", "99999", "x.py"], {}, "--master-port 99999: must be an integer from 1 to 65535"),
    (["x.py"], {"MASTER_PORT": "99999"}, "MASTER_PORT=99999 (for --master-port): must be an integer from 1 to 65535"),
    (["--master-port", "http", "x.py"], {}, "--master-port http: must be an integer from 1 to 65535"),
    # timeouts: -5 or 0 would stop the job at once
    (["--timeout", "-5", "x.py"], {}, "--timeout -5: must be a positive number of seconds"),
    (["--timeout", "0", "x.py"], {}, "--timeout 0: must be a positive number of seconds"),
    (["--timeout", "nan", "x.py"], {}, "--timeout nan: must be a positive number of seconds"),
    (["--init-timeout", "0", "x.py"], {}, "--init-timeout 0: must be a positive number of seconds"),
    (["x.py"], {"TILESCALE_INIT_TIMEOUT": "soon"},
     "TILESCALE_INIT_TIMEOUT=soon (for --init-timeout): must be a positive number of seconds"),
    # processes and nodes
    (["-n", "0", "x.py"], {}, "-n 0: must be an integer of at least 1 (processes on this node)"),
    (["x.py"], {"GPUS": "two"}, "GPUS=two (for -n): must be an integer of at least 1"),
    (["--nodes", "0", "x.py"], {}, "--nodes 0: must be an integer of at least 1 (the number of nodes)"),
    (["x.py"], {"NODES": "-1"}, "NODES=-1 (for --nodes): must be an integer of at least 1"),
    (["--nodes", "2", "--node-rank", "2", "x.py"], {}, "--node-rank 2: must be an integer from 0 to 1 (this node's"),
    (["x.py"], {"NODE_RANK": "1"}, "NODE_RANK=1 (for --node-rank): must be an integer from 0 to 0"),
    (["--nodes", "2", "--master-port", "5", "x.py"], {}, "missing: MASTER_ADDR"),
    (["--nodes", "2", "x.py"], {"MASTER_ADDR": "h"}, "missing: MASTER_PORT"),
    (["--master-addr", "node0:29500", "x.py"], {}, "--master-addr node0:29500: give the host only"),
    (["x.py"], {"MASTER_ADDR": "a b"}, "MASTER_ADDR=a b (for --master-addr): give the host only"),
    (["--master-addr", "", "x.py"], {}, "--master-addr : give the host only"),
    ([], {}, "name a script to run"),
])
def test_bad_options_are_usage_errors_naming_the_option_and_range(capsys, argv, env, msg):
    assert msg in _usage_error(capsys, argv, env)


def test_gpus_bound_the_number_of_processes(monkeypatch, capsys):
    monkeypatch.setattr(launch_options, "visible_gpu_count", lambda: 2)
    assert "-n 3: must be an integer from 1 to 2 (processes on this node, one per GPU: it has 2 visible GPUs)" in (
        _usage_error(capsys, ["-n", "3", "x.py"]))
    assert "GPUS=4 (for -n): must be an integer from 1 to 2" in _usage_error(capsys, ["x.py"], {"GPUS": "4"})
    assert parse_args(["x.py"], env={})[0].procs_per_node == 2  # every visible GPU


def test_ipv6_master_addr_is_a_host():
    cfg, _ = parse_args(["--master-addr", "::1", "x.py"], env={})
    assert cfg.master_addr == "::1"


def test_a_busy_port_is_refused_before_the_ranks_start(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        msg = _usage_error(capsys, ["--master-port", str(port), "x.py"])
        assert f"--master-port {port}: port {port} is already in use on this node (node 0" in msg
        assert "Choose another free port with --master-port or MASTER_PORT" in msg
        # Only node 0 listens there: other nodes connect to it and do not check.
        cfg, _ = parse_args(["--nodes", "2", "--node-rank", "1", "--master-addr", "h", "x.py"],
                            env={"MASTER_PORT": str(port)})
        assert cfg.master_port == port
    assert parse_args(["--master-port", str(port), "x.py"], env={})[0].master_port == port  # free again


def test_devices_pick_the_gpu_of_each_rank(monkeypatch):
    monkeypatch.setattr(launch_options, "visible_gpu_count", lambda: 4)
    cfg, _ = parse_args(["--devices", "3,1", "x.py"], env={})
    assert cfg.procs_per_node == 2 and [cfg.rank_env(i)["TILESCALE_DEVICE"] for i in (0, 1)] == ["3", "1"]
    assert "TILESCALE_DEVICE" not in parse_args(["x.py"], env={})[0].rank_env(0)
    assert parse_args(["x.py"], env={"TILESCALE_DEVICES": "2"})[0].devices == (2,)


@pytest.mark.parametrize("argv,env,msg", [
    (["--devices", "0,0", "x.py"], {},
     "--devices 0,0: must name 2 different GPUs, one per process (-n 2), each in 0 .. 1"),
    (["-n", "1", "--devices", "0,1", "x.py"], {}, "--devices 0,1: must name 1 different GPUs"),
    (["--devices", "7", "x.py"], {}, "--devices 7: GPU 7 is not one of this node's GPUs: each must be in 0 .. 1 (this"),
    (["--devices", "-1", "x.py"], {}, "GPU -1 is not one of this node's GPUs"),
    (["--devices", "a", "x.py"], {}, "--devices a: must be comma-separated GPU ordinals"),
    (["--devices", "", "x.py"], {}, "must be comma-separated GPU ordinals"),
    (["x.py"], {"TILESCALE_DEVICES": "0,5"}, "TILESCALE_DEVICES=0,5 (for --devices): GPU 5 is not one of"),
])
def test_bad_devices(monkeypatch, capsys, argv, env, msg):
    monkeypatch.setattr(launch_options, "visible_gpu_count", lambda: 2)
    assert msg in _usage_error(capsys, argv, env)
