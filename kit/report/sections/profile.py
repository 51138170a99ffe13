"""The module breakdown section (paper Tables V-VIII): each phase and part of one pre-training step,
the GPU's idle share, and FlashAttention beside eager attention (figures: kit.measure.profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.measure.breakdown import PHASES
from kit.measure.unit import StageUnit
from kit.plan.protocol import Case, Protocol
from kit.report import charts
from kit.report.cells import has_metrics, method_label, metric_of
from kit.report.model import Cell, Chart, Row, Section, Table
from kit.report.sections.common import bars_note, generic_stage, stage_cases
from kit.rundir.breakdown import LAUNCH_BOUND_IDLE, launch_bound
from kit.rundir.schema import Result

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun


# Metric -> the part as the paper's Tables V-VIII name it, in the order of a step.
PART_LABELS = {
    "embedding_s": "Embedding",
    "rmsnorm_s": "RMSNorm",
    "qkv_proj_s": "QKV proj.",
    "rope_s": "RoPE",
    "attention_s": "Attention",
    "o_proj_s": "O proj.",
    "mlp_s": "MLP GEMMs",
    "silu_s": "SiLU",
    "lm_head_s": "LM head",
    "loss_s": "Loss",
    "optimizer_s": "Optimizer",
    "other_s": "other",
}


def _ms(result: Result, metric: str) -> float:
    return metric_of(result, metric).mean * 1e3


def _label(case: Case) -> str:
    return f"{case.model} {method_label(case.method)} b{case.micro_batch}"


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
    segments = [
        charts.Segment(label=label, value=_ms(result, metric))
        for metric, label in labels.items()
        if label and metric in result.metrics and metric_of(result, metric).mean > 0
    ]
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
            window = sum(metric_of(result, f"{phase}_{part}_s").mean for part in ("busy", "idle"))
            bound = launch_bound(idle.mean if idle else None, host.mean if host else None, window)
            rows.append(
                Row(
                    cells=[
                        Cell(text=phase),
                        Cell(text=_ms_text(result, f"{phase}_s")),
                        Cell(text=f"{window * 1e3:.4g}"),
                        Cell(text=_ms_text(result, f"{phase}_busy_s")),
                        Cell(
                            text=_ms_text(result, f"{phase}_idle_s")
                            + (f" ({idle.mean:.0%})" if idle is not None else "")
                        ),
                        Cell(text=_ms_text(result, f"{phase}_host_s")),
                        Cell(text={True: "yes", False: "no", None: "—"}[bound], tone="warn" if bound else "plain"),
                    ]
                )
            )
    return Table(
        caption="Each phase on the device's timeline (ms per step, means over the runs)",
        header=["Phase", "Plain step", "Profiled", "Device busy", "Device idle", "Host issuing", "Launch-bound"],
        widths=[16, 14, 14, 14, 16, 14, 12],
        rows=rows,
        notes=[
            "Plain step: the phase in the steps timed at their phase edges only. Profiled: the phase's window on "
            "the device in the profiled steps, the device busy (union of its kernels and copies; on a CPU: of its "
            "operators) and idle within it. Host issuing: from the phase's start until its last launch returned "
            "(GPU). Launch-bound: the host issued work until (nearly) the phase's end while the device sat idle "
            f"for more than {LAUNCH_BOUND_IDLE:.0%} of it: the step waits for the host, not the device."
        ],
    )


def flash_pairs(measured: list[tuple[Case, Result]]) -> list[tuple[tuple[Case, Result], tuple[Case, Result]]]:
    """Each case with FlashAttention (f) beside its twin without it: same model, GPUs, micro-batch
    and other methods."""

    def twin_key(case: Case) -> tuple:
        others = frozenset(case.method.split("+")) - {"f", "base"}
        return case.model, case.gpus, case.micro_batch, others

    plain = {twin_key(c): (c, r) for c, r in measured if "f" not in c.method.split("+")}
    return [(plain[twin_key(c)], (c, r)) for c, r in measured if "f" in c.method.split("+") and twin_key(c) in plain]


def _flash_bars(pairs) -> list[charts.Bar]:
    bars = []
    for (plain_case, plain), (_, flash) in pairs:
        for metric, label in PART_LABELS.items():
            if metric in plain.metrics and metric in flash.metrics:
                name = f"{plain_case.model}: {label}" if len(pairs) > 1 else label
                for group, result in (("without FlashAttention", plain), ("with FlashAttention-2", flash)):
                    figure = metric_of(result, metric)
                    bars.append(
                        charts.Bar(
                            label=name,
                            group=group,
                            value=figure.mean * 1e3,
                            error=None if figure.std is None else figure.std * 1e3,
                        )
                    )
    return bars


def profile_section(stage: StageUnit, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """The breakdown as pictures first (phases with the GPU's idle share, the parts of a step,
    FlashAttention's effect per part), then every figure of every case."""
    section = generic_stage(stage, run)
    measured = [
        (case, run.results[case.id])
        for case in stage_cases(run, stage.name)
        if has_metrics(run.results.get(case.id), "step_s")
    ]
    if not measured:
        return section
    runs = bars_note(metric_of(result, "step_s").n for _, result in measured)
    section.charts.append(
        Chart(
            title="Phases of a training step",
            svg=charts.stacked_chart("profile-phases", [phase_stack(c, r) for c, r in measured], "ms per step"),
            caption="Forward, backward and optimizer time of a step, mean over the measured steps; hatched: the share of "
            "the phase in which the GPU ran no kernel, from the profiled step (GPU cases only: a CPU has no such "
            f"measure). {runs}",
        )
    )
    section.charts.append(
        Chart(
            title="Parts of a training step",
            svg=charts.stacked_chart("profile-parts", [parts_stack(c, r) for c, r in measured], "ms per step"),
            caption="Each part's device time per step (forward, backward and recomputation, summed over the layers), "
            "grouped as the paper's Tables V-VIII group them, from the device's timeline of the profiled steps; "
            "other: device time in no part; Optimizer: the optimizer phase's device time; idle (hatched): the "
            "device running nothing (on a CPU: time outside any operator). Together: the profiled step. "
            f"{runs}",
        )
    )
    timed = [(case, result) for case, result in measured if "forward_busy_s" in result.metrics]
    if timed:  # before the listing of every metric
        section.tables.insert(0, phase_table(timed))
    pairs = flash_pairs(measured)
    if pairs:
        section.charts.append(
            Chart(
                title="FlashAttention's effect per part",
                svg=charts.bar_chart("profile-flash", _flash_bars(pairs), "ms per step"),
                caption="Each part's time per step without and with FlashAttention-2, the same model, micro-batch and "
                f"sequence. {runs}",
            )
        )
    else:
        section.paragraphs.append(
            "FlashAttention's effect per part is not drawn: no case with FlashAttention (f) "
            "finished beside its twin without it."
        )
    return section
