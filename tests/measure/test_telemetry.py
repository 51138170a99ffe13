"""Device telemetry from NVML: what is computed from the samples, and the reason when there are none.

NVML's semantics, as its API reference states them: nvmlDeviceGetTotalEnergyConsumption is an
unsigned 64-bit count of millijoules since the driver was loaded; nvmlDeviceGetPowerUsage is in
milliwatts; nvmlDeviceGetMemoryInfo(...).used in bytes.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from kit.measure.telemetry import ENERGY_COUNTER_MODULUS, NoDevice, NvmlSampler, energy_delta_mj, nvml_uuid, summarize


def test_energy_delta_is_the_counter_difference_in_millijoules():
    assert energy_delta_mj(1_234_567_000, 1_234_987_000) == 420_000


def test_energy_delta_survives_a_wrap_of_the_64_bit_counter():
    assert energy_delta_mj(ENERGY_COUNTER_MODULUS - 500, 1_500) == 2_000


def test_mean_power_is_energy_over_the_interval_and_peak_is_the_largest_sample():
    telemetry = summarize(3, 2.0, [10 * 2**30, 30 * 2**30, 20 * 2**30], [650_000, 700_000], 5_000_000, 5_800_000)
    assert telemetry.energy_j == pytest.approx(800.0)
    assert telemetry.mean_power_w == pytest.approx(400.0)
    assert telemetry.peak_used_bytes == 30 * 2**30
    assert (telemetry.gpu_index, telemetry.samples, telemetry.unavailable) == (3, 3, None)


def test_without_an_energy_counter_power_is_the_mean_of_the_samples():
    telemetry = summarize(0, 2.0, [2**30], [300_000, 500_000], None, None)
    assert telemetry.energy_j is None and telemetry.mean_power_w == pytest.approx(400.0)


def test_torch_uuids_are_named_the_way_nvml_names_gpus():
    assert nvml_uuid("5a2b7c3e-0000-1111-2222-333344445555") == "GPU-5a2b7c3e-0000-1111-2222-333344445555"
    assert nvml_uuid("GPU-5a2b7c3e-0000-1111-2222-333344445555") == "GPU-5a2b7c3e-0000-1111-2222-333344445555"


def test_on_this_host_without_a_driver_the_reason_is_recorded_not_zeros():
    pytest.importorskip("pynvml")
    sampler = NvmlSampler("5a2b7c3e-0000-1111-2222-333344445555")
    sampler.start()
    telemetry = sampler.stop()
    if telemetry.unavailable is None:
        pytest.skip("this host has an NVIDIA driver")
    assert "NVML" in telemetry.unavailable
    assert (telemetry.energy_j, telemetry.mean_power_w, telemetry.peak_used_bytes, telemetry.samples) == (
        None,
        None,
        None,
        0,
    )


def test_a_cpu_case_records_why_it_has_no_telemetry():
    telemetry = NoDevice().stop()
    assert telemetry.source == "nvml" and "CPU" in telemetry.unavailable and telemetry.samples == 0


class CountingNvml:
    """NVML's calls for one GPU whose counter advances 100 J per second of wall time (a unit-test
    stand-in: the sampler's bookkeeping, not NVML, is under test)."""

    def __init__(self):
        self.used, self.t0 = iter(range(1, 10**6)), time.monotonic()

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return uuid

    def nvmlDeviceGetIndex(self, handle):
        return 5

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=next(self.used) * 2**20)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 100_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return int((time.monotonic() - self.t0) * 100_000)


def test_the_sampler_samples_in_the_background_until_stopped():
    sampler = NvmlSampler("GPU-x", interval_s=0.01, nvml=CountingNvml())
    sampler.start()
    time.sleep(0.2)
    telemetry = sampler.stop()
    assert telemetry.gpu_index == 5 and telemetry.samples >= 5
    assert telemetry.peak_used_bytes == telemetry.samples * 2**20  # the last sample is the largest
    assert telemetry.mean_power_w == pytest.approx(100.0, rel=0.05)


class CountingGpus(CountingNvml):
    """Two GPUs of that kind, as a serving engine's device request gives them."""

    def nvmlInit(self): ...

    def nvmlShutdown(self): ...

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"GPU-{index}"

    def nvmlDeviceGetUUID(self, handle):
        return handle


def test_a_burst_sums_the_energy_of_the_engines_gpus_and_gives_the_mean_power_of_one():
    from kit.measure.telemetry import GpusSampler

    sampler = GpusSampler(2, interval_s=0.01, nvml=CountingGpus())
    sampler.start()
    time.sleep(0.2)
    telemetry = sampler.stop()
    assert telemetry.gpu_index is None and telemetry.unavailable is None
    assert telemetry.mean_power_w == pytest.approx(100.0, rel=0.1)
    assert telemetry.energy_j == pytest.approx(2 * 100.0 * 0.2, rel=0.3)  # two GPUs at 100 W for ~0.2 s
