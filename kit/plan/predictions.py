"""The analytical model beside every measurement: what a case must need, how fast it can possibly
run, and the flags for measured values that the model shows to be impossible.

kit.theory.analytic holds the formulas (FLOPs, bytes, memory of a Llama shape); this module applies
them to a Case and to a GPU's entry in manifests/hardware.yaml. Pure: no framework imported.
Every bound here uses ideal hardware (the datasheet peak, efficiency 1.0), so a measurement
below it is impossible and is flagged rather than reported as a fact.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, computed_field

from kit.plan.protocol import Case, ServeParams, StepParams, TrainParams
from kit.theory.analytic import (
    ADAM_MIXED_PRECISION_BYTES_PER_PARAM,
    DECODER_LINEARS,
    FP32_GRADIENT_BYTES,
    LatencyBound,
    TrainingMemory,
    attention_matmul_flops_per_token,
    base_weight_bytes,
    decode_flops_per_token,
    decode_latency_lower_bound,
    decode_step_bytes,
    hardware_flops_per_token,
    prefill_bytes,
    prefill_flops,
    prefill_latency_lower_bound,
    roofline,
    training_memory_per_gpu,
    weight_bytes_read_per_forward,
)
from kit.theory.hardware import GpuSpec, HardwareTable, peak_tflops

GIB = 1024**3
BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp32": 4}
# fp32 training keeps no master copy: Adam's momentum and variance, 4 bytes each (ZeRO, sec. 3.1).
ADAM_FP32_BYTES_PER_PARAM = 8
# bitsandbytes' 8-bit AdamW: momentum and variance in one byte each, block-wise quantised (one
# fp32 constant per 2048 values, left out) (Dettmers et al. 2022, "8-bit Optimizers via Block-wise
# Quantization", arXiv:2110.02861, sec. 2); in 16-bit training over DeepSpeed's fp32 master copy.
ADAM_8BIT_BYTES_PER_PARAM = 2
FP32_MASTER_BYTES = 4


# --- Memory -----------------------------------------------------------------------------------


class MemoryPrediction(BaseModel):
    """Bytes per GPU the model predicts for a case, and what the prediction assumed (or why
    there is none)."""

    model_config = ConfigDict(frozen=True)

    memory: TrainingMemory | None
    basis: str


def predicted_training_memory(case: Case) -> MemoryPrediction:
    """kit.theory.analytic.training_memory_per_gpu with the case's ZeRO stage, offload, recomputation,
    attention kernel, PEFT method and world size."""
    params = case.params
    if case.shape is None or params.kind not in ("train", "profile"):
        return MemoryPrediction(memory=None, basis="not predicted: not a training case")
    element = BYTES_PER_ELEMENT[params.dtype]
    flash = params.attention == "flash_attention_2"
    if params.kind == "profile":
        # The profile step is plain torch AdamW on the parameters as loaded: its two states take
        # the parameters' dtype, and there is no fp32 master copy (kit/workloads/step_timeline.py).
        memory = training_memory_per_gpu(
            case.shape,
            world_size=1,
            zero_stage=0,
            micro_batch=params.micro_batch,
            seq_len=params.seq_len,
            recompute=params.recompute,
            flash_attention=flash,
            weight_bytes=element,
            grad_bytes=element,
            optimizer_bytes_per_param=2 * element,
            activation_bytes=element,
            master_gradient_bytes=0,
        )
        basis = (
            f"one GPU, no ZeRO, torch AdamW with {params.dtype} states (no fp32 master copy), "
            f"micro-batch {params.micro_batch} x {params.seq_len}"
            f"{', recomputation' if params.recompute else ''}{', FlashAttention' if flash else ''}"
        )
        return MemoryPrediction(memory=memory, basis=basis)
    # 4-bit pre-training hands DeepSpeed a client optimizer (8-bit AdamW, kit/workloads/train.py)
    # that steps an fp32 master copy of the trained parameters; their fp32 gradients exist only
    # within that step, after the activations are gone, so they add nothing to the peak (H200,
    # micro-batch 2: 9.83 GiB allocated, tests/fixtures/gpu_results; 9.3 GiB predicted).
    quantized_linears = params.quantization != "none" and params.peft == "none"
    if quantized_linears:
        optimizer = ADAM_8BIT_BYTES_PER_PARAM + (FP32_MASTER_BYTES if element == 2 else 0)
    else:
        optimizer = ADAM_MIXED_PRECISION_BYTES_PER_PARAM if element == 2 else ADAM_FP32_BYTES_PER_PARAM
    if params.framework == "megatron":
        return _megatron_memory(case, element, optimizer)
    offload_params = params.offload and params.zero_stage == 3
    memory = training_memory_per_gpu(
        case.shape,
        world_size=case.gpus,
        zero_stage=params.zero_stage,
        micro_batch=params.micro_batch,
        seq_len=params.seq_len,
        recompute=params.recompute,
        flash_attention=flash,
        offload_optimizer=params.offload,
        offload_params=offload_params,
        weight_bytes=element,
        grad_bytes=element,
        optimizer_bytes_per_param=optimizer,
        peft=None if params.peft == "none" else params.peft,
        quantized_linears=quantized_linears,
        lora_rank=params.lora_rank,
        lora_targets=params.lora_targets or DECODER_LINEARS,
        activation_bytes=element,
        master_gradient_bytes=FP32_GRADIENT_BYTES if element == 2 and not quantized_linears else 0,
    )
    offload = ("optimizer states and parameters" if offload_params else "optimizer states") if params.offload else None
    parts = [f"ZeRO-{params.zero_stage}" if params.zero_stage else "no ZeRO", f"world size {case.gpus}"]
    parts += [f"offload of {offload}"] if offload else []
    parts += ["recomputation"] if params.recompute else []
    parts += ["FlashAttention"] if flash else []
    parts += [f"{params.peft} rank {params.lora_rank}"] if params.peft != "none" else []
    if quantized_linears:
        parts.append(
            f"decoder linears frozen in NF4, the rest {params.dtype} with 8-bit AdamW states"
            + (" over an fp32 master copy" if element == 2 else "")
        )
    else:
        parts.append(f"{params.dtype} with {'mixed-precision ' if element == 2 else ''}Adam states")
    return MemoryPrediction(memory=memory, basis=", ".join(parts))


def describe_memory(prediction: MemoryPrediction) -> str:
    """One line for a result's notes: the predicted total per GPU and its parts, in GiB."""
    memory = prediction.memory
    if memory is None:
        return f"predicted peak memory: {prediction.basis}"
    line = (
        f"predicted peak memory per GPU {memory.total / GIB:.3g} GiB (weights {memory.weights / GIB:.3g}, "
        f"gradients {memory.gradients / GIB:.3g}, optimizer states {memory.optimizer_states / GIB:.3g}, "
        f"activations {memory.activations / GIB:.3g}"
        + (f", ZeRO-3 gathered layers {memory.gathered_parameters / GIB:.3g}" if memory.gathered_parameters else "")
    )
    if memory.offloaded_to_host:
        line += f"; {memory.offloaded_to_host / GIB:.3g} GiB offloaded to host memory"
    return line + f"; {prediction.basis}; kit.theory.analytic.training_memory_per_gpu)"


