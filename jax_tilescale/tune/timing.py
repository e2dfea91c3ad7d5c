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
    return sum((leaf.ravel()[0].astype(jnp.float32) for leaf in jax.tree.leaves(out)), jnp.float32(0))


def looped(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A jitted function of (reps, *args) that calls `fn(*args)` `reps` times (reps traced: one compilation for
    every count) and returns (the sum of each call's first elements, the last call's whole result)."""

    def body(reps: jax.Array, *args: Any) -> Any:
        shapes = jax.eval_shape(fn, *args)
        kept = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        def step(_: jax.Array, carry: Any) -> Any:
            out = fn(*args)
            return carry[0] + _first_elements(out), out

        return jax.lax.fori_loop(0, reps, step, (jnp.float32(0), kept))

    return jax.jit(body)


@dataclass(frozen=True)
class LoopTimer:
    """The default Timer (module doc): `rounds` interleaved rounds; in each, every runner's loop runs untimed for
    `heat_s` seconds and then once timed, with as many calls (at most `max_reps`) as make the timed run last
    `min_run_s`."""

    rounds: int = 3
    heat_s: float = 0.2
    min_run_s: float = 0.01
    max_reps: int = 2000

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.max_reps < 1 or self.heat_s < 0 or self.min_run_s <= 0:
            raise ValueError(f"LoopTimer needs rounds >= 1, max_reps >= 1, heat_s >= 0 and min_run_s > 0: {self}")

    def __call__(self, runners: Mapping[str, Callable[..., Any]], args: Sequence[Any]) -> dict[str, list[float]]:
        loops = {label: looped(fn) for label, fn in runners.items()}
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
                times[label].append((time.perf_counter() - t0) / reps[label])
        return times

    def reps_for(self, loop: Callable[..., Any], args: Sequence[Any]) -> int:
        """Calls per timed run: enough for `min_run_s` by one timed call (after one that compiles)."""
        one = jnp.int32(1)
        jax.block_until_ready(loop(one, *args))
        t0 = time.perf_counter()
        jax.block_until_ready(loop(one, *args))
        per_call = max(time.perf_counter() - t0, 1e-7)
        return max(1, min(self.max_reps, math.ceil(self.min_run_s / per_call)))
