"""NVML's clock event reasons (called throttle reasons before R535): why a GPU runs below its
maximum clocks, as one bitmask. The fingerprint reads it once at rest; the telemetry of every
measured window samples it, so that a figure measured under a power cap or a thermal slowdown
says so.

Host-importable: no NVML import here; callers hand in the module they opened.
"""

from __future__ import annotations

# The bits of nvmlDeviceGetCurrentClocksEventReasons' mask, as nvml.h defines them (group
# nvmlClocksEventReasons in the NVML API reference; R535 renamed nvmlClocksThrottleReason* to
# nvmlClocksEventReason*), equal to pynvml's nvmlClocksEventReason* constants
# (tests/measure/test_throttling.py holds them to those).
CLOCK_EVENT_REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# The reasons that mean the GPU runs slower than it could: power, thermal or hardware limits.
# gpu_idle, applications_clocks_setting, sync_boost and display_clock_setting are not.
PERFORMANCE_LIMITING_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


def decode_clock_event_reasons(mask: int) -> list[str]:
    """Name the bits of an NVML clock event (throttle) reason mask; unknown bits stay visible."""
    names = [name for bit, name in CLOCK_EVENT_REASON_BITS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASON_BITS.keys())
    if unknown:
        names.append(f"unknown_bits_{unknown:#x}")
    return names


def read_clock_event_mask(nvml, handle) -> int:
    """Current clock event reasons under either name.

    R535 renamed nvmlDeviceGetCurrentClocksThrottleReasons to ...ClocksEventReasons: newer
    bindings may drop the old name, and drivers older than R535 lack the new symbol.
    """
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        call = getattr(nvml, name, None)
        if call is None:
            continue
        try:
            return call(handle)
        except nvml.NVMLError_FunctionNotFound:
            continue
    raise LookupError("the driver answers neither clock event reason call")
