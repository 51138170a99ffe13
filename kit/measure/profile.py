"""The profile stage (paper Tables V-VIII): one Llama2-7B pre-training step dissected into its
phases, the paper's parts and blocks, and the GPU's idle share; the figures of each run come from
the breakdown its workload recorded (kit.measure.breakdown), the section lists them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kit.measure.breakdown import part_figures
from kit.measure.marked_breakdown import marked_figures, marked_notes
from kit.measure.metrics import peak_memory_gib, summarize
from kit.measure.unit import StageUnit
from kit.plan.predictions import device_spec, model_notes
from kit.plan.protocol import Case, StepParams
from kit.rundir.breakdown import (
    ACCOUNTED_TOLERANCE,
    PROFILER_OVERHEAD_LIMIT,
    Breakdown,
    MarkedBreakdown,
)
from kit.rundir.schema import Metric, RunSample
from kit.theory.analytic import achieved_tflops, mfu, model_flops_per_token
from kit.theory.hardware import HardwareTable, peak_tflops

if TYPE_CHECKING:
    pass

CPU_IDLE = (
    "GPU idle share: not measurable on a CPU, where operators run synchronously in the calling thread and no "
    "device queue runs dry; the idle time of a phase here ({phase}_idle_s) is its time outside any operator: "
    "the framework's Python between operators"
)


def breakdown_figures(breakdown: Breakdown) -> dict[str, float]:
    """The figures of one run's breakdown, in seconds and fractions.

    Phase and step times come from the plain steps; every part, block, busy and idle time from
    the device's timeline of the profiled steps (on a CPU: the operators' time)."""
    figures: dict[str, float] = {"step_s": breakdown.step_ms / 1e3}
    for phase in breakdown.phases:
        figures[f"{phase.name}_s"] = phase.wall_ms / 1e3
        figures[f"{phase.name}_share"] = phase.wall_ms / breakdown.step_ms
        figures[f"{phase.name}_busy_s"] = phase.busy_ms / 1e3
        figures[f"{phase.name}_idle_s"] = phase.idle_ms / 1e3
        if breakdown.device == "cuda" and phase.idle_share is not None:
            figures[f"{phase.name}_idle_share"] = phase.idle_share
        if phase.host_ms is not None:
            figures[f"{phase.name}_host_s"] = phase.host_ms / 1e3
    figures.update(part_figures(breakdown))
    figures["device_busy_s"] = breakdown.busy_ms / 1e3
    figures["traced_step_s"] = breakdown.traced_step_ms / 1e3
    figures["profiler_overhead"] = breakdown.profiler_overhead
    figures["accounted_vs_step"] = breakdown.accounted_vs_step
    figures["other_s"] = breakdown.other_ms / 1e3
    figures["other_share"] = breakdown.other_share
    if breakdown.recompute:
        figures["recompute_s"] = breakdown.phase("backward").recompute_ms / 1e3
    return figures


def breakdown_notes(breakdown: Breakdown) -> list[str]:
    """What one run's breakdown says in words: how the step adds up, the profiler's cost, and
    where the host bounded it."""
    b = breakdown
    optimizer = b.phase("optimizer").other_ms
    summed = (
        f"parts {b.parts_ms:.4g} ms + other {b.other_ms:.4g} ms ({b.other_share:.1%} of the profiled step) + "
        f"optimizer {optimizer:.4g} ms + idle {b.idle_ms:.4g} ms = {b.accounted_ms:.4g} ms, the profiled step "
        f"({b.traced_step_ms:.4g} ms); the plain step {b.step_ms:.4g} ms"
    )
    if b.device == "cuda":
        summed += (
            f": {b.accounted_vs_step:+.1%}, "
            + ("within" if b.within_tolerance else "outside")
            + f" the {ACCOUNTED_TOLERANCE:.0%} goal; the profiled step {b.profiler_overhead:+.1%} against the "
            f"plain one (goal: at most +{PROFILER_OVERHEAD_LIMIT:.0%})"
        )
    else:
        summed += (
            f": the profiled step {b.profiler_overhead:+.1%} against the plain one (on a CPU the profiler "
            "records every operator)"
        )
    notes = [summed]
    bound = [p for p in b.phases if p.launch_bound]
    if bound:
        notes.append(
            "launch-bound (the device waited for the host): "
            + "; ".join(
                f"{p.name}: the host issued work for {p.host_ms:.4g} of its {p.window_ms:.4g} ms, the device idle "
                f"{p.idle_share:.0%}"
                for p in bound
            )
        )
    if b.unlaunched_events:
        notes.append(
            f"{b.unlaunched_events:g} device events per step without the launch that made them: attributed "
            "to their phase by their own time, as other"
        )
    return notes


def profile_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric], list[str]]:
    """Phase, part and block times of a profile case over its runs, tokens/s, model-FLOPs
    TFLOPS and MFU, peak memory; notes with the analytical model and every impossible value.
    A run recorded by a kit of the marks (kit.measure.marked_breakdown) keeps that kit's figures."""
    details = [run.ranks[0].details for run in runs]
    marked = [d for d in details if isinstance(d, MarkedBreakdown)]
    if marked and len(marked) == len(details):
        per_run = [marked_figures(b) for b in marked]
        notes = marked_notes(marked)
        cpu_note = f"GPU idle share: {marked[0].activity_method}"
    else:
        breakdowns = [b for run in runs if (b := run.ranks[0].details_as(Breakdown)) is not None]
        if len(breakdowns) < len(runs):
            raise ValueError("a profile run recorded no breakdown")
        per_run = [breakdown_figures(b) for b in breakdowns]
        notes = [note for b in breakdowns for note in breakdown_notes(b)]
        cpu_note = CPU_IDLE
    names = [name for name in per_run[0] if all(name in figures for figures in per_run)]
    found = {
        name: summarize([figures[name] for figures in per_run], "s" if name.endswith("_s") else "fraction")
        for name in names
    }
    step = case.params_as(StepParams)
    tokens = step.tokens_per_step
    found["tokens_per_s"] = summarize([tokens / figures["step_s"] for figures in per_run], "tokens/s")
    peaks = [max(peak_memory_gib(rank) for rank in run.ranks) for run in runs]
    found["peak_memory_gib"] = summarize(peaks, "GiB")
    tflops = [
        achieved_tflops(model_flops_per_token(case.model_shape, step.seq_len), t) for t in found["tokens_per_s"].per_run
    ]
    found["achieved_tflops"] = summarize(tflops, "TFLOP/s")

    if case.device != "cuda":
        notes.append(cpu_note)
    device_names = [rank.device_name for run in runs for rank in run.ranks]
    notes += model_notes(case, device_names, found["step_s"].per_run, peaks, hardware)
    spec = device_spec(case, device_names, hardware)
    peak = peak_tflops(spec, case.params.dtype) if spec and case.params.dtype in ("bf16", "fp16") else None
    if peak is not None:
        found["mfu"] = summarize([mfu(value, peak, case.gpus) for value in tflops], "fraction")
        if max(found["mfu"].per_run) > 1:
            notes.append("MFU above 100 %: impossible, so the measurement or the device's peak is wrong")
    elif case.device == "cuda":
        notes.append(
            f"MFU: not computed, no {case.params.dtype} peak in hardware.yaml for {', '.join(sorted(set(device_names)))}"
        )
    else:
        notes.append("MFU: not computed, no peak FLOPS is known for a CPU")
    return found, notes


# --- Report section ---------------------------------------------------------------------------


PROFILE = StageUnit(
    name="profile",
    title="Module breakdown of a pre-training step",
    case_metrics=profile_case_metrics,
    headline="tokens_per_s",
)
