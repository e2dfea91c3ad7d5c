"""Choosing where examples and tests run: GPUs (one per process) or simulated CPU devices."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import LaunchError

_FLAG = "--xla_force_host_platform_device_count"


@dataclass(frozen=True)
class Platform:
    kind: str  # "gpu" or "cpu"
    num_devices: int  # global devices (PEs)
    process_index: int
    process_count: int

    @property
    def is_lead(self) -> bool:
        return self.process_index == 0

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"no GPU: running on {self.num_devices} simulated CPU devices through the jax_tilescale interpreter"
        return f"{self.num_devices} GPUs, one per process ({self.process_count} processes), kernels compiled to CUDA"


def request_cpu_devices(n: int) -> None:
    """Asks for `n` simulated CPU devices; effective only before JAX starts its backends."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={n}".strip()


def setup(cpu_devices: int = 4) -> Platform:
    """GPU if there is one (one per process, else a LaunchError that says how to launch); else CPU.

    Raises LaunchError if the launcher's RANK / WORLD_SIZE disagree with jax.distributed.
    """
    request_cpu_devices(cpu_devices)
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
