"""Where examples and tests run: GPUs (one per process) or simulated CPU devices, and the mesh an
example asks for (built from the devices there are, or refused with what it needs)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import LaunchError

if TYPE_CHECKING:
    import jax

_FLAG = "--xla_force_host_platform_device_count"
DEFAULT_CPU_DEVICES = 4  # simulated CPU devices when there is no GPU (setup's default)


@dataclass(frozen=True)
class Platform:
    kind: str  # "gpu" or "cpu"
    num_devices: int  # global devices (PEs)
    process_index: int
    process_count: int

    @property
    def is_lead(self) -> bool:
        return self.process_index == 0

    def describe(self, used: int | None = None) -> str:
        """What runs the kernels, e.g. "1 of 4 simulated CPU devices (...)": `used` devices of this platform."""
        used = self.num_devices if used is None else used
        count = f"{used} of {self.num_devices}" if used != self.num_devices else f"{used}"
        if self.kind == "cpu":
            devices = "simulated CPU device" + ("s" if self.num_devices > 1 else "")
            return f"{count} {devices}, kernels run by the jax_tilescale interpreter (no GPU)"
        gpus = "GPU" + ("s" if self.num_devices > 1 else "")
        if os.environ.get("TILESCALE_PES_SHARE_GPU") == "1":  # tools/gpu_test.sh: PEs sharing a GPU under MPS
            return (f"{count} GPU devices of {self.process_count} processes sharing one GPU (MPS), kernels compiled "
                    "to CUDA")
        return f"{count} {gpus}, one per process ({self.process_count} processes), kernels compiled to CUDA"


def request_cpu_devices(n: int, replace: bool = False) -> None:
    """Asks for `n` simulated CPU devices through XLA_FLAGS; effective only before JAX starts its
    backends. A count already in XLA_FLAGS stays unless `replace`."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _FLAG in flags:
        if not replace:
            return
        flags = re.sub(rf"{_FLAG}=\S*", "", flags)
    os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={n}".strip()


def setup(cpu_devices: int = DEFAULT_CPU_DEVICES, replace: bool = False) -> Platform:
    """GPU if there is one (one per process, else a LaunchError that says how to launch); else
    `cpu_devices` simulated CPU devices (a count already in XLA_FLAGS wins unless `replace`).

    Raises LaunchError if the launcher's RANK / WORLD_SIZE disagree with jax.distributed.
    """
    request_cpu_devices(cpu_devices, replace)
    import jax

    from .runtime.distributed import check_launch_env

    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    check_launch_env()  # a launcher's RANK / WORLD_SIZE must agree with jax.distributed
    if gpus:
        if len(jax.local_devices()) > 1:
            raise LaunchError(
                f"this process holds {len(jax.local_devices())} GPUs, but NVSHMEM runs one process per GPU; "
                f"launch with: python -m jax_tilescale.launch -n {len(jax.local_devices())} <script.py> [args]"
            )
        return Platform("gpu", len(gpus), jax.process_index(), jax.process_count())
    return Platform("cpu", len(jax.devices()), jax.process_index(), jax.process_count())


# --- meshes an example asks for ------------------------------------------------------------------
class MeshUnavailable(LaunchError):
    """The devices of this run do not make the mesh an example needs (the message says what it needs)."""


@dataclass(frozen=True)
class MeshPlan:
    """A mesh an example asks for: its axis names, and the axis sizes that a number of devices gives
    (None: that number does not fit; `needs` then says what would)."""

    axes: tuple[str, ...]
    needs: str  # e.g. "at least 2 devices"
    sizes: Callable[[int], tuple[int, ...] | None]

    def shape(self, num_devices: int) -> tuple[int, ...]:
        """The axis sizes for `num_devices` devices; MeshUnavailable when they do not fit."""
        sizes = self.sizes(num_devices)
        if sizes is None:
            raise MeshUnavailable(f"needs {self.needs}; this run has {num_devices}")
        return sizes

    def make(self, devices: Sequence[jax.Device]) -> jax.sharding.Mesh:
        """The mesh over all of `devices` (in order); MeshUnavailable when their number does not fit."""
        import jax

        sizes = self.shape(len(devices))
        return jax.make_mesh(sizes, self.axes, devices=list(devices)[: math.prod(sizes)])


def line(min_devices: int = 2, axis: str = "x") -> MeshPlan:
    """Every device along one axis; at least `min_devices` of them."""
    needs = f"at least {min_devices} device{'s' if min_devices > 1 else ''}"
    return MeshPlan((axis,), needs, lambda n: (n,) if n >= min_devices else None)


def square(axes: tuple[str, str] = ("r", "c")) -> MeshPlan:
    """A p x p mesh with p >= 2: a square number of devices, at least 4."""

    def sizes(n: int) -> tuple[int, int] | None:
        p = math.isqrt(n)
        return (p, p) if p >= 2 and p * p == n else None

    return MeshPlan(axes, "a square number of devices, at least 4 (a p x p mesh, p >= 2)", sizes)


def rows(num_rows: int = 2, axes: tuple[str, str] = ("x", "y"), min_per_row: int = 2) -> MeshPlan:
    """`num_rows` x (devices / num_rows), each row at least `min_per_row` devices."""
    least = num_rows * min_per_row
    return MeshPlan(
        axes,
        f"a multiple of {num_rows} devices, at least {least} ({num_rows} rows of at least {min_per_row})",
        lambda n: (num_rows, n // num_rows) if n % num_rows == 0 and n >= least else None,
    )
