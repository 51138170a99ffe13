"""Device telemetry from NVML over a measured interval: energy, power, device-level memory, and
the SM clock, temperature and clock event (throttle) reasons.

The allocator's peak (torch.cuda.max_memory_*) counts only what one process's caching allocator
handed out; NVML's used memory is what the GPU has in use (CUDA context, NCCL buffers, other
allocators included), which is what a GPU is sized by. A background thread samples the GPU
every ~100 ms between `start()` and `stop()`; energy comes from the driver's own counter. The
clocks, temperature and reasons of the same samples tell a figure measured on a GPU slowed by
its power cap, its temperature or a hardware slowdown (kit.throttling says so in its notes).

Host-importable (no torch): the workload harness samples its measured steps, and the serving
driver, on the host side, can sample a burst. NVML is imported lazily (nvidia-ml-py); where it
is missing, the result says why instead of reporting zeros.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from kit.host.clock_events import decode_clock_event_reasons, read_clock_event_mask
from kit.rundir.schema import DeviceTelemetry

SOURCE = "nvml"
SAMPLE_INTERVAL_S = 0.1
# nvmlDeviceGetTotalEnergyConsumption: "total energy consumption for this GPU in millijoules
# (mJ) since the driver was last reloaded", an unsigned long long (NVML API reference,
# Device Queries). A delta across a wrap of that counter is taken modulo 2^64.
ENERGY_COUNTER_MODULUS = 2**64
MILLI = 1e-3


def energy_delta_mj(start_mj: int, end_mj: int) -> int:
    """Millijoules between two readings of the total-energy counter, across a wrap if there was one."""
    return (end_mj - start_mj) % ENERGY_COUNTER_MODULUS


def nvml_uuid(torch_uuid: str) -> str:
    """NVML names a GPU "GPU-<uuid>"; torch's device properties print the bare UUID."""
    text = str(torch_uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


class GpuSample(NamedTuple):
    """One sample of one GPU; a field NVML refused is None (a missed used-memory reading is no sample)."""

    used_bytes: int
    power_mw: int | None = None
    sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    reason_mask: int | None = None


def summarize(
    gpu_index: int | None,
    elapsed_s: float,
    used_bytes: list[int],
    power_mw: list[int],
    energy_start_mj: int | None,
    energy_end_mj: int | None,
    sm_clock_mhz: Sequence[int] = (),
    temperature_c: Sequence[int] = (),
    reason_masks: Sequence[int] = (),
) -> DeviceTelemetry:
    """The telemetry of one interval from its samples. Energy from the counter where the GPU has
    one (Volta and later), and mean power as energy over time; else the mean of the sampled power.
    Each clock event reason is counted in the samples whose mask carried it."""
    energy_j = None
    if energy_start_mj is not None and energy_end_mj is not None:
        energy_j = energy_delta_mj(energy_start_mj, energy_end_mj) * MILLI
    if energy_j is not None and elapsed_s > 0:
        mean_power_w = energy_j / elapsed_s
    elif power_mw:
        mean_power_w = statistics.fmean(power_mw) * MILLI
    else:
        mean_power_w = None
    return DeviceTelemetry(
        source=SOURCE,
        gpu_index=gpu_index,
        energy_j=energy_j,
        mean_power_w=mean_power_w,
        peak_used_bytes=max(used_bytes) if used_bytes else None,
        samples=len(used_bytes),
        sm_clock_mhz_mean=statistics.fmean(sm_clock_mhz) if sm_clock_mhz else None,
        sm_clock_mhz_min=min(sm_clock_mhz) if sm_clock_mhz else None,
        temperature_c_mean=statistics.fmean(temperature_c) if temperature_c else None,
        temperature_c_max=max(temperature_c) if temperature_c else None,
        clock_event_samples=len(reason_masks),
        clock_event_reasons=dict(Counter(name for mask in reason_masks for name in decode_clock_event_reasons(mask))),
    )


def summarize_readings(
    gpu_index: int | None,
    elapsed_s: float,
    readings: Sequence[GpuSample],
    energy_start_mj: int | None,
    energy_end_mj: int | None,
) -> DeviceTelemetry:
    def present(field: str) -> list[int]:
        return [value for value in (getattr(reading, field) for reading in readings) if value is not None]

    return summarize(
        gpu_index,
        elapsed_s,
        present("used_bytes"),
        present("power_mw"),
        energy_start_mj,
        energy_end_mj,
        present("sm_clock_mhz"),
        present("temperature_c"),
        present("reason_mask"),
    )


def unavailable(reason: str) -> DeviceTelemetry:
    return DeviceTelemetry(source=SOURCE, unavailable=reason)


class NoDevice:
    """The sampler of a CPU case: nothing to sample, and the result says so."""

    def start(self) -> None: ...

    def stop(self) -> DeviceTelemetry:
        return unavailable("the case runs on the CPU; NVML measures NVIDIA GPUs only")

    lap = stop


class NvmlSampler:
    """Samples one GPU from `start()` to `stop()`; `stop()` returns what was seen, or why nothing.
    `lap()` returns the interval since the start or the previous lap while sampling goes on (the
    windows of a soak).

    The GPU is named by its UUID (as torch reports it), so the sample is of this process's GPU
    whatever CUDA_VISIBLE_DEVICES renumbered.
    """

    def __init__(self, gpu_uuid: str, interval_s: float = SAMPLE_INTERVAL_S, nvml=None):
        self.gpu_uuid, self.interval_s = nvml_uuid(gpu_uuid), interval_s
        self._nvml, self._handle, self._index = nvml, None, None
        self._initialised_here = False
        self._problem: str | None = None
        self._readings: list[GpuSample] = []
        self._energy_start: int | None = None
        self._lap: tuple[int, int | None, float] = (0, None, 0.0)  # (first reading, energy, time) of the lap
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def start(self) -> None:
        try:
            if self._nvml is None:
                import pynvml  # noqa: PLC0415 - optional on the host side

                pynvml.nvmlInit()
                self._nvml, self._initialised_here = pynvml, True
            self._handle = self._nvml.nvmlDeviceGetHandleByUUID(self.gpu_uuid)
            self._index = self._nvml.nvmlDeviceGetIndex(self._handle)
        except ImportError:
            self._problem = "no NVML: the nvidia-ml-py package is not installed here"
            return
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, NotFound ...
            self._problem = f"no NVML reading of {self.gpu_uuid}: {type(exc).__name__}: {exc}"
            return
        self._energy_start = self._energy()
        self._started = time.monotonic()
        self._lap = (0, self._energy_start, self._started)
        self._sample()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def lap(self) -> DeviceTelemetry:
        """The telemetry since `start()` or the previous lap; sampling goes on."""
        if self._problem is not None:
            return unavailable(self._problem)
        self._sample()
        first, energy_start, started = self._lap
        now, energy_end, readings = (
            time.monotonic(),
            self._energy() if self._energy_start is not None else None,
            self._readings[first:],
        )
        self._lap = (first + len(readings), energy_end, now)
        return summarize_readings(self._index, now - started, readings, energy_start, energy_end)

    def stop(self) -> DeviceTelemetry:
        if self._problem is not None:
            return unavailable(self._problem)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        elapsed = time.monotonic() - self._started
        energy_end = self._energy() if self._energy_start is not None else None
        if self._initialised_here:
            self._nvml.nvmlShutdown()
        return summarize_readings(self._index, elapsed, self._readings, self._energy_start, energy_end)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        nvml, handle = self._nvml, self._handle
        try:
            used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception:  # a missed sample is a smaller count, never a made-up value
            return
        self._readings.append(
            GpuSample(
                used_bytes=used,
                power_mw=self._read(lambda: nvml.nvmlDeviceGetPowerUsage(handle)),
                sm_clock_mhz=self._read(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                temperature_c=self._read(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
                reason_mask=self._read(lambda: read_clock_event_mask(nvml, handle)),
            )
        )

    @staticmethod
    def _read(call) -> int | None:
        try:
            return int(call())
        except Exception:  # a field this GPU or driver does not answer: absent, never made up
            return None

    def _energy(self) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception:  # NVMLError_NotSupported before Volta
            return None


def combine_gpus(seen: Sequence[DeviceTelemetry]) -> DeviceTelemetry:
    """The telemetry of several GPUs over one interval: energy summed, mean power per GPU, the
    largest used memory and temperature, the lowest clock, each reason's samples summed."""
    missing = next((t.unavailable for t in seen if t.unavailable), None)
    if missing:
        return unavailable(missing)
    energies = [t.energy_j for t in seen]
    powers = [t.mean_power_w for t in seen if t.mean_power_w is not None]
    used = [t.peak_used_bytes for t in seen if t.peak_used_bytes is not None]

    def known(field: str) -> list:
        return [getattr(t, field) for t in seen if getattr(t, field) is not None]

    reasons: Counter[str] = Counter()
    for t in seen:
        reasons.update(t.clock_event_reasons)
    return DeviceTelemetry(
        source=SOURCE,
        energy_j=sum(energies) if None not in energies else None,
        mean_power_w=statistics.fmean(powers) if len(powers) == len(seen) else None,
        peak_used_bytes=max(used) if used else None,
        samples=min(t.samples for t in seen),
        sm_clock_mhz_mean=statistics.fmean(known("sm_clock_mhz_mean")) if known("sm_clock_mhz_mean") else None,
        sm_clock_mhz_min=min(known("sm_clock_mhz_min"), default=None),
        temperature_c_mean=statistics.fmean(known("temperature_c_mean")) if known("temperature_c_mean") else None,
        temperature_c_max=max(known("temperature_c_max"), default=None),
        clock_event_samples=sum(t.clock_event_samples for t in seen),
        clock_event_reasons=dict(reasons),
    )


class GpusSampler:
    """Samples the GPUs a serving engine runs on, its first `count` (as a device request or
    CUDA_VISIBLE_DEVICES gives them), over a burst: energy summed over them, mean power per
    GPU, the largest device-level used memory of any (combine_gpus)."""

    def __init__(self, count: int, interval_s: float = SAMPLE_INTERVAL_S, nvml=None):
        self.count, self.interval_s = count, interval_s
        self._samplers: list[NvmlSampler] = []
        self._problem: str | None = None
        self._nvml = nvml

    def start(self) -> None:
        try:
            if self._nvml is None:
                import pynvml  # noqa: PLC0415 - optional on the host side

                self._nvml = pynvml
            self._nvml.nvmlInit()
            nvml = self._nvml
            uuids = [nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(self.count)]
        except ImportError:
            self._problem = "no NVML: the nvidia-ml-py package is not installed here"
            return
        except Exception as exc:  # no driver, fewer GPUs than the case
            self._problem = f"no NVML reading of the engine's {self.count} GPUs: {type(exc).__name__}: {exc}"
            return
        self._samplers = [NvmlSampler(str(uuid), self.interval_s, nvml=self._nvml) for uuid in uuids]
        for sampler in self._samplers:
            sampler.start()

    def stop(self) -> DeviceTelemetry:
        if self._problem is not None:
            return unavailable(self._problem)
        seen = [sampler.stop() for sampler in self._samplers]
        self._nvml.nvmlShutdown()
        return combine_gpus(seen)
