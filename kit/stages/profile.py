"""The profile stage (paper Tables V-VIII): one Llama2-7B pre-training step dissected into its
phases, the paper's parts and blocks, and the GPU's idle share; the figures of each run come from
the breakdown its workload recorded (kit.breakdown), the section lists them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.analysis import achieved_tflops, mfu, model_flops_per_token
from kit.breakdown import OTHER_TOLERANCE, Breakdown
from kit.hardware import HardwareTable, peak_tflops
from kit.metrics import peak_memory_gib, summarize
from kit.predictions import device_spec, model_notes
from kit.protocol import Case
from kit.report.stage_common import generic_stage
from kit.results import Metric, RunSample
from kit.stages.unit import Stage

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
    instrumented steps; idle shares and kernel time from the profiled step (GPU only)."""
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
    if layers is not None:
        figures["decoder_layers_s"] = layers.total_ms / 1e3
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


PROFILE = Stage(
    name="profile", title="Module breakdown of a pre-training step", section=generic_stage,
    case_metrics=profile_case_metrics, headline="tokens_per_s",
    purpose="time per phase and per module of one Llama2-7B step, and the GPU idle share (paper Tables V-VIII)",
)  # fmt: skip
