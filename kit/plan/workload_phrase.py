"""A case's workload in one short phrase ("llama2-7b pre-train z3, seq 350, mb 1, bf16, ZeRO-3"), for
page one beside each headline figure and for each line of an acceptance decision: a figure read
without its workload compares with nothing."""

from __future__ import annotations

from kit.plan.protocol import Case, CommParams, ServeParams, TrainParams
from kit.units import binary_size

STAGE_WORDS = {
    "pretrain": "pre-train",
    "finetune": "fine-tune",
    "scaling": "pre-train",
    "maxbatch": "largest micro-batch",
    "profile": "profiled step",
}


def _training_options(params: TrainParams) -> list[str]:
    options = [f"ZeRO-{params.zero_stage}"] if params.zero_stage else []
    options += ["offload"] if params.offload else []
    options += ["4-bit base"] if params.quantization != "none" else []
    options += [f"LoRA r{params.lora_rank}"] if params.peft != "none" else []
    options += ["recompute"] if params.recompute else []
    options += [params.attention] if params.attention != "eager" else []
    options += [f"Megatron TP{params.tensor_parallel}"] if params.framework == "megatron" else []
    return options


def workload_phrase(case: Case) -> str:
    """The case's workload as a reader compares two figures by: what ran, its shape and precision."""
    params = case.params
    if isinstance(params, ServeParams):
        head = f"{case.model} {params.engine or case.method}"
    elif isinstance(params, CommParams):
        head = params.collective or case.method
    elif case.step is None:
        return case.id
    else:
        head = f"{case.model} {STAGE_WORDS.get(case.stage, case.stage)} {case.method}"
    return f"{head}, {workload_shape(case)}"


def workload_shape(case: Case) -> str:
    """The workload without what ran (its model, method or engine): where a row's name says that already."""
    params = case.params
    if isinstance(params, ServeParams):
        return f"{params.input_tokens} in / {params.max_output_tokens} out, burst of {params.prompts}, {params.dtype}"
    if isinstance(params, CommParams):
        return f"{params.dtype}, {params.backend}, up to {binary_size(params.max_bytes)}"
    step = case.step
    if step is None:
        return case.id
    parts = [
        f"seq {step.seq_len}",
        f"mb {step.micro_batch}" if case.max_batch_search is None else "micro-batch searched",
        step.dtype,
    ]
    if isinstance(params, TrainParams):
        parts += _training_options(params)
    return ", ".join(parts)