def _megatron_memory(case: Case, element: int, optimizer_bytes: float) -> MemoryPrediction:
    """megatron-core as kit/workloads/megatron_train.py configures it: its distributed optimizer shards
    the fp32 main weights and Adam states over the data-parallel ranks (as ZeRO-1 does), and the
    gradients live whole in an fp32 buffer (grad_reduce_in_fp32)."""
    params = case.params_as(TrainParams)
    if params.tensor_parallel > 1:
        return MemoryPrediction(memory=None, basis="not predicted: tensor parallelism is not in the memory model")
    memory = training_memory_per_gpu(
        case.model_shape,
        world_size=case.gpus,
        zero_stage=1,
        micro_batch=params.micro_batch,
        seq_len=params.seq_len,
        recompute=False,
        flash_attention=False,
        weight_bytes=element,
        grad_bytes=4,
        optimizer_bytes_per_param=optimizer_bytes,
        activation_bytes=element,
        master_gradient_bytes=0,
    )
    return MemoryPrediction(
        memory=memory,
        basis=f"Megatron-LM, distributed optimizer over {case.gpus} data-parallel ranks "
        f"(as ZeRO-1), fp32 gradient buffer, {params.dtype}",
    )


def device_memory_bytes(spec: GpuSpec) -> float | None:
    """The GPU's memory in bytes, in the unit its datasheet states (GB = 10^9, GiB = 2^30)."""
    figure = spec.memory
    if figure.value is None:
        return None
    return figure.value * (1e9 if figure.unit == "GB" else GIB)


def host_gpu_spec(gpu_names: Sequence[str], gpus: int, table: HardwareTable) -> GpuSpec | None:
    """The hardware entry of the GPUs a case would use (the host's first `gpus`), when they are
    all one known model; None otherwise."""
    used = list(gpu_names[:gpus])
    if not used:
        return None
    specs = [table.lookup(name) for name in used]
    if any(spec is None or spec != specs[0] for spec in specs):
        return None
    return specs[0]


