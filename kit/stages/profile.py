"""The profile stage (paper Tables V-VIII): one Llama2-7B pre-training step dissected into its
phases, the paper's parts and blocks, and the GPU's idle share; the figures of each run come from
the breakdown its workload recorded (kit.breakdown), the section lists them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kit.analysis import achieved_tflops, mfu, model_flops_per_token
from kit.breakdown import (
    ACCOUNTED_TOLERANCE,
    LAUNCH_BOUND_IDLE,
    PHASES,
    PROFILER_OVERHEAD_LIMIT,
    Breakdown,
    launch_bound,
    part_figures,
)
from kit.hardware import HardwareTable, peak_tflops
from kit.marked_breakdown import (
    MarkedBreakdown,
    is_marked,
    marked_figures,
    marked_notes,
)
from kit.metrics import peak_memory_gib, summarize
from kit.predictions import device_spec, model_notes
from kit.protocol import Case, Protocol
from kit.report import charts
from kit.report.cells import has_metrics, method_label
from kit.report.model import Cell, Chart, Row, Section, Table
from kit.report.stage_common import bars_note, generic_stage, stage_cases
from kit.results import Metric, Result, RunSample
from kit.stages.unit import Stage

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun

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
    summed = (f"parts {b.parts_ms:.4g} ms + other {b.other_ms:.4g} ms ({b.other_share:.1%} of the profiled step) + "
              f"optimizer {optimizer:.4g} ms + idle {b.idle_ms:.4g} ms = {b.accounted_ms:.4g} ms, the profiled step "
              f"({b.traced_step_ms:.4g} ms); the plain step {b.step_ms:.4g} ms")  # fmt: skip
    if b.device == "cuda":
        summed += (f": {b.accounted_vs_step:+.1%}, " + ("within" if b.within_tolerance else "outside")
                   + f" the {ACCOUNTED_TOLERANCE:.0%} goal; the profiled step {b.profiler_overhead:+.1%} against the "
                   f"plain one (goal: at most +{PROFILER_OVERHEAD_LIMIT:.0%})")  # fmt: skip
    else:
        summed += (f": the profiled step {b.profiler_overhead:+.1%} against the plain one (on a CPU the profiler "
                   "records every operator)")  # fmt: skip
    notes = [summed]
    bound = [p for p in b.phases if p.launch_bound]
    if bound:
        notes.append("launch-bound (the device waited for the host): " + "; ".join(
            f"{p.name}: the host issued work for {p.host_ms:.4g} of its {p.window_ms:.4g} ms, the device idle "
            f"{p.idle_share:.0%}" for p in bound))  # fmt: skip
    if b.unlaunched_events:
        notes.append(f"{b.unlaunched_events:g} device events per step without the launch that made them: attributed "
                     "to their phase by their own time, as other")  # fmt: skip
    return notes


def profile_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """Phase, part and block times of a profile case over its runs, tokens/s, model-FLOPs
    TFLOPS and MFU, peak memory; notes with the analytical model and every impossible value.
    A run recorded by a kit of the marks (kit.marked_breakdown) keeps that kit's figures."""
    details = [run.ranks[0].details for run in runs]
    if all(is_marked(d) for d in details):
        marked = [MarkedBreakdown.model_validate(d) for d in details]
        per_run = [marked_figures(b) for b in marked]
        notes = marked_notes(marked)
        cpu_note = f"GPU idle share: {marked[0].activity_method}"
    else:
        breakdowns = [Breakdown.model_validate(d) for d in details]
        per_run = [breakdown_figures(b) for b in breakdowns]
        notes = [note for b in breakdowns for note in breakdown_notes(b)]
        cpu_note = CPU_IDLE
    names = [name for name in per_run[0] if all(name in figures for figures in per_run)]
    found = {
        name: summarize([figures[name] for figures in per_run], "s" if name.endswith("_s") else "fraction")
        for name in names
    }
    tokens = case.params.micro_batch * case.params.seq_len
    found["tokens_per_s"] = summarize([tokens / figures["step_s"] for figures in per_run], "tokens/s")
    peaks = [max(peak_memory_gib(rank) for rank in run.ranks) for run in runs]
    found["peak_memory_gib"] = summarize(peaks, "GiB")
    tflops = [achieved_tflops(model_flops_per_token(case.shape, case.params.seq_len), t)
              for t in found["tokens_per_s"].per_run]  # fmt: skip
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
        notes.append(f"MFU: not computed, no {case.params.dtype} peak in hardware.yaml for {', '.join(sorted(set(device_names)))}")
    else:
        notes.append("MFU: not computed, no peak FLOPS is known for a CPU")
    return found, notes


