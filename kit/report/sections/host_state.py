"""The host as it measured: what it achieved in the preflight's calibration (kit.measure.calibration),
how its GPUs were set (power limit, application clocks: the fingerprint's), and whether they
slowed while the cases were measured (kit.measure.throttling). Page one and the environment section
show these beside the peaks the expectation starts from."""

from __future__ import annotations

from collections import Counter

from kit.host.fingerprint import Calibration, Fingerprint, Gpu
from kit.measure.calibration import Achievable, summary
from kit.measure.throttling import throttling
from kit.report.loaded_run import LoadedRun
from kit.report.model import Fact, Tone
from kit.rundir.schema import Result
from kit.theory.hardware import load_hardware

LISTED = 3  # throttled cases named on page one; the others counted
OLDER_KIT = "a kit older than the measurement made this run"  # why an older run has neither


def run_calibration(run: LoadedRun) -> Calibration | None:
    fingerprint = run.before.fingerprint
    return fingerprint.calibration if fingerprint is not None else None


def calibration_gap(run: LoadedRun) -> str:
    """Why a run has no calibration."""
    if run.info.no_preflight:
        return "the run started with --no-preflight"
    failed = (
        [line for line in run.info.preflight.lines if line.check.startswith("calibration") and line.status == "fail"]
        if run.info.preflight
        else []
    )
    if failed:
        return f"the preflight's calibration failed: {failed[0].detail}"
    if run.before.fingerprint is None:
        return f"no fingerprint ({run.before.missing})"
    return OLDER_KIT


def calibration_text(calibration: Calibration) -> str:
    """The figures, the GPU's beside its datasheet's where hardware.yaml gives it, and where their
    raw samples are."""
    spec = load_hardware().lookup(calibration.device_names[0]) if calibration.device == "cuda" else None
    shares = {}
    if spec is not None:
        peak, bandwidth = spec.bf16_dense_tflops.value, spec.memory_bandwidth_tb_per_s.value
        if peak and calibration.matmul_dtype == "bf16":
            shares["matmul"] = f" ({100 * calibration.matmul.value / peak:.0f} % of the datasheet's {peak:g} TFLOPS)"
        if bandwidth:
            shares["memory copy"] = f" ({calibration.memory_copy.value / 10 / bandwidth:.0f} % of {bandwidth:g} TB/s)"
    parts = [
        part + next((share for word, share in shares.items() if word in part), "")
        for part in summary(calibration).split(", ")
    ]
    return f"{', '.join(parts)}; raw samples {calibration.raw_samples}/"


def _gpu_setting(gpu: Gpu) -> str | None:
    clocks = gpu.clocks
    if gpu.power_limit_w is None and clocks.applications_graphics_mhz is None:
        return None
    power = f"power limit {gpu.power_limit_w:g} W" if gpu.power_limit_w else "power limit not read"
    if clocks.applications_graphics_mhz is None:
        return f"{power}, application clocks not read"
    return (
        f"{power}, application clocks {clocks.applications_graphics_mhz} / {clocks.applications_memory_mhz} MHz "
        f"(max {clocks.max_graphics_mhz} / {clocks.max_memory_mhz})"
    )


def gpu_settings(fingerprint: Fingerprint) -> str | None:
    """How the GPUs were set when the fingerprint was taken (a lowered power limit or clock lowers
    what they achieve), each setting once, clocks as graphics / memory; None without a GPU or
    where NVML gave neither."""
    settings = Counter(setting for gpu in fingerprint.gpus.gpus if (setting := _gpu_setting(gpu)) is not None)
    return "; ".join(f"{count} × {text}" if len(settings) > 1 else text for text, count in settings.items()) or None


def throttling_text(run: LoadedRun) -> tuple[str, Tone]:
    """Whether any measured window was throttled, over the cases that sampled clock event reasons."""
    sampled = [
        result
        for result in run.results.values()
        if any(
            rank.telemetry is not None and rank.telemetry.clock_event_samples
            for sample in result.samples
            for rank in sample.ranks
        )
    ]
    if not sampled:
        readings = [
            rank.telemetry
            for result in run.results.values()
            for sample in result.samples
            for rank in sample.ranks
            if rank.telemetry is not None
        ]
        why = next((t.unavailable for t in readings if t.unavailable), OLDER_KIT)
        return f"throttling not sampled: {why}", "muted"
    throttled = {result.case_id: found for result in sampled if (found := throttling(result.samples))}
    if not throttled:
        return (
            f"not throttled: no power cap, thermal or hardware slowdown in the {len(sampled)} cases that sampled NVML",
            "good",
        )
    listed = "; ".join(
        f"{case_id}: {found.short.removeprefix('throttled: ')}" for case_id, found in list(throttled.items())[:LISTED]
    )
    more = f"; and {len(throttled) - LISTED} more" if len(throttled) > LISTED else ""
    return f"{len(throttled)} of {len(sampled)} cases measured while throttled ({listed}{more})", "warn"


def measured_state_fact(run: LoadedRun) -> Fact:
    """What the preflight measured the host to achieve, and whether its GPUs slowed while the
    cases were measured: one fact, beside the peaks the expectation starts from."""
    calibration = run_calibration(run)
    throttled, tone = throttling_text(run)
    if (
        calibration is None
        and throttled == f"throttling not sampled: {OLDER_KIT}"
        and calibration_gap(run) == OLDER_KIT
    ):
        return Fact(label="Calibration", value=f"not measured, nor throttling sampled: {OLDER_KIT}", tone="muted")
    measured = calibration_text(calibration) if calibration is not None else f"not measured: {calibration_gap(run)}"
    if tone != "warn" and calibration is None:
        tone = "muted"
    return Fact(label="Calibration", value=f"{measured}; {throttled}", tone="plain" if tone == "good" else tone)


def achievable(result: Result, spec, calibration: Calibration | None) -> Achievable | None:
    """The case's GPU at what the preflight measured, where it measured below the datasheet."""
    if spec is None or calibration is None or result.case.device != "cuda":
        return None
    found = Achievable(spec, calibration)
    return found if found.replaced else None
