"""Several nodes on CPU: launchers on "nodes" that rendezvous through jax.distributed on loopback, plain
processes that initialise jax.distributed themselves, and nodes that cannot join failing in bounded time."""

from __future__ import annotations

import sys

from .procs import cpu_env, finish, free_port, records, start, start_launcher, write_script

LAYOUT_SCRIPT = """
    import json, os, jax, numpy as np
    from jax.sharding import Mesh
    from jax_tilescale.runtime import kernel_pe_map, mesh_pe_table, process_layout

    layout = process_layout()
    mesh = Mesh(np.array(jax.devices()).reshape(2, -1), ("node", "gpu"))
    table, shape = mesh_pe_table(mesh)
    me = jax.process_index()
    print("R" + " " + json.dumps(dict(
        process_index=me, process_count=jax.process_count(), env=[os.environ.get(v) for v in ("RANK", "LOCAL_RANK")],
        layout=list(layout), table=list(table), shape=list(shape),
        node_team=kernel_pe_map(table, shape, [1], me)[1], across=kernel_pe_map(table, shape, [0], me)[1])))
"""


def test_two_launchers_form_one_job(tmp_path):
    script = write_script(tmp_path, LAYOUT_SCRIPT)
    env = dict(NODES="2", GPUS="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    procs = [start_launcher(script, cpu_env(**env, NODE_RANK=str(node))) for node in (1, 0)]  # node 1 first
    codes, outs, _ = finish(procs, timeout=120)
    assert codes == [0, 0], outs
    by_node = {node: records(out) for node, out in zip((1, 0), outs)}
    ranks = sorted(r["process_index"] for rs in by_node.values() for r in rs)
    assert ranks == [0, 1, 2, 3], outs
    for node, rs in by_node.items():
        assert sorted(r["process_index"] for r in rs) == [2 * node, 2 * node + 1]
        for r in rs:
            g = r["process_index"]
            local = g - 2 * node
            assert r["process_count"] == 4
            assert r["env"] == [str(g), str(local)]  # the launcher's RANK, LOCAL_RANK
            assert r["layout"] == [g, local, 4, 2, 1]  # process_layout() from jax.distributed agrees (one machine)
            # The PE table follows the mesh (devices in rank order here); a team along "gpu" is the node.
            assert r["table"] == [0, 1, 2, 3] and r["shape"] == [2, 2]
            assert r["node_team"] == [2 * node, 2 * node + 1]
            assert r["across"] == [local, 2 + local]


def test_plain_processes_without_the_launcher(tmp_path):
    """A user's own launch: each process calls jax.distributed.initialize itself; the layout still works."""
    port = free_port()
    script = write_script(tmp_path, f"""
        import json, sys, jax
        rank = int(sys.argv[1])
        jax.distributed.initialize(coordinator_address="127.0.0.1:{port}", num_processes=2, process_id=rank,
                                   initialization_timeout=60)
        from jax_tilescale.runtime import process_layout
        print("R " + json.dumps(dict(rank=rank, layout=list(process_layout()))))
    """)
    procs = [start([sys.executable, str(script), str(r)], cpu_env()) for r in (0, 1)]
    codes, outs, _ = finish(procs, timeout=120)
    assert codes == [0, 0], outs
    got = sorted((r["rank"], r["layout"]) for out in outs for r in records(out))
    assert got == [(0, [0, 0, 2, 2, 1]), (1, [1, 1, 2, 2, 1])]  # one machine


def test_a_rank_variable_that_disagrees_with_jax_is_refused(tmp_path):
    port = free_port()
    script = write_script(tmp_path, f"""
        import os, sys, jax
        rank = int(sys.argv[1])
        os.environ["RANK"] = str(1 - rank)  # e.g. left over from another launcher
        jax.distributed.initialize(coordinator_address="127.0.0.1:{port}", num_processes=2, process_id=rank)
        from jax_tilescale.runtime import process_layout
        process_layout()
    """)
    procs = [start([sys.executable, str(script), str(r)], cpu_env()) for r in (0, 1)]
    codes, outs, _ = finish(procs, timeout=120)
    assert all(c != 0 for c in codes)
    assert "LaunchError: RANK is 1 but jax.process_index() is 0" in outs[0], outs[0]


def test_node_that_cannot_reach_the_coordinator_fails_in_bounded_time(tmp_path):
    script = write_script(tmp_path, "print('never runs')\n")
    port = free_port()  # nobody listens there: node 0 was never started
    env = cpu_env(NODES="2", NODE_RANK="1", GPUS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    (code,), (out,), seconds = finish([start_launcher(script, env, "--init-timeout", "2")], timeout=60)
    assert code == 3, out
    assert seconds < 30
    assert f"rank 1 could not reach the jax.distributed coordinator at 127.0.0.1:{port} within 2 s" in out
    assert "--init-timeout" in out and "never runs" not in out


def test_coordinator_whose_peers_never_come_fails_in_bounded_time(tmp_path):
    script = write_script(tmp_path, "print('never runs')\n")
    env = cpu_env(NODES="2", NODE_RANK="0", GPUS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                  TILESCALE_INIT_TIMEOUT="2")
    (code,), (out,), seconds = finish([start_launcher(script, env)], timeout=60)
    assert code == 3, out
    assert seconds < 30
    assert "rank 0 waited 2 s for the other processes of the job (2 in all)" in out
    assert "[launch] rank 0 (node 0) exited with status 3" in out


def test_the_script_still_configures_jax(tmp_path):
    """The launcher's rank set-up must not start XLA's backends: flags the script sets first still count."""
    script = write_script(tmp_path, """
        import json, os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"
        import jax
        print("R " + json.dumps({"local": len(jax.local_devices())}))
    """)
    (code,), (out,), _ = finish([start_launcher(script, cpu_env(), "-n", "2")], timeout=120)
    assert code == 0, out
    assert [r["local"] for r in records(out)] == [3, 3]
