"""Clock event (throttle) reasons, from NVML's bitmask to a case's notes and its cells
(kit/host/clock_events.py, kit/measure/telemetry.py, kit/measure/throttling.py).

The bit values are pynvml's own constants (nvidia-ml-py, which mirrors nvml.h), never typed here;
the recorded H100 host's fingerprint (tests/fixtures/h100x1-run/doctor.json) read ["gpu_idle"] at
rest, the reason a GPU with nothing to do reports."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pynvml
import pytest
from support import FIXTURES

from kit.host.clock_events import CLOCK_EVENT_REASON_BITS, PERFORMANCE_LIMITING_REASONS, decode_clock_event_reasons
from kit.measure.telemetry import NvmlSampler, summarize
from kit.measure.throttling import throttle_notes, throttling
from kit.report.cells import metric_cell
from kit.rundir.schema import Metric, RankSample, RunSample

DOCTOR = FIXTURES / "h100x1-run" / "doctor.json"
# pynvml's name of each reason, as nvml.h's nvmlClocksEventReason* (R535 and later).
PYNVML_NAMES = {
    "gpu_idle": "nvmlClocksEventReasonGpuIdle",
    "applications_clocks_setting": "nvmlClocksEventReasonApplicationsClocksSetting",
    "sw_power_cap": "nvmlClocksEventReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksEventReasonHwSlowdown",
    "sync_boost": "nvmlClocksEventReasonSyncBoost",
    "sw_thermal_slowdown": "nvmlClocksEventReasonSwThermalSlowdown",
    "hw_thermal_slowdown": "nvmlClocksEventReasonHwThermalSlowdown",
    "hw_power_brake_slowdown": "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    "display_clock_setting": "nvmlClocksEventReasonDisplayClockSetting",
}
IDLE, POWER_CAP, HW_SLOWDOWN, THERMAL = (
    getattr(pynvml, PYNVML_NAMES[name]) for name in ("gpu_idle", "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown")
)


def test_each_bit_is_the_one_pynvml_gives_its_reason():
    assert {name: bit for bit, name in CLOCK_EVENT_REASON_BITS.items()} == {
        name: getattr(pynvml, constant) for name, constant in PYNVML_NAMES.items()
    }
    # the pre-R535 names carry the same bits
    assert (
        POWER_CAP == pynvml.nvmlClocksThrottleReasonSwPowerCap
        and THERMAL == pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    )


def test_a_mask_of_pynvml_reasons_decodes_to_their_names():
    assert (
        decode_clock_event_reasons(IDLE)
        == json.loads(DOCTOR.read_text())["fingerprint"]["gpus"]["gpus"][0]["clock_event_reasons"]
    )
    assert decode_clock_event_reasons(POWER_CAP | THERMAL) == ["sw_power_cap", "sw_thermal_slowdown"]
    assert decode_clock_event_reasons(pynvml.nvmlClocksEventReasonNone) == []
    assert {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown"} <= PERFORMANCE_LIMITING_REASONS
    assert not {"gpu_idle", "applications_clocks_setting", "sync_boost"} & PERFORMANCE_LIMITING_REASONS


def rank(telemetry, index: int = 0) -> RankSample:
    return RankSample(
        rank=index,
        world_size=2,
        status="ok",
        device="cuda",
        device_name="NVIDIA H100 80GB HBM3",
        step_s=[0.2] * 4,
        tokens_per_step=350,
        telemetry=telemetry,
        started_at="t0",
        finished_at="t1",
    )


def runs_with(masks_of_run_2: list[int]) -> list[RunSample]:
    """Two runs of two ranks; run 2's rank 1 sampled `masks_of_run_2`, every other sample is clear."""
    clear = summarize(0, 1.0, [2**30] * 4, [400_000] * 4, None, None, [1980] * 4, [60] * 4, [0] * 4)
    slowed = summarize(
        1, 1.0, [2**30] * 4, [700_000] * 4, None, None, [1980, 1755, 1410, 1500], [70, 80, 84, 83], masks_of_run_2
    )
    return [
        RunSample(index=1, status="ok", exit_code=0, wall_s=1.0, ranks=[rank(clear), rank(clear, 1)]),
        RunSample(index=2, status="ok", exit_code=0, wall_s=1.0, ranks=[rank(clear), rank(slowed, 1)]),
    ]


def test_a_run_measured_under_its_power_cap_says_so_in_its_notes_with_its_clocks_and_heat():
    runs = runs_with([0, POWER_CAP, POWER_CAP | THERMAL, POWER_CAP])
    assert throttle_notes(runs) == [
        "measured while throttled: sw_power_cap in 3 of 16 samples, sw_thermal_slowdown in 1 of "
        "16 samples (run 2), SM clock down to 1410 MHz, up to 84 °C"
    ]


def test_an_idle_gpu_or_an_applications_clock_is_not_throttling():
    assert throttling(runs_with([IDLE, pynvml.nvmlClocksEventReasonApplicationsClocksSetting, 0, IDLE])) is None


def test_a_throttled_throughput_cell_is_marked_with_why():
    runs = runs_with([POWER_CAP] * 4)
    metric = Metric(mean=1000.0, std=10.0, n=2, unit="tokens/s", per_run=[990.0, 1010.0])
    result = SimpleNamespace(
        samples=runs, metrics={"tokens_per_s": metric, "peak_memory_gib": metric.model_copy(update={"unit": "GiB"})}
    )
    cell = metric_cell(result, "tokens_per_s")
    assert cell.tone == "warn" and cell.detail == "throttled: sw_power_cap in 4 of 16 samples"
    assert metric_cell(result, "peak_memory_gib").tone == "plain"  # memory is not slowed by a clock


class SlowedNvml:
    """NVML's calls for one GPU under its power cap from the third sample on (a unit-test stand-in
    for the sampler's bookkeeping; the masks are pynvml's constants)."""

    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = pynvml.NVML_CLOCK_SM, pynvml.NVML_TEMPERATURE_GPU

    def __init__(self):
        self.samples, self.t0 = 0, time.monotonic()

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return uuid

    def nvmlDeviceGetIndex(self, handle):
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle):
        self.samples += 1
        return SimpleNamespace(used=2**30)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return int((time.monotonic() - self.t0) * 700_000)

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert clock == pynvml.NVML_CLOCK_SM
        return 1980 if self.samples < 3 else 1410

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 60 + self.samples

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0 if self.samples < 3 else POWER_CAP


def test_the_sampler_reads_clocks_heat_and_reasons_and_a_lap_covers_its_own_samples():
    sampler = NvmlSampler("GPU-x", interval_s=0.01, nvml=SlowedNvml())
    sampler.start()
    first = sampler.lap()  # the first sample and the lap's own: clear
    time.sleep(0.1)
    second = sampler.lap()
    whole = sampler.stop()
    assert first.clock_event_reasons == {} and first.sm_clock_mhz_min == 1980
    assert second.clock_event_reasons["sw_power_cap"] == second.clock_event_samples == second.samples
    assert second.sm_clock_mhz_min == 1410 and second.temperature_c_max > first.temperature_c_max
    assert whole.samples == sampler._nvml.samples and whole.clock_event_reasons["sw_power_cap"] == whole.samples - 2
    assert whole.mean_power_w == pytest.approx(700.0, rel=0.1)
