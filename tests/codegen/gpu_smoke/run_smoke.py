"""Runs generated kernels on 2 GPUs with harness.cu and checks their outputs (no JAX runtime).

    python tests/codegen/gpu_smoke/run_smoke.py [WORKDIR]

This is the code generator's own end-to-end check on the GPU machine: it catches codegen and
memory-ordering bugs independently of the FFI handler and the runtime (which tests/gpu covers).
Kernel PE k is mapped to NVSHMEM PE npes-1-k, so the PE translation is exercised too. Exits
non-zero on any mismatch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from jax_tilescale.codegen import generate_cuda
from jax_tilescale.compiler import compile_cubin
from jax_tilescale.compiler.toolchain import find_nvcc, find_nvshmem
from jax_tilescale.ir import KernelIR
from tests.codegen import kernels

NPES = 2
BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclass
class Case:
    name: str
    kernel: KernelIR
    expect: Callable[[list[list[np.ndarray]]], list[list[np.ndarray]]]  # inputs per PE -> outputs per PE
    iters: int = 0
    moved_bytes: int = 0  # per PE per launch, for the bandwidth column
    inputs: list[list[np.ndarray]] = field(default_factory=list)


def _inputs(kernel: KernelIR, pe: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1234 + pe)
    return [rng.standard_normal(b.shape).astype(b.dtype) for b in kernel.inputs]


def ring_shift_case(m, n, bm, dtype, iters=0) -> Case:
    k = kernels.ring_shift(m, n, NPES, bm, dtype)
    return Case(
        f"ring_shift_{np.dtype(dtype).name}_{m}x{n}",
        k,
        lambda ins: [[ins[(p - 1) % NPES][0]] for p in range(NPES)],
        iters,
        m * n * np.dtype(dtype).itemsize,
    )


def allgather_case(m, n, bm, dtype, iters=0) -> Case:
    k = kernels.ring_allgather(m, n, NPES, bm, dtype)
    full = lambda ins: np.concatenate([ins[p][0] for p in range(NPES)])
    return Case(
        f"allgather_{np.dtype(dtype).name}_{m}x{n}",
        k,
        lambda ins: [[full(ins)] for _ in range(NPES)],
        iters,
        m * n * np.dtype(dtype).itemsize * (NPES - 1),
    )


def signal_case(dtype) -> Case:
    rows, n, blocks = 16, 96, 2
    k = kernels.signal_exchange(rows, n, NPES, dtype, blocks=blocks)

    def expect(ins):
        outs = []
        for p in range(NPES):
            b = ins[(p - 1) % NPES][0]
            b2 = np.zeros_like(b)
            b2[:, : n // 2] = ins[(p + 1) % NPES][0][:, n // 2 :]
            d = np.concatenate([b[rows:], b[:rows]])
            outs.append([b, b2, b, d])
        return outs

    return Case(f"signal_exchange_{np.dtype(dtype).name}", k, expect)


def barrier_case(dtype, blocks: int, iters: int) -> Case:
    rows, n = 8, 256
    k = kernels.barrier_chain(rows, n, NPES, dtype, blocks)

    def expect(ins):
        outs = []
        for p in range(NPES):
            b = ins[(p - 1) % NPES][0]
            outs.append([b, np.roll(b, -rows, axis=0), np.roll(b, -2 * rows, axis=0)])
        return outs

    return Case(f"barrier_chain_{np.dtype(dtype).name}_{blocks}blocks", k, expect, iters)


def index_math_case() -> Case:
    k = kernels.python_index_math(NPES)

    def expect(ins):
        outs = []
        for p in range(NPES):
            a = ins[p][0]
            c = a[[(3 * bx - 4) % 4 for bx in range(4)]]
            b = np.zeros_like(a)
            b[0:3] = ins[(p + 1) % NPES][0][0]
            outs.append([b, c])
        return outs

    return Case("index_math", k, expect)


def local_copy_case() -> Case:
    k = kernels.local_copy()

    def expect(ins):
        outs = []
        for p in range(NPES):
            b = np.zeros_like(ins[p][0])
            b[:, 0:33] = ins[p][0][:, 1:34]
            outs.append([b])
        return outs

    return Case("local_copy", k, expect)


def cases() -> list[Case]:
    return [
        ring_shift_case(256, 128, 64, np.float16),
        ring_shift_case(128, 96, 32, BF16),
        allgather_case(256, 128, 64, np.float32),
        allgather_case(512, 384, 128, BF16),
        signal_case(np.float32),
        signal_case(np.float16),
        index_math_case(),
        local_copy_case(),
        barrier_case(np.float32, 128, iters=50),  # repeated: the grid barrier under stress
        barrier_case(np.float16, 1, iters=5),
        ring_shift_case(8192, 8192, 64, np.float16, iters=20),  # 128 MiB per PE
        allgather_case(8192, 4096, 16, BF16, iters=20),  # 64 MiB per PE, 128 KiB tiles
    ]


def _write_case(work: Path, case: Case, cubin: Path) -> None:
    d = work / case.name
    d.mkdir(parents=True, exist_ok=True)
    m = generate_cuda(case.kernel)
    pe_map = [NPES - 1 - k for k in range(NPES)]  # kernel PE k -> NVSHMEM PE npes-1-k
    spec = [
        f"cubin {cubin}",
        f"entry {m.entry}",
        "grid " + " ".join(map(str, m.grid)),
        f"threads {m.threads}",
        f"smem {m.smem_bytes}",
        f"scratch {m.scratch_bytes}",
        f"iters {case.iters}",
        f"nvshmem {int(m.uses_nvshmem)}",
        "pe_map " + " ".join(map(str, pe_map)),
        *(f"in {b.nbytes}" for b in case.kernel.inputs),
        *(f"out {b.nbytes}" for b in case.kernel.outputs),
    ]
    (d / "spec.txt").write_text("\n".join(spec) + "\n")
    case.inputs = [_inputs(case.kernel, pe) for pe in range(NPES)]
    for kpe in range(NPES):
        rank = pe_map[kpe]
        for i, arr in enumerate(case.inputs[kpe]):
            (d / f"in{i}.r{rank}.bin").write_bytes(np.ascontiguousarray(arr).tobytes())


def _check(work: Path, case: Case) -> str:
    pe_map = [NPES - 1 - k for k in range(NPES)]
    want = case.expect(case.inputs)
    problems = []
    for kpe in range(NPES):
        for j, buf in enumerate(case.kernel.outputs):
            raw = (work / case.name / f"out{j}.r{pe_map[kpe]}.bin").read_bytes()
            got = np.frombuffer(raw, dtype=buf.dtype).reshape(buf.shape)
            exp = np.asarray(want[kpe][j]).astype(buf.dtype)
            if not np.array_equal(got.view(np.uint8), exp.view(np.uint8)):
                bad = np.argwhere(got.view(np.uint8).reshape(-1) != exp.view(np.uint8).reshape(-1))
                problems.append(f"PE {kpe} out{j}: {len(bad)} bytes differ, first at byte {bad[0][0]}")
    return "; ".join(problems) or "ok"


def _harness(work: Path) -> Path:
    shm = find_nvshmem()
    exe = work / "harness"
    # NVSHMEM's initialisation lives partly in the static device library (it sets up the
    # calling module's device state), so the harness is an -rdc CUDA program like any NVSHMEM app.
    cmd = [
        str(find_nvcc().path),
        "-std=c++17",
        "-O2",
        "-rdc=true",
        "-arch=sm_90",
        "-o",
        str(exe),
        str(Path(__file__).with_name("harness.cu")),
        "-I",
        str(shm.include),
        "-L",
        str(shm.lib),
        "-lnvshmem_device",
        "-Xlinker",
        "--no-as-needed",
        "-Xlinker",
        str(shm.lib / "libnvshmem_host.so.3"),
        "-lcuda",
    ]
    subprocess.run(cmd, check=True)
    return exe


def _run_harness(exe: Path, work: Path, names: list[str], nranks: int, timeout: int = 300) -> list[str]:
    env = dict(
        os.environ,
        NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME="lo",
        NVSHMEM_DISABLE_NVLS="1",
        NCCL_NVLS_ENABLE="0",
        NVSHMEM_SYMMETRIC_SIZE="4G",
    )
    env["LD_LIBRARY_PATH"] = f"{find_nvshmem().lib}:{env.get('LD_LIBRARY_PATH', '')}"
    (work / "uid.bin").unlink(missing_ok=True)
    procs = [
        subprocess.Popen(
            [str(exe), str(r), str(nranks), str(work), *names],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(nranks)
    ]
    logs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n(timed out)"
        logs.append(f"rc={p.returncode}\n{out}")
    return logs


def trap_check(exe: Path, work: Path) -> str:
    """A PE outside the PE space stops the kernel with a message naming the line (1 PE job)."""
    from jax_tilescale import language as T

    def kernel(a, b):
        bx = T.program_id(0)
        T.putmem_nbi_block(b[T.ds(bx, 1), :], a[T.ds(bx, 1), :], pe=(T.get_pe() + bx * 3) % 7)

    k = kernels.build(
        kernel, name="bad_pe", inputs=[((2, 8), np.float32)], outputs=[((2, 8), np.float32)], grid=(2,), num_pes=1
    )
    m = generate_cuda(k)
    cubin = compile_cubin(m.source, entry=m.entry)
    d = work / "bad_pe"
    d.mkdir(exist_ok=True)
    (d / "spec.txt").write_text(
        f"cubin {cubin}\nentry {m.entry}\ngrid 2 1 1\nthreads 128\nsmem 0\nscratch 0\n"
        f"nvshmem 1\npe_map 0\nin 64\nout 64\n"
    )
    (d / "in0.r0.bin").write_bytes(np.zeros((2, 8), np.float32).tobytes())
    log = _run_harness(exe, work, ["bad_pe"], 1, timeout=120)[0]
    line = f"{k.body[0].loc}"
    ok = "rc=0" not in log and line in log and "value 3, limit 1" in log
    return ("ok" if ok else "MISSING MESSAGE") + " | " + " ".join(log.split())[:600]


def main() -> int:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="ts_smoke-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TILESCALE_CACHE_DIR", str(work / "cache"))
    all_cases = cases()
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        mods = [generate_cuda(c.kernel) for c in all_cases]
        cubins = list(pool.map(lambda m: compile_cubin(m.source, entry=m.entry, nvshmem=m.uses_nvshmem), mods))
        exe_future = pool.submit(_harness, work)
        exe = exe_future.result()
    print(f"compiled {len(all_cases)} kernels and the harness in {time.time() - t0:.1f} s", flush=True)
    for c, cubin in zip(all_cases, cubins):
        _write_case(work, c, cubin)
    logs = _run_harness(exe, work, [c.name for c in all_cases], NPES)
    failed = False
    for r, log in enumerate(logs):
        print(f"--- rank {r}: {log}")
        failed |= not log.startswith("rc=0")
    times = {}
    for line in logs[0].splitlines():
        if " case " in line and " ran: " in line:
            times[line.split(" case ")[1].split()[0]] = float(line.split(" ran: ")[1].split()[0])
    print(f"{'case':40s} {'result':10s} {'ms':>9s} {'GB/s':>8s}")
    for c in all_cases:
        res = _check(work, c) if c.name in times else "not run"
        failed |= res != "ok"
        ms = times.get(c.name, float("nan"))
        bw = c.moved_bytes / (ms * 1e6) if c.moved_bytes and ms > 0 else float("nan")
        print(f"{c.name:40s} {res:10s} {ms:9.3f} {bw:8.1f}")
    trap = trap_check(exe, work)
    print(f"{'bad_pe (trap with message)':40s} {trap}")
    failed |= not trap.startswith("ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
