"""cuBLAS through torch for `bench_gemm.py`: torch when the image has it with a GPU, the bench's operands as
torch tensors, and the loop (one CUDA graph of the products) and calls runners timed beside XLA's and ours.
Kept apart so that the bench runs, and its tests import, where torch is missing."""

from __future__ import annotations

import time

import jax.numpy as jnp


def torch_cuda():
    """torch when it is importable and sees a GPU (the image may lack it), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_operands(torch, a, b) -> tuple:
    """The bf16 jax arrays `a` and `b` as bf16 torch tensors on the GPU (the same values)."""
    import numpy as np

    return tuple(torch.from_numpy(np.asarray(x.astype(jnp.float32))).to("cuda", torch.bfloat16) for x in (a, b))


def cuda_graph_of(torch, body):
    """`body` (torch work on the GPU) recorded as one CUDA graph after a warm-up run on a side stream (torch's
    recipe: cuBLAS picks its kernel and workspace outside the capture), or None, with a note, where torch cannot
    record it: the caller then runs `body` eagerly."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):
            body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
    except RuntimeError as e:  # capture refused: time the eager loop, and say so
        print(f"cuBLAS's loop not recorded as a CUDA graph ({e}); timed as eager calls from Python", flush=True)
        torch.cuda.synchronize()
        return None
    torch.cuda.synchronize()
    return graph


def cublas_runners(torch, a, b, reps: int, fp8: tuple | None = None, cold: int = 0) -> dict:
    """(loop, calls) runners of cuBLAS through torch on the same data: `reps` products, each
    reduced to one element and recorded as one CUDA graph (loop) or kept whole, eager calls (calls).
    `fp8`: (a8, b8, sa, sb) numpy arrays for torch._scaled_mm (B passed column-major, as it requires),
    bf16 output. `cold` (bf16 only): also a graph runner whose products read `cold` copies of the operands in turn
    (bench_gemm's `--cold`)."""
    import numpy as np

    if fp8 is None:
        ta, tb = torch_operands(torch, a, b)

        def product():
            return torch.matmul(ta, tb)
    else:
        a8, b8, sa, sb = fp8
        ta = torch.from_numpy(a8.view(np.uint8)).to("cuda").view(torch.float8_e4m3fn)
        tb = torch.from_numpy(b8.view(np.uint8)).to("cuda").view(torch.float8_e4m3fn).t()  # K x N, column-major
        tsa, tsb = torch.from_numpy(sa).to("cuda").reshape(()), torch.from_numpy(sb).to("cuda").reshape(())

        def product():
            return torch._scaled_mm(ta, tb, scale_a=tsa, scale_b=tsb, out_dtype=torch.bfloat16)

    acc = torch.zeros((), device="cuda")

    def body():
        for _ in range(reps):
            acc.add_(product()[0, 0].float())

    runners = {}
    if cold:
        if fp8 is not None:
            raise ValueError("cold copies are for the bf16 products")
        copies = [(ta.clone(), tb.clone()) for _ in range(cold)]

        def cold_body():
            for i in range(reps):
                acc.add_(torch.matmul(*copies[i % cold])[0, 0].float())

        runners["graph"] = _replay(torch, cuda_graph_of(torch, cold_body), cold_body)
    # the `reps` iterations recorded as one CUDA graph: the GPU runs them back to back as it runs XLA's jitted
    # loop, where a Python loop of eager calls would time the host's dispatch (torch's loop took 0.057 ms a product
    # at 2048^3 where its kernel takes ~0.027: NOTES, 2026-12-03)
    loop = _replay(torch, cuda_graph_of(torch, body), body)

    def calls(*_):
        t0 = time.perf_counter()
        out = [product() for _ in range(reps)]
        calls.dispatch_s = time.perf_counter() - t0
        torch.cuda.synchronize()
        return jnp.float32(len(out))

    calls.dispatch_s = None
    return {"loop": loop, "calls": calls, **runners}


def _replay(torch, graph, body):
    """A runner that replays `graph` (or runs `body` where it could not be recorded) and waits for the GPU."""
    def run(*_):
        if graph is None:
            body()
        else:
            graph.replay()
        torch.cuda.synchronize()
        return jnp.float32(0)

    return run
