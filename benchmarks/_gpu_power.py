"""The GPU's SM clock and power while a benchmark's runner runs (NVML through ctypes: the driver's
libnvidia-ml.so.1, no Python package needed). An H200 doing GEMMs holds its 700 W cap within half a
second, and then a kernel's speed is its energy per product: the clock says whether a runner that is
slower ran at a lower clock (more energy per cycle of work) or at the same clock (more cycles).

Power is read as NVML's instantaneous field (`NVML_FI_DEV_POWER_INSTANT`) where the driver has it: the
plain `nvmlDeviceGetPowerUsage` averages over about a second on recent GPUs, longer than one runner's
turn. Used by `bench_gemm.py --power`.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time
from dataclasses import dataclass

NVML_CLOCK_SM = 1  # nvmlClockType_t
NVML_FI_DEV_POWER_INSTANT = 186  # nvmlFieldValue_t field id (nvml.h)
NVML_VALUE_TYPE_UNSIGNED_INT = 1


class _FieldValue(ctypes.Structure):  # nvmlFieldValue_t
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]


class Nvml:
    """One GPU's SM clock (MHz) and power (W). Raises OSError where there is no NVIDIA driver."""

    def __init__(self, index: int = 0):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check("nvmlInit_v2", self.lib.nvmlInit_v2())
        self.handle = ctypes.c_void_p()
        self._check("nvmlDeviceGetHandleByIndex_v2",
                    self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)))
        self.instant = self._instant_watts() is not None

    @staticmethod
    def _check(call: str, rc: int) -> None:
        if rc != 0:
            raise OSError(f"{call} failed (nvmlReturn_t {rc})")

    def _instant_watts(self) -> float | None:
        field = _FieldValue(fieldId=NVML_FI_DEV_POWER_INSTANT)
        rc = self.lib.nvmlDeviceGetFieldValues(self.handle, 1, ctypes.byref(field))
        if rc != 0 or field.nvmlReturn != 0 or field.valueType != NVML_VALUE_TYPE_UNSIGNED_INT:
            return None
        return (field.value & 0xFFFFFFFF) / 1e3  # milliwatts in the union's unsigned-int member (its low 4 bytes)

    def sample(self) -> tuple[float, float]:
        """(SM clock in MHz, power in W) now."""
        mhz, mw = ctypes.c_uint(), ctypes.c_uint()
        self._check("nvmlDeviceGetClockInfo", self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM,
                                                                               ctypes.byref(mhz)))
        watts = self._instant_watts() if self.instant else None
        if watts is None:
            self._check("nvmlDeviceGetPowerUsage", self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw)))
            watts = mw.value / 1e3
        return float(mhz.value), watts


@dataclass(frozen=True)
class Reading:
    """Medians of the samples taken while one runner ran."""

    sm_mhz: float
    watts: float
    samples: int


class Sampler:
    """Samples `nvml` every `period_s` on a thread between `start()` and `stop()`; `stop()` gives the medians.
    (block_until_ready releases the GIL, so the thread samples while the runner waits on the GPU.)"""

    def __init__(self, nvml: Nvml, period_s: float = 0.01):
        self.nvml, self.period_s = nvml, period_s
        self._samples: list[tuple[float, float]] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._samples, self._done = [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            self._samples.append(self.nvml.sample())
            time.sleep(self.period_s)

    def stop(self) -> Reading | None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if not self._samples:
            return None
        return Reading(statistics.median(s[0] for s in self._samples),
                       statistics.median(s[1] for s in self._samples), len(self._samples))


def open_nvml() -> Nvml | None:
    """NVML on GPU 0, or None where there is no NVIDIA driver (a CPU run)."""
    try:
        return Nvml(0)
    except (OSError, AttributeError):
        return None
