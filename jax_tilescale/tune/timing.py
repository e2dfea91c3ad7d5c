"""How the autotuner times its candidates on the device: each candidate's call in a jitted loop, so that neither
JAX's dispatch from Python (~40 us a call on the H200 machine) nor a wake-up after `block_until_ready` is part of
what a figure measures, in interleaved rounds after a heat of the same loop (benchmarks/bench_gemm.py's method,
whose reasons benchmarks/NOTES.md gives: an H200 under its power cap runs a kernel at the clock its energy per
FLOP allows, so a runner timed in the cool-down of the one before it is flattered by up to ~15%).

Every call's whole result is carried through the loop, and one element of it added into a sum the loop returns:
where XLA finishes a candidate's result after the kernel (a split-K sum of partials), taking one element only
would let XLA compute that element alone (benchmarks/NOTES.md, twenty-seventh session).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import jax.numpy as jnp


class Timer(Protocol):
    """Seconds per call of each runner, one figure per round: {label: [seconds, ...]}."""

    def __call__(self, runners: Mapping[str, Callable[..., Any]], args: Sequence[Any]) -> dict[str, list[float]]: ...


def _first_elements(out: Any) -> jax.Array:
    """The sum of each output array's first element, in float32: what the loop adds up."""
    return sum((leaf.ravel()[0].astype(jnp.float32) for leaf in jax.tree.leaves(out) if leaf.size), jnp.float32(0))


def looped(fn: Callable[..., Any], unroll: int = 1) -> Callable[..., Any]:
    """A function of (reps, *args) that calls `fn(*args)` `reps` x `unroll` times in one jitted loop (reps traced: one
    compilation for every count; `unroll` calls an iteration, so that the loop's own cost per iteration, paced by the
    host on a GPU, is shared by several calls) and returns (the sum of each call's first elements, the last
    iteration's whole results). The calls of an iteration take the same arrays through distinct parameters, so that
    XLA cannot tell them equal and merge them (benchmarks/bench_gemm.py's graph form found it would)."""
    if unroll < 1:
        raise ValueError(f"unroll must be at least 1, not {unroll}")

    def body(reps: jax.Array, *groups: Any) -> Any:
        n = len(groups) // unroll
        calls = [groups[u * n:(u + 1) * n] for u in range(unroll)]
        shapes = jax.eval_shape(fn, *calls[0])
        kept = tuple(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes) for _ in range(unroll))

        def step(_: jax.Array, carry: Any) -> Any:
            total, outs = carry[0], []
            for args in calls:
                out = fn(*args)
                total = total + _first_elements(out)
                outs.append(out)
            return total, tuple(outs)

        return jax.lax.fori_loop(0, reps, step, (jnp.float32(0), kept))

    jitted = jax.jit(body)

    def run(reps: jax.Array, *args: Any) -> Any:
        return jitted(reps, *(tuple(args) * unroll))

    run.jitted = jitted  # type: ignore[attr-defined]  # for tests: the compiled loop keeps `unroll` calls
    return run


@dataclass(frozen=True)
class LoopTimer:
    """The default Timer (module doc): `rounds` interleaved rounds; in each, every runner's loop runs untimed for
    `heat_s` seconds and then once timed, with as many iterations of `unroll` calls (at most `max_reps`) as make the
    timed run last `min_run_s`."""

    rounds: int = 3
    heat_s: float = 0.2
    min_run_s: float = 0.01
    max_reps: int = 2000
    unroll: int = 4  # calls per iteration of the loop (looped)

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.max_reps < 1 or self.heat_s < 0 or self.min_run_s <= 0 or self.unroll < 1:
            raise ValueError(f"LoopTimer needs rounds >= 1, max_reps >= 1, heat_s >= 0, min_run_s > 0 and unroll >= 1: "
                             f"{self}")

    def __call__(self, runners: Mapping[str, Callable[..., Any]], args: Sequence[Any]) -> dict[str, list[float]]:
        loops = {label: looped(fn, self.unroll) for label, fn in runners.items()}
        reps = {label: self.reps_for(loop, args) for label, loop in loops.items()}
        times: dict[str, list[float]] = {label: [] for label in loops}
        for _ in range(self.rounds):
            for label, loop in loops.items():
                count = jnp.int32(reps[label])
                until = time.perf_counter() + self.heat_s
                while time.perf_counter() < until:
                    jax.block_until_ready(loop(count, *args))
                t0 = time.perf_counter()
                jax.block_until_ready(loop(count, *args))
                times[label].append((time.perf_counter() - t0) / (reps[label] * self.unroll))
        return times

    def reps_for(self, loop: Callable[..., Any], args: Sequence[Any]) -> int:
        """Iterations per timed run: enough for `min_run_s` by one timed iteration (after one that compiles)."""
        one = jnp.int32(1)
        jax.block_until_ready(loop(one, *args))
        t0 = time.perf_counter()
        jax.block_until_ready(loop(one, *args))
        per_iteration = max(time.perf_counter() - t0, 1e-7)
        return max(1, min(self.max_reps, math.ceil(self.min_run_s / per_iteration)))