def predicted_oom(case: Case, spec: GpuSpec | None, capacity_bytes: int | None = None) -> str | None:
    """The skip reason of a GPU case whose predicted memory exceeds the device's, or None.

    `capacity_bytes` is what NVML reports of the host's GPU (its total memory in bytes); without
    it, the datasheet's figure in hardware.yaml (a "24 GB" card holds 24 GiB: the datasheet's
    unit is taken as written, so it is only the fallback). The prediction leaves out
    communication buckets, fragmentation and the CUDA context, so a case it says does not fit
    cannot fit; one it says fits may still run out of memory."""
    if case.device != "cuda":
        return None
    if capacity_bytes is not None:
        capacity, where = float(capacity_bytes), f"the GPU has {capacity_bytes / GIB:.1f} GiB (NVML)"
    elif spec is not None and (datasheet := device_memory_bytes(spec)) is not None:
        capacity = datasheet
        where = f"device has {spec.memory.value:g} {spec.memory.unit} (datasheet, hardware.yaml)"
    else:
        return None
    prediction = predicted_training_memory(case)
    if prediction.memory is None or prediction.memory.total <= capacity:
        return None
    return f"predicted OOM (needs {prediction.memory.total / GIB:.1f} GiB per GPU, {where})"


def memory_below_weights(measured_bytes: float, prediction: MemoryPrediction) -> str | None:
    """Flag a measured peak that cannot hold the weights the GPU must keep."""
    memory = prediction.memory
    if memory is None or measured_bytes >= memory.weights:
        return None
    return (
        f"measured peak memory {measured_bytes / GIB:.3g} GiB is below the weights this GPU must hold "
        f"({memory.weights / GIB:.3g} GiB): impossible, so the memory measurement is wrong"
    )


# --- Time bounds ------------------------------------------------------------------------------


def _bandwidth_gb_s(spec: GpuSpec) -> float | None:
    value = spec.memory_bandwidth_tb_per_s.value
    return None if value is None else value * 1000


def training_step_bound(case: Case, spec: GpuSpec | None) -> LatencyBound | None:
    """Least time of one training step on one GPU of a full-training case at the datasheet peak.

    Compute: the FLOPs the GPU must execute per step (kit.theory.analytic.hardware_flops_per_token over
    the GPU's micro-batch, recomputation included), with the attention score and value matmuls
    counted at half, since causal kernels may skip the masked half. Memory: every weight read
    once. A case whose decoder linears are frozen (4-bit, LoRA, QLoRA) skips their weight
    gradients, and reads its 4-bit weights in 4 bits. None where a peak is unknown."""
    params = case.params
    if (
        spec is None
        or case.shape is None
        or params.kind not in ("train", "profile")
        or params.dtype not in ("bf16", "fp16")
    ):
        return None
    peak = peak_tflops(spec, params.dtype)
    if peak is None:
        return None
    frozen = params.kind == "train" and (params.quantization != "none" or params.peft != "none")
    passes = 4 if params.recompute else 3
    per_token = hardware_flops_per_token(case.shape, params.seq_len, params.recompute, frozen_linears=frozen)
    per_token -= passes * attention_matmul_flops_per_token(case.shape, params.seq_len) / 2
    flops = per_token * params.tokens_per_step
    bandwidth = _bandwidth_gb_s(spec)
    if bandwidth is None:
        return LatencyBound(compute_s=flops / (peak * 1e12), memory_s=0.0)
    element = BYTES_PER_ELEMENT[params.dtype]
    if params.kind == "train" and params.quantization != "none":
        weights = base_weight_bytes(case.shape, element, quant_bits=4)
        weights -= 0 if case.shape.tie_embeddings else case.shape.vocab_size * case.shape.hidden_size * element
    else:
        weights = weight_bytes_read_per_forward(case.shape, element)
    return roofline(flops, weights, peak, bandwidth)


def training_throughput_bound(case: Case, spec: GpuSpec | None) -> float | None:
    """Most tokens/s a full-training case can reach on `spec`: every data-parallel GPU runs its
    micro-batch in training_step_bound's least time. None where that bound is None, or with
    tensor parallelism, whose split layers the bound does not model."""
    if case.train is not None and case.train.tensor_parallel > 1:
        return None
    bound = training_step_bound(case, spec)
    if bound is None:
        return None
    return case.params_as(StepParams).tokens_per_step * case.gpus / bound.seconds


