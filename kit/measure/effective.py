"""The effective configuration of a training case: is what its method names in effect in the
running engine?

A method's options (ZeRO stage, offload, recomputation, attention kernel, 4-bit quantisation,
LoRA) are requests; a framework can leave one off without complaint (transformers checkpoints
activations only in training mode; DeepSpeed falls back quietly where a config key is missing).
The workload reads what the engine reports (kit/workloads/observe.py) and judges it here, option
by option, against what the case asked for; the runner merges the ranks' judgements into
Result.effective, and a case whose option is not in effect ends `error`, never `ok`.

Pure: no framework imported. Each judge takes what was read and returns an EffectiveOption.
"""

from __future__ import annotations

from kit.plan.protocol import Case, TrainParams
from kit.rundir.schema import EffectiveOption, RunSample, TrainDetails
from kit.theory.analytic import DECODER_LINEARS, lora_parameter_count

# Option -> how a reason names it ("recomputation requested but not active: ...").
LABELS = {
    "framework": "training engine",
    "zero_stage": "ZeRO stage",
    "offload": "offload",
    "recompute": "recomputation",
    "attention": "attention implementation",
    "quantization": "4-bit quantisation",
    "lora": "LoRA",
}
ATTENTION_NAMES = {
    "eager": "eager (matmul, softmax, matmul)",
    "sdpa": "PyTorch SDPA",
    "flash_attention_2": "FlashAttention-2",
}


def options_of(params: TrainParams) -> list[str]:
    """The options a training case's method sets. The ZeRO stage and the attention kernel are
    always chosen (Naive is stage 0; "FlashAttention off" is eager attention); the others only
    where the method names them."""
    if params.framework == "megatron":  # its engine, parallel layout and optimizer in one judgement
        return ["framework", "attention"]
    names = ["zero_stage", "attention"]
    names += ["offload"] if params.offload else []
    names += ["recompute"] if params.recompute else []
    names += ["quantization"] if params.quantization != "none" else []
    names += ["lora"] if params.peft != "none" else []
    return [name for name in LABELS if name in names]


# --- Judges: what was asked, against what the engine reported ------------------------------------


def zero_stage(requested: int, stage: int) -> EffectiveOption:
    return EffectiveOption(
        requested=f"ZeRO-{requested}" if requested else "no ZeRO (stage 0)",
        observed=f"stage {stage}",
        in_effect=stage == requested,
        evidence="engine.zero_optimization_stage()",
    )


def offload(
    with_parameters: bool,
    optimizer_flag: bool,
    optimizer_devices: list[str],
    parameter_flag: bool | None,
    parameter_devices: list[str],
    optimizer_class: str,
) -> EffectiveOption:
    """Optimizer states offloaded when the ZeRO optimizer says so and its fp32 partitions live
    in host memory; parameters (ZeRO-3) likewise, from their partitions' (ds_tensor) devices."""

    def where(devices: list[str]) -> str:
        return "/".join(sorted(set(devices))) or "none found"

    observed = f"optimizer states on {where(optimizer_devices)} (offload flag {optimizer_flag})"
    in_effect = optimizer_flag and bool(optimizer_devices) and set(optimizer_devices) == {"cpu"}
    evidence = f"{optimizer_class}: offload flag, device of its fp32 partitions"
    if with_parameters:
        observed += f"; parameters on {where(parameter_devices)} (offload flag {parameter_flag})"
        in_effect = in_effect and bool(parameter_flag) and bool(parameter_devices) and set(parameter_devices) == {"cpu"}
        evidence += "; offload_param flag, device of every parameter's ds_tensor"
    return EffectiveOption(
        requested="optimizer states and parameters to cpu" if with_parameters else "optimizer states to cpu",
        observed=observed,
        in_effect=in_effect,
        evidence=evidence,
    )


def recompute(layers: int, training_layers: int, checkpointing_layers: int, calls: int) -> EffectiveOption:
    """Every decoder layer recomputed: each in training mode with checkpointing on (transformers
    checkpoints only then), and each called through the checkpoint function in the step."""
    return EffectiveOption(
        requested=f"on, every decoder layer ({layers})",
        observed=(
            f"{training_layers} of {layers} decoder layers in training mode, checkpointing on in "
            f"{checkpointing_layers}; {calls} checkpointed layer calls in the first measured step"
        ),
        in_effect=training_layers == checkpointing_layers == layers and calls >= layers,
        evidence="module.training and module.gradient_checkpointing of each decoder layer; calls of its "
        "_gradient_checkpointing_func counted during the step",
    )


