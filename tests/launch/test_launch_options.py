"""The launcher's options and reports, without starting processes."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from jax_tilescale import launch


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("GPUS", "NODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TILESCALE_INIT_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(launch, "_visible_gpu_count", lambda: 0)


def test_global_ranks_of_a_node(monkeypatch):
    monkeypatch.setenv("NODES", "3")
    monkeypatch.setenv("NODE_RANK", "2")
    monkeypatch.setenv("GPUS", "4")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    cfg, command = launch.parse_args(["--init-timeout", "7", "train.py", "--lr", "3"])
    assert command == ["train.py", "--lr", "3"]
    assert cfg.world_size == 12 and cfg.init_timeout_s == 7
    env = cfg.rank_env(1)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["NODE_RANK"]) == ("9", "1", "12", "2")
    assert env["TILESCALE_COORDINATOR"] == "10.0.0.1:29500" and env["TILESCALE_INIT_TIMEOUT"] == "7"
    assert env["TILESCALE_NODE_ID"].endswith("/node2")
    # Several nodes: NVSHMEM's bootstrap interface is left to NVSHMEM (or the user), never forced to loopback.
    assert "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME" not in env


def test_one_node_defaults():
    cfg, _ = launch.parse_args(["-n", "2", "x.py"])
    assert (cfg.nodes, cfg.node_rank, cfg.master_addr, cfg.init_timeout_s) == (1, 0, "127.0.0.1", None)
    assert cfg.rank_env(0).get("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo") == "lo"


@pytest.mark.parametrize("argv,env,msg", [
    (["--nodes", "2", "--master-port", "5", "x.py"], {}, "missing: MASTER_ADDR"),
    (["--nodes", "2", "x.py"], {"MASTER_ADDR": "h"}, "missing: MASTER_PORT"),
    (["--nodes", "2", "--node-rank", "2", "x.py"], {}, "0 <= --node-rank < --nodes"),
    (["--init-timeout", "0", "x.py"], {}, "--init-timeout must be positive"),
])
def test_bad_options(monkeypatch, capsys, argv, env, msg):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as info:
        launch.parse_args(argv)
    assert info.value.code == 2 and msg in capsys.readouterr().err


@pytest.mark.parametrize("code,text", [
    (3, "exited with status 3"),
    (-signal.SIGKILL, "was killed by signal SIGKILL (9)"),
    (-signal.SIGABRT, "was killed by signal SIGABRT (6)"),
    (launch.PEER_FAILED_STATUS, "because another rank failed"),
])
def test_describe_status(code, text):
    assert text in launch.describe_status(code)


def test_the_culprit_is_the_rank_that_failed_first_not_one_stopped_for_it():
    def rank(r, code):
        return launch._Rank(r, SimpleNamespace(returncode=code), None)  # type: ignore[arg-type]

    assert launch._culprit([rank(0, launch.PEER_FAILED_STATUS), rank(1, 2)]).rank == 1
    assert launch._culprit([rank(0, -signal.SIGABRT), rank(3, -signal.SIGKILL)]).rank == 3
    assert launch._culprit([rank(2, 1), rank(1, 1)]).rank == 1


def test_noise_of_a_check_failure_is_left_out_of_the_report():
    assert launch._is_noise("    @     0x7f46c3c40634  absl::log_internal::LogMessage::SendToLog()")
    assert launch._is_noise("*** Check failure stack trace: ***")
    assert not launch._is_noise("ValueError: boom")


def test_devices_pick_the_gpu_of_each_rank(monkeypatch):
    monkeypatch.setattr(launch, "_visible_gpu_count", lambda: 4)
    cfg, _ = launch.parse_args(["--devices", "3,1", "x.py"])
    assert cfg.procs_per_node == 2 and [cfg.rank_env(i)["TILESCALE_DEVICE"] for i in (0, 1)] == ["3", "1"]
    assert "TILESCALE_DEVICE" not in launch.parse_args(["x.py"])[0].rank_env(0)


@pytest.mark.parametrize("argv,msg", [
    (["--devices", "0,0", "x.py"], "must name 2 different GPUs"),
    (["-n", "1", "--devices", "0,1", "x.py"], "must name 1 different GPUs"),
    (["--devices", "7", "x.py"], "names GPU 7 but this node has 2 visible GPUs"),
    (["--devices", "a", "x.py"], "comma-separated GPU ordinals"),
])
def test_bad_devices(monkeypatch, capsys, argv, msg):
    monkeypatch.setattr(launch, "_visible_gpu_count", lambda: 2)
    with pytest.raises(SystemExit):
        launch.parse_args(argv)
    assert msg in capsys.readouterr().err