def below_bound(what: str, measured_s: float, bound: LatencyBound | None) -> str | None:
    """Flag a measured time shorter than the physical lower bound."""
    if bound is None or measured_s >= bound.seconds:
        return None
    return (
        f"{what} {measured_s:.4g} s is below its lower bound {bound.seconds:.4g} s ({bound.limited_by}-bound "
        "at the GPU's datasheet peak): impossible, so the measurement or the peak is wrong"
    )


class ServingBounds(BaseModel):
    """Least times of a serving case at the datasheet peaks, with its GPUs splitting work and
    weight traffic perfectly (ideal tensor parallelism, free communication): no engine can beat
    them, so a measurement below one is impossible."""

    model_config = ConfigDict(frozen=True)

    gpus: int
    peak_tflops_per_gpu: float
    bandwidth_gb_s_per_gpu: float
    prompts: int
    input_tokens: int
    output_tokens: int
    prefill_one: LatencyBound  # time to first token of a prompt served alone
    decode_step_one: LatencyBound  # any decode step of any request (one sequence, shortest context)
    request_latency_s: float  # a request served alone: its prefill plus each of its decode steps
    burst: LatencyBound  # the whole burst: every prompt prefilled, every output token generated
    basis: str

    # mypy cannot type a decorator over a property: pydantic documents this ignore for computed_field
    @computed_field  # type: ignore[prop-decorator]
    @property
    def max_output_tokens_per_s(self) -> float:
        """Upper bound on the burst's generated tokens per second."""
        return self.prompts * self.output_tokens / self.burst.seconds


def _serving_peaks(case: Case, gpu_spec: GpuSpec) -> tuple[float, float] | None:
    """The case's GPUs' summed dense peak (TFLOPS) and memory bandwidth (GB/s): ideal tensor
    parallelism; None where hardware.yaml lacks either for the case's dtype."""
    params = case.params
    if params.kind != "serve" or case.shape is None:
        raise ValueError(f"case {case.id} is not a serving case of a model")
    peak = peak_tflops(gpu_spec, params.dtype) if params.dtype in ("bf16", "fp16") else None
    bandwidth = _bandwidth_gb_s(gpu_spec)
    if peak is None or bandwidth is None:
        return None
    return peak * case.gpus, bandwidth * case.gpus


def _served_together(case: Case, batch: int, generated: int, peak: float, bandwidth: float) -> LatencyBound:
    """Least time to serve `batch` requests as one batch: compute is all their prefill and decode
    FLOPs; memory the least traffic, the weights read once per decode step and each sequence's KV
    cache once per step. The larger of the two totals, however an engine overlaps prefill and
    decode."""
    params = case.params_as(ServeParams)
    shape, prompt, element = case.model_shape, params.input_tokens, BYTES_PER_ELEMENT[params.dtype]
    contexts = range(prompt + 1, prompt + generated)  # token k > 1 comes from a step over prompt + k - 1
    flops = batch * prefill_flops(shape, prompt) + batch * sum(decode_flops_per_token(shape, c) for c in contexts)
    traffic = prefill_bytes(shape, prompt, batch, element, element)
    traffic += sum(decode_step_bytes(shape, c, batch, element, element) for c in contexts)
    return roofline(flops, traffic, peak, bandwidth)


def serving_bounds(case: Case, gpu_spec: GpuSpec, output_tokens: int | None = None) -> ServingBounds | None:
    """Prefill and decode lower bounds of a serving case on `gpu_spec`, or None where
    hardware.yaml lacks the GPU's peak FLOPS or memory bandwidth for the case's dtype.

    `output_tokens`: tokens generated per request (default: the case's max_output_tokens). A run
    whose requests stop early at end-of-sequence must pass the mean it generated, or the burst
    bound would count tokens never produced. Burst: every request served as one batch
    (_served_together).
    """
    peaks = _serving_peaks(case, gpu_spec)
    if peaks is None:
        return None
    params, (total_peak, total_bandwidth) = case.params_as(ServeParams), peaks
    shape, element = case.model_shape, BYTES_PER_ELEMENT[params.dtype]
    prompt, generated = params.input_tokens, output_tokens or params.max_output_tokens
    contexts = range(prompt + 1, prompt + generated)
    one_decode = [
        decode_latency_lower_bound(shape, c, 1, total_peak, total_bandwidth, element, element) for c in contexts
    ]
    prefill_one = prefill_latency_lower_bound(shape, prompt, 1, total_peak, total_bandwidth, element, element)
    return ServingBounds(
        gpus=case.gpus,
        peak_tflops_per_gpu=total_peak / case.gpus,
        bandwidth_gb_s_per_gpu=total_bandwidth / case.gpus,
        prompts=params.prompts,
        input_tokens=prompt,
        output_tokens=generated,
        prefill_one=prefill_one,
        decode_step_one=one_decode[0]
        if one_decode
        else decode_latency_lower_bound(shape, prompt + 1, 1, total_peak, total_bandwidth, element, element),
        request_latency_s=prefill_one.seconds + sum(bound.seconds for bound in one_decode),
        burst=_served_together(case, params.prompts, generated, total_peak, total_bandwidth),
        basis=(
            f"{gpu_spec.model} x {case.gpus} at the datasheet {params.dtype} dense peak and memory bandwidth, "
            f"ideal tensor parallelism, {params.dtype} weights and KV cache, {generated} tokens per request"
        ),
    )