# --- Report section ---------------------------------------------------------------------------

# Metric -> the part as the paper's Tables V-VIII name it, in the order of a step.
PART_LABELS = {
    "embedding_s": "Embedding", "rmsnorm_s": "RMSNorm", "qkv_proj_s": "QKV proj.", "rope_s": "RoPE",
    "attention_s": "Attention", "o_proj_s": "O proj.", "mlp_s": "MLP GEMMs", "silu_s": "SiLU",
    "lm_head_s": "LM head", "loss_s": "Loss", "optimizer_s": "Optimizer", "other_s": "other",
}  # fmt: skip


def _ms(result: Result, metric: str) -> float:
    return result.metrics[metric].mean * 1e3


def _label(case: Case) -> str:
    return f"{case.model} {method_label(case.method)} b{case.params.micro_batch}"


def phase_stack(case: Case, result: Result) -> charts.Stack:
    """A step's phases; where the profiled step measured the GPU's idle share, each phase is split
    into the time the GPU ran kernels and the time it sat idle (hatched)."""
    segments = []
    for phase in (p for p in PHASES if f"{p}_s" in result.metrics):
        total, idle = _ms(result, f"{phase}_s"), result.metrics.get(f"{phase}_idle_share")
        busy = total * (1 - idle.mean) if idle else total
        segments.append(charts.Segment(label=phase, value=busy))
        if idle:
            segments.append(charts.Segment(label=f"{phase}: GPU idle", value=total - busy, hatched=True))
    return charts.Stack(label=_label(case), segments=segments)


def parts_stack(case: Case, result: Result) -> charts.Stack:
    """The parts of a step on the device's timeline, then the optimizer's device time and the
    device's idle time (hatched): together the profiled step. A run of the marks (no device
    timeline) shows its parts, the optimizer phase and other, as it measured them."""
    timeline = "device_busy_s" in result.metrics
    labels = {**PART_LABELS, "optimizer_s": None} if timeline else PART_LABELS
    segments = [charts.Segment(label=label, value=_ms(result, metric)) for metric, label in labels.items()
                if label and metric in result.metrics and result.metrics[metric].mean > 0]  # fmt: skip
    if timeline:
        if "optimizer_busy_s" in result.metrics:
            segments.append(charts.Segment(label="Optimizer", value=_ms(result, "optimizer_busy_s")))
        idle = sum(_ms(result, f"{phase}_idle_s") for phase in PHASES if f"{phase}_idle_s" in result.metrics)
        if idle > 0:
            segments.append(charts.Segment(label="idle", value=idle, hatched=True))
    return charts.Stack(label=_label(case), segments=segments)


def _ms_text(result: Result, metric: str) -> str:
    found = result.metrics.get(metric)
    return "—" if found is None else f"{found.mean * 1e3:.4g}"


def phase_table(measured: list[tuple[Case, Result]]) -> Table:
    """Each phase on the device's timeline: its time in the plain steps, its window in the profiled
    ones, the device's busy and idle time in it, and the host's time until its last launch (GPU)."""
    rows = []
    for case, result in measured:
        rows.append(Row(cells=[Cell(text=case.id, tone="mono", colspan=7)], heading=True))
        for phase in PHASES:
            idle = result.metrics.get(f"{phase}_idle_share")
            host = result.metrics.get(f"{phase}_host_s")
            window = sum(result.metrics[f"{phase}_{part}_s"].mean for part in ("busy", "idle"))
            bound = launch_bound(idle.mean if idle else None, host.mean if host else None, window)
            rows.append(Row(cells=[
                Cell(text=phase), Cell(text=_ms_text(result, f"{phase}_s")), Cell(text=f"{window * 1e3:.4g}"),
                Cell(text=_ms_text(result, f"{phase}_busy_s")),
                Cell(text=_ms_text(result, f"{phase}_idle_s") + (f" ({idle.mean:.0%})" if idle is not None else "")),
                Cell(text=_ms_text(result, f"{phase}_host_s")),
                Cell(text={True: "yes", False: "no", None: "—"}[bound], tone="warn" if bound else "plain"),
            ]))  # fmt: skip
    return Table(
        caption="Each phase on the device's timeline (ms per step, means over the runs)",
        header=["Phase", "Plain step", "Profiled", "Device busy", "Device idle", "Host issuing", "Launch-bound"],
        widths=[16, 14, 14, 14, 16, 14, 12],
        rows=rows,
        notes=["Plain step: the phase in the steps timed at their phase edges only. Profiled: the phase's window on "
               "the device in the profiled steps, the device busy (union of its kernels and copies; on a CPU: of its "
               "operators) and idle within it. Host issuing: from the phase's start until its last launch returned "
               "(GPU). Launch-bound: the host issued work until (nearly) the phase's end while the device sat idle "
               f"for more than {LAUNCH_BOUND_IDLE:.0%} of it: the step waits for the host, not the device."],
    )


