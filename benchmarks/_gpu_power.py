"""The GPU's SM clock and power while a benchmark's runner runs (NVML through ctypes: the driver's
libnvidia-ml.so.1, no Python package needed). An H200 doing GEMMs holds its 700 W cap within half a
second, and then a kernel's speed is its energy per product: the clock says whether a runner that is
slower ran at a lower clock (more energy per cycle of work) or at the same clock (more cycles).

Power is read two ways. NVML's instantaneous field (`NVML_FI_DEV_POWER_INSTANT`, where the driver has it; the
plain `nvmlDeviceGetPowerUsage` averages over about a second on recent GPUs, longer than one runner's turn), whose
median over a window is a sample of a noisy signal (an H100's XLA loop once read 758 W against its 700 W limit); and
the energy counter (`NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, mJ since the driver loaded), whose rise between the first
and the last of its updates seen in a window, over the time between them, is the window's mean power. The counter
moves every 100 ms on an H100 (driver 580; `Reading.counter_period_s` says how often), so a window needs several
updates: the bench's default one (half a 0.5 s heat and the timed run, ~0.27 s) sees two or three and its figure is
off by up to ~10%; `--heat 2` (windows of ~1 s, ten updates) brought the two readings within 2% of each other
(benchmarks/NOTES.md, forty-first session). Used by `bench_gemm.py --power`.
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time
from dataclasses import dataclass

NVML_CLOCK_SM = 1  # nvmlClockType_t
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83  # nvmlFieldValue_t field ids (nvml.h)
NVML_FI_DEV_POWER_INSTANT = 186
NVML_VALUE_TYPE_UNSIGNED_INT = 1  # nvmlValueType_t
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
MIN_COUNTER_UPDATES = 3  # updates of the energy counter a window needs for a mean power (two intervals at least)


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
        self.counter = self.energy_mj() is not None

    @staticmethod
    def _check(call: str, rc: int) -> None:
        if rc != 0:
            raise OSError(f"{call} failed (nvmlReturn_t {rc})")

    def _field(self, field_id: int, value_type: int) -> int | None:
        """One field's raw value, or None where the driver does not give it in that type."""
        field = _FieldValue(fieldId=field_id)
        rc = self.lib.nvmlDeviceGetFieldValues(self.handle, 1, ctypes.byref(field))
        if rc != 0 or field.nvmlReturn != 0 or field.valueType != value_type:
            return None
        return field.value

    def _instant_watts(self) -> float | None:
        value = self._field(NVML_FI_DEV_POWER_INSTANT, NVML_VALUE_TYPE_UNSIGNED_INT)
        return None if value is None else (value & 0xFFFFFFFF) / 1e3  # mW in the union's low 4 bytes

    def energy_mj(self) -> int | None:
        """The energy counter: mJ since the driver loaded, or None where the GPU has none."""
        return self._field(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG)

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
    """Medians of the samples taken while one runner ran, and the mean power the energy counter gives for the same
    window (None where the GPU has no counter or it updated fewer than MIN_COUNTER_UPDATES times)."""

    sm_mhz: float
    watts: float
    samples: int
    counter_watts: float | None = None
    counter_period_s: float | None = None  # the median time between the counter's updates


class Sampler:
    """Samples `nvml` every `period_s` on a thread between `start()` and `stop()`; `stop()` gives the medians, and
    the energy counter's mean power where `nvml` has one (`counter` true): each update is stamped with the time it
    was first seen, so the figure's error is about two sampling periods over the window's span of updates.
    (block_until_ready releases the GIL, so the thread samples while the runner waits on the GPU.)"""

    def __init__(self, nvml: Nvml, period_s: float = 0.01):
        self.nvml, self.period_s = nvml, period_s
        self._samples: list[tuple[float, float]] = []
        self._updates: list[tuple[float, int]] = []  # (perf_counter seconds, mJ) where the counter was seen to move
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._samples, self._updates, self._done = [], [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        counter = getattr(self.nvml, "counter", False)
        last = None
        while not self._done.is_set():
            self._samples.append(self.nvml.sample())
            if counter and (mj := self.nvml.energy_mj()) is not None and mj != last:
                if last is not None:  # the first reading is not an update: the counter may have moved long before
                    self._updates.append((time.perf_counter(), mj))
                last = mj
            time.sleep(self.period_s)

    def stop(self) -> Reading | None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if not self._samples:
            return None
        counter_watts = counter_period = None
        if len(self._updates) >= MIN_COUNTER_UPDATES:
            (t0, e0), (t1, e1) = self._updates[0], self._updates[-1]
            counter_watts = (e1 - e0) / 1e3 / (t1 - t0)
            counter_period = statistics.median(b[0] - a[0] for a, b in zip(self._updates, self._updates[1:]))
        return Reading(statistics.median(s[0] for s in self._samples),
                       statistics.median(s[1] for s in self._samples), len(self._samples), counter_watts,
                       counter_period)


def open_nvml() -> Nvml | None:
    """NVML on GPU 0, or None where there is no NVIDIA driver (a CPU run)."""
    try:
        return Nvml(0)
    except (OSError, AttributeError):
        return None