class ConcurrencyBound(BaseModel):
    """The roofline of a point of the sweep: with N requests in flight, an engine at best serves
    them as one batch throughout, so that every N requests take at least the time of serving N
    together (_served_together), and a decode step of N sequences at least its own roofline
    (memory-bound decode: the weights and N KV caches read per step of N tokens)."""

    model_config = ConfigDict(frozen=True)

    concurrency: int
    output_tokens: int
    together: LatencyBound  # N requests served as one batch, prefill to last token
    min_tpot_s: float  # the mean of the decode steps of N sequences over a request's contexts
    basis: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def max_output_tokens_per_s(self) -> float:
        return self.concurrency * self.output_tokens / self.together.seconds


def concurrency_bound(
    case: Case, gpu_spec: GpuSpec, concurrency: int, output_tokens: int | None = None
) -> ConcurrencyBound | None:
    """The least time of a point of the sweep at `concurrency` on `gpu_spec` (see
    serving_bounds for `output_tokens` and None)."""
    peaks = _serving_peaks(case, gpu_spec)
    if peaks is None:
        return None
    params, (peak, bandwidth), shape = case.params_as(ServeParams), peaks, case.model_shape
    element, prompt = BYTES_PER_ELEMENT[params.dtype], params.input_tokens
    generated = output_tokens or params.max_output_tokens
    steps = [
        decode_latency_lower_bound(shape, c, concurrency, peak, bandwidth, element, element).seconds
        for c in range(prompt + 1, prompt + generated)
    ]
    return ConcurrencyBound(
        concurrency=concurrency,
        output_tokens=generated,
        together=_served_together(case, concurrency, generated, peak, bandwidth),
        min_tpot_s=sum(steps) / len(steps) if steps else 0.0,
        basis=f"{gpu_spec.model} x {case.gpus} at the datasheet {params.dtype} dense peak and memory bandwidth, "
        f"{concurrency} requests served as one batch",
    )


# --- Beside a measurement ---------------------------------------------------------------------


def device_spec(case: Case, device_names: Sequence[str], hardware: HardwareTable | None = None) -> GpuSpec | None:
    """The hardware entry of the one GPU model a GPU case ran on; None on a CPU, with mixed GPUs,
    or for a GPU hardware.yaml does not list."""
    names = sorted(set(device_names))
    if case.device != "cuda" or len(names) != 1:
        return None
    if hardware is None:
        from kit.theory.hardware import load_hardware

        hardware = load_hardware()
    return hardware.lookup(names[0])


def model_notes(
    case: Case,
    device_names: Sequence[str],
    step_s: Sequence[float],
    peak_memory_gib: Sequence[float],
    hardware: HardwareTable | None = None,
) -> list[str]:
    """What the analytical model says beside a training measurement: the predicted peak memory
    next to the measured one, the step time's physical lower bound on a known GPU, and a flag
    for each measured value (per run) the model shows to be impossible."""
    prediction = predicted_training_memory(case)
    where = (
        "device allocator peak" if case.device == "cuda" else "host peak RSS, which also counts the framework itself"
    )
    notes = [f"{describe_memory(prediction)}; measured {max(peak_memory_gib):.3g} GiB ({where})"]
    flag = memory_below_weights(min(peak_memory_gib) * GIB, prediction)
    if flag:
        notes.append(flag)
    spec = device_spec(case, device_names, hardware)
    bound = training_step_bound(case, spec)
    if spec is not None and bound is not None:
        notes.append(
            f"step time lower bound {bound.seconds:.4g} s ({bound.limited_by}-bound at the {spec.model} datasheet "
            "peak; kit.plan.predictions.training_step_bound)"
        )
        flag = below_bound("step time", min(step_s), bound)
        if flag:
            notes.append(flag)
    return notes