def flash_pairs(measured: list[tuple[Case, Result]]) -> list[tuple[tuple[Case, Result], tuple[Case, Result]]]:
    """Each case with FlashAttention (f) beside its twin without it: same model, GPUs, micro-batch
    and other methods."""

    def twin_key(case: Case) -> tuple:
        others = frozenset(case.method.split("+")) - {"f", "base"}
        return case.model, case.gpus, case.params.micro_batch, others

    plain = {twin_key(c): (c, r) for c, r in measured if "f" not in c.method.split("+")}
    return [(plain[twin_key(c)], (c, r)) for c, r in measured if "f" in c.method.split("+") and twin_key(c) in plain]


def _flash_bars(pairs) -> list[charts.Bar]:
    bars = []
    for (plain_case, plain), (_, flash) in pairs:
        for metric, label in PART_LABELS.items():
            if metric in plain.metrics and metric in flash.metrics:
                name = f"{plain_case.model}: {label}" if len(pairs) > 1 else label
                for group, result in (("without FlashAttention", plain), ("with FlashAttention-2", flash)):
                    metric_of = result.metrics[metric]
                    bars.append(charts.Bar(label=name, group=group, value=metric_of.mean * 1e3,
                                           error=None if metric_of.std is None else metric_of.std * 1e3))  # fmt: skip
    return bars


def profile_section(stage: Stage, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """The breakdown as pictures first (phases with the GPU's idle share, the parts of a step,
    FlashAttention's effect per part), then every figure of every case."""
    section = generic_stage(stage, run)
    measured = [(case, run.results[case.id]) for case in stage_cases(run, stage.name)
                if has_metrics(run.results.get(case.id), "step_s")]  # fmt: skip
    if not measured:
        return section
    runs = bars_note(result.metrics["step_s"].n for _, result in measured)
    section.charts.append(Chart(
        title="Phases of a training step",
        svg=charts.stacked_chart("profile-phases", [phase_stack(c, r) for c, r in measured], "ms per step"),
        caption="Forward, backward and optimizer time of a step, mean over the measured steps; hatched: the share of "
                "the phase in which the GPU ran no kernel, from the profiled step (GPU cases only: a CPU has no such "
                f"measure). {runs}",
    ))  # fmt: skip
    section.charts.append(Chart(
        title="Parts of a training step",
        svg=charts.stacked_chart("profile-parts", [parts_stack(c, r) for c, r in measured], "ms per step"),
        caption="Each part's device time per step (forward, backward and recomputation, summed over the layers), "
                "grouped as the paper's Tables V-VIII group them, from the device's timeline of the profiled steps; "
                "other: device time in no part; Optimizer: the optimizer phase's device time; idle (hatched): the "
                "device running nothing (on a CPU: time outside any operator). Together: the profiled step. "
                f"{runs}",
    ))  # fmt: skip
    timed = [(case, result) for case, result in measured if "forward_busy_s" in result.metrics]
    if timed:  # before the listing of every metric
        section.tables.insert(0, phase_table(timed))
    pairs = flash_pairs(measured)
    if pairs:
        section.charts.append(Chart(
            title="FlashAttention's effect per part",
            svg=charts.bar_chart("profile-flash", _flash_bars(pairs), "ms per step"),
            caption="Each part's time per step without and with FlashAttention-2, the same model, micro-batch and "
                    f"sequence. {runs}",
        ))  # fmt: skip
    else:
        section.paragraphs.append("FlashAttention's effect per part is not drawn: no case with FlashAttention (f) "
                                  "finished beside its twin without it.")  # fmt: skip
    return section


PROFILE = Stage(
    name="profile", title="Module breakdown of a pre-training step", section=profile_section,
    case_metrics=profile_case_metrics, headline="tokens_per_s",
    purpose="time per phase and per module of one Llama2-7B step, and the GPU idle share (paper Tables V-VIII)",
)  # fmt: skip
