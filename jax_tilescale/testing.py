"""Checking kernel results against JAX references, across processes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import numpy as np

if TYPE_CHECKING:
    from .platform import Platform


def local_shards(x: jax.Array) -> list[np.ndarray]:
    """This process's shards of `x`, as float64 numpy arrays, in device order."""
    shards = sorted(x.addressable_shards, key=lambda s: s.device.id)
    return [np.asarray(s.data).astype(np.float64) for s in shards]


def allclose(got: Any, want: Any, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Element-wise comparison of every local shard (exact by default: data movement is exact).

    NaN never passes, so a poisoned, unwritten output element is caught.
    """
    ok = True
    for g, w in zip(local_shards(got), local_shards(want)):
        ok &= g.shape == w.shape and bool(np.all(np.abs(g - w) <= atol + rtol * np.abs(w)))
    return ok


def report(name: str, platform: Platform, verdicts: dict[str, bool]) -> None:
    """The end of every example: the lead process says where it ran and what it verified; any
    failed check makes the process exit non-zero (so the launcher and CI see it)."""
    if platform.is_lead:
        print(f"{name}: {platform.describe()}")
        for what, ok in verdicts.items():
            print(f"{name}: {what}: {ok}")
    if not all(verdicts.values()):
        raise SystemExit(1)
