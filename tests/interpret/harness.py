"""Helpers for the interpreter tests: build a kernel, run one launch on N Python threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from jax_tilescale.interpret import InterpreterSession, InterpretOptions
from jax_tilescale.ir import KernelIR, verify_kernel
from jax_tilescale.ir.nodes import Stmt
from jax_tilescale.language.tracing import trace_kernel

JOIN_TIMEOUT_S = 20.0


def build(
    fn: Callable[..., None],
    *,
    inputs: Sequence[tuple[tuple[int, ...], object]],
    outputs: Sequence[tuple[tuple[int, ...], object]],
    grid: tuple[int, ...],
    num_pes: int,
) -> KernelIR:
    kernel = trace_kernel(
        fn, name=fn.__name__, inputs=inputs, outputs=outputs, grid=grid, threads=128, mesh_axes=("x",),
        num_pes=num_pes,
    )
    return verify_kernel(kernel)


def session(kernel: KernelIR, **options: object) -> InterpreterSession:
    return InterpreterSession(kernel, InterpretOptions(**options))


@dataclass
class Launch:
    outputs: list[list[np.ndarray] | None]
    errors: list[BaseException | None]
    elapsed_s: float

    def check(self) -> list[list[np.ndarray]]:
        """The outputs of every PE; re-raises the first PE's error if any failed."""
        for err in self.errors:
            if err is not None:
                raise err
        return self.outputs  # type: ignore[return-value]


def launch(
    sess: InterpreterSession, per_pe_inputs: Sequence[Sequence[np.ndarray]], team: object = 0,
    pes: Sequence[int] | None = None,
) -> Launch:
    """Calls `sess.run(pe, team, inputs)` for each PE on its own thread, as JAX's callbacks do."""
    pes = list(range(len(per_pe_inputs))) if pes is None else list(pes)
    n = len(per_pe_inputs)
    outputs: list[list[np.ndarray] | None] = [None] * n
    errors: list[BaseException | None] = [None] * n

    def body(pe: int) -> None:
        try:
            outputs[pe] = sess.run(pe, team, list(per_pe_inputs[pe]))
        except BaseException as err:
            errors[pe] = err

    threads = [threading.Thread(target=body, args=(pe,), daemon=True) for pe in pes]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
        assert not t.is_alive(), "a PE's run did not return: the interpreter hung"
    return Launch(outputs, errors, time.monotonic() - start)


def run(sess: InterpreterSession, per_pe_inputs: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    return launch(sess, per_pe_inputs).check()


def random_inputs(
    rng: np.random.Generator, npes: int, shape: tuple[int, ...], dtype: object = np.float32
) -> np.ndarray:
    """[npes, *shape] random values, none of them zero (zeros could hide an unwritten element)."""
    x = rng.standard_normal((npes, *shape))
    x = np.where(np.abs(x) < 0.1, x + 0.5, x)
    if np.dtype(dtype).kind in "iu":
        return (rng.integers(1, 1000, (npes, *shape))).astype(dtype)
    return x.astype(dtype)


def stmt_loc(kernel: KernelIR, stmt_type: type, nth: int = 0) -> str:
    """The source location ("file:line") of the nth statement of a type, as errors print it."""
    stmts: list[Stmt] = [s for s in kernel.body if isinstance(s, stmt_type)]
    return str(stmts[nth].loc)
