"""The profile stage (paper Tables V-VIII): one Llama2-7B pre-training step dissected into its
phases, the paper's parts and blocks, and the GPU's idle share; the figures of each run come from
the breakdown its workload recorded (kit.breakdown), the section lists them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kit.analysis import achieved_tflops, mfu, model_flops_per_token
from kit.breakdown import OTHER_TOLERANCE, Breakdown
from kit.hardware import HardwareTable, peak_tflops
from kit.metrics import peak_memory_gib, summarize
from kit.predictions import device_spec, model_notes
from kit.protocol import Case, Protocol
from kit.report import charts
from kit.report.cells import has_metrics, method_label
from kit.report.model import Chart, Section
from kit.report.stage_common import bars_note, generic_stage, stage_cases
from kit.results import Metric, Result, RunSample
from kit.stages.unit import Stage

if TYPE_CHECKING:
    from kit.report.load import LoadedRun

# Metric -> the parts it adds up (each part's forward + backward + recompute time). "mlp" is the
# MLP's matrix multiplications (the paper's GEMM parts), "qkv_proj" the three input projections.
PART_GROUPS = {
    "embedding_s": ("Embedding",),
    "rmsnorm_s": ("RMSNorm",),
    "qkv_proj_s": ("q_proj", "k_proj", "v_proj"),
    "rope_s": ("RoPE",),
    "attention_s": ("Attention",),
    "o_proj_s": ("o_proj",),
    "mlp_s": ("gate_proj", "up_proj", "down_proj"),
    "silu_s": ("SiLU",),
    "lm_head_s": ("LM head",),
    "loss_s": ("Loss",),
}


def breakdown_figures(breakdown: Breakdown) -> dict[str, float]:
    """The figures of one run's breakdown, in seconds and fractions.

    Phase times and shares come from the plain steps; part and block times from the
    instrumented steps (a part's share is of instrumented_step_s, a block's of blocks_step_s); idle shares and kernel time from the profiled step (GPU only)."""
    figures: dict[str, float] = {"step_s": breakdown.step_ms / 1e3}
    for phase in breakdown.phases:
        figures[f"{phase.name}_s"] = phase.wall_ms / 1e3
        figures[f"{phase.name}_share"] = phase.wall_ms / breakdown.step_ms
        if phase.activity is not None and phase.activity.idle_share is not None:
            figures[f"{phase.name}_idle_share"] = phase.activity.idle_share
            figures[f"{phase.name}_kernel_s"] = phase.activity.kernel_ms / 1e3
    parts = {m.name: m for m in breakdown.modules}
    for metric, names in PART_GROUPS.items():
        found = [parts[name] for name in names if name in parts]
        if found:
            figures[metric] = sum(m.total_ms for m in found) / 1e3
    if "Attention" in parts:
        figures["attention_forward_s"] = parts["Attention"].forward_ms / 1e3
        figures["attention_backward_s"] = parts["Attention"].backward_ms / 1e3
    layers = breakdown.module("Decoder layers")
    if layers is not None:  # a block, timed in the steps that mark blocks: its share is of those
        figures["decoder_layers_s"] = layers.total_ms / 1e3
        figures["blocks_step_s"] = breakdown.blocks_step_ms / 1e3
    figures["instrumented_step_s"] = breakdown.instrumented_step_ms / 1e3
    figures["other_s"] = breakdown.other_ms / 1e3
    figures["other_share"] = breakdown.other_share
    if breakdown.recompute:
        figures["recompute_s"] = breakdown.phase("backward").recompute_ms / 1e3
    return figures


def profile_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """Phase, part and block times of a profile case over its runs, tokens/s, model-FLOPs
    TFLOPS and MFU, peak memory; notes with the analytical model and every impossible value."""
    breakdowns = [Breakdown.model_validate(run.ranks[0].details) for run in runs]
    per_run = [breakdown_figures(b) for b in breakdowns]
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

    notes = [
        f"parts add up to {b.modules_ms - b.overlap_ms:.4g} ms of the instrumented step's {b.instrumented_step_ms:.4g} ms; "
        f"other {b.other_ms:.4g} ms ({b.other_share:.1%}), "
        + ("within" if b.within_tolerance else "outside")
        + f" the {OTHER_TOLERANCE:.0%} tolerance; instrumented minus plain step: {b.instrumentation_overhead_ms:.4g} ms"
        " (the marks' cost plus step-to-step variation)"
        for b in breakdowns
    ]
    if breakdowns[0].unmatched_marks:
        notes.append(
            f"{breakdowns[0].unmatched_marks} forward passes begun in recomputation never ended: torch.utils.checkpoint "
            "stops re-running a layer once it has rebuilt what the backward needs; their time stays in the "
            "recompute windows and in other"
        )
    if case.device != "cuda":
        notes.append(f"GPU idle share: {breakdowns[0].activity_method}")
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

PHASES = ("forward", "backward", "optimizer")
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
    return charts.Stack(label=_label(case), segments=[
        charts.Segment(label=label, value=_ms(result, metric))
        for metric, label in PART_LABELS.items() if metric in result.metrics and result.metrics[metric].mean > 0
    ])  # fmt: skip


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
        caption="Each part's forward, backward and recomputation time per step, summed over the layers, grouped as "
                f"the paper's Tables V-VIII group them; other: instrumented step time inside no part. {runs}",
    ))  # fmt: skip
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