def attention(requested: str, configured: str | None, layers: int, calls: int) -> EffectiveOption:
    """The kernel the method names, configured on the model and called by every decoder layer."""
    return EffectiveOption(
        requested=ATTENTION_NAMES.get(requested, requested),
        observed=f"config._attn_implementation={configured}; {calls} calls of its attention function in the first "
        f"measured step ({layers} decoder layers)",
        in_effect=configured == requested and calls >= layers,
        evidence="model.config._attn_implementation; calls of transformers' attention function for it "
        "(AttentionInterface) counted during the step",
    )


def quantization(expected_modules: int, compute_dtype: str, found: list[tuple[str, bool, str]]) -> EffectiveOption:
    """NF4 with double quantisation in every decoder linear layer, computing in the case's dtype;
    `found` holds (quant_type, double_quant, compute_dtype) of each 4-bit linear module."""
    kinds = sorted({f"{quant_type}, double quant {nested}, compute {dtype}" for quant_type, nested, dtype in found})
    right = [f for f in found if f == ("nf4", True, compute_dtype)]
    return EffectiveOption(
        requested=f"NF4 with double quantisation, compute {compute_dtype}, in the {expected_modules} decoder linear layers",
        observed=f"{len(found)} 4-bit linear modules: {'; '.join(kinds) or 'none'}",
        in_effect=len(found) == expected_modules and len(right) == len(found),
        evidence="bitsandbytes Linear4bit modules counted; quant_state.quant_type, quant_state.nested, compute_dtype",
    )


def lora(predicted: int, counted: int, rank: int) -> EffectiveOption:
    return EffectiveOption(
        requested=f"rank {rank} adapters: {predicted} trainable parameters (kit.theory.analytic.lora_parameter_count)",
        observed=f"{counted} trainable parameters",
        in_effect=counted == predicted,
        evidence="parameters with requires_grad counted on the engine's module (ds_numel under ZeRO-3)",
    )


def expected_lora_parameters(case: Case) -> int:
    params = case.params_as(TrainParams)
    return lora_parameter_count(case.model_shape, params.lora_rank, params.lora_targets or DECODER_LINEARS)


def expected_quantized_modules(case: Case) -> int:
    """bitsandbytes replaces every decoder linear layer; the LM head stays (transformers keeps it)."""
    return case.model_shape.num_layers * len(DECODER_LINEARS)


# --- Over the ranks and runs ----------------------------------------------------------------------


def merge(case: Case, runs: list[RunSample]) -> tuple[dict[str, EffectiveOption], str | None]:
    """One judgement per option from every rank of every run that recorded one, and why the case
    cannot be `ok`: an option not in effect, ranks that disagree, or an option not reported."""
    if case.workload != "train":
        return {}, None
    merged: dict[str, EffectiveOption] = {}
    for run in runs:
        for rank in run.ranks:
            if rank.status != "ok":
                continue
            details = rank.details_as(TrainDetails)
            reported = details.effective if details is not None else {}
            missing = [
                LABELS.get(name, name) for name in options_of(case.params_as(TrainParams)) if name not in reported
            ]
            if missing:
                return merged, f"run {run.index}, rank {rank.rank} did not report its {', '.join(missing)}"
            for name, option in reported.items():
                first = merged.setdefault(name, option)
                if first != option:
                    return merged, (
                        f"ranks disagree on the {LABELS.get(name, name)}: {first.observed!r} vs "
                        f"{option.observed!r} (run {run.index}, rank {rank.rank})"
                    )
    for name, option in merged.items():
        if not option.in_effect:
            return (
                merged,
                f"{LABELS.get(name, name)} requested but not active: asked for {option.requested}; {option.observed}",
            )
    return merged, None


def judged(case: Case, run: RunSample) -> RunSample:
    """A run whose processes all succeeded but whose engine did not do what the method names is
    an error, so that no figure of it is reported as the method's."""
    if run.status != "ok":
        return run
    _, problem = merge(case, [run])
    if problem is None:
        return run
    return run.model_copy(update={"status": "error", "reason": problem})
