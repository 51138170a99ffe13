"""The analytical model: FLOPs, bytes and memory of a Llama-family model, and derived metrics.

Every measurement in a report gets a predicted value and a physical limit beside it; this module
computes both from the model's shape alone, with no framework imported. Each formula is written
once here and every consumer (workloads, report) imports it.

Units: FLOPs, bytes and seconds; peaks in TFLOP/s (10^12 FLOP/s) and bandwidths in GB/s
(10^9 bytes/s), the units datasheets use.

Conventions, used throughout:
- Only matrix multiplications are counted, a multiply-accumulate being 2 FLOPs; norms, RoPE,
  softmax, SiLU and residual adds are element-wise and left out (Narayanan et al. 2021,
  "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
  arXiv:2104.04473, the FLOPs derivation in its appendix; "Narayanan 2021" below).
- The attention score (QK^T) and value (AV) matmuls are counted over the whole context, without
  halving for the causal mask, as Narayanan et al. 2021 and Chowdhery et al. 2022 ("PaLM",
  appendix B) do, so MFU is comparable with published figures. Kernels that skip masked blocks
  (FlashAttention) do less work than counted.
- The input embedding is a lookup: its weights are parameters and memory, never FLOPs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PositiveInt, computed_field, model_validator

# Mixed-precision Adam keeps an fp32 master copy, momentum and variance: 4 + 4 + 4 bytes per
# parameter, "K = 12" (Rajbhandari et al. 2020, "ZeRO", sec. 3.1).
ADAM_MIXED_PRECISION_BYTES_PER_PARAM = 12

# The decoder linear layers by their Hugging Face Llama module names. The kit's LoRA targets
# all of them by default ("all linear of attention and MLP"; PROTOCOL.md, stage 2).
DECODER_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LlamaShape(BaseModel):
    """The sizes that fix a Llama-family model's FLOPs and memory (weights do not matter)."""

    model_config = ConfigDict(frozen=True)

    hidden_size: PositiveInt
    num_layers: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    tie_embeddings: bool = False

    @model_validator(mode="after")
    def _heads_divide_evenly(self) -> LlamaShape:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_heads")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads")
        return self

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> LlamaShape:
        """Read a Hugging Face `config.json` of a Llama model (no key means no GQA, untied head)."""
        return cls(
            hidden_size=config["hidden_size"],
            num_layers=config["num_hidden_layers"],
            num_heads=config["num_attention_heads"],
            num_kv_heads=config.get("num_key_value_heads") or config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            vocab_size=config["vocab_size"],
            tie_embeddings=config.get("tie_word_embeddings", False),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection: grouped-query attention shares K/V between heads."""
        return self.num_kv_heads * self.head_dim


# --- Parameters -------------------------------------------------------------------------------


def decoder_linear_shapes(shape: LlamaShape) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each linear layer of one decoder layer, none with a bias.

    Attention: q and o are hidden x hidden; k and v project to num_kv_heads * head_dim (GQA,
    Ainslie et al. 2023). MLP: SwiGLU, down(silu(gate(x)) * up(x)) (Shazeer 2020; Touvron et al.
    2023, "Llama 2", sec. 2.2).
    """
    h, i = shape.hidden_size, shape.intermediate_size
    return {
        "q_proj": (h, shape.num_heads * shape.head_dim),
        "k_proj": (h, shape.kv_dim),
        "v_proj": (h, shape.kv_dim),
        "o_proj": (shape.num_heads * shape.head_dim, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def decoder_linear_parameter_count(shape: LlamaShape) -> int:
    """Weights of the linear layers of all decoder layers: the part QLoRA quantises."""
    per_layer = sum(n_in * n_out for n_in, n_out in decoder_linear_shapes(shape).values())
    return shape.num_layers * per_layer


def matmul_parameter_count(shape: LlamaShape) -> int:
    """Weights that take part in a matmul for every token: decoder linears plus the LM head."""
    return decoder_linear_parameter_count(shape) + shape.vocab_size * shape.hidden_size


def parameter_count(shape: LlamaShape) -> int:
    """All parameters: embedding, decoder layers (linears and two RMSNorm weights each), the final
    RMSNorm, and the LM head unless it shares the embedding matrix."""
    embedding = shape.vocab_size * shape.hidden_size
    norms = (2 * shape.num_layers + 1) * shape.hidden_size
    lm_head = 0 if shape.tie_embeddings else shape.vocab_size * shape.hidden_size
    return embedding + decoder_linear_parameter_count(shape) + norms + lm_head


def lora_parameter_count(shape: LlamaShape, rank: int, targets: tuple[str, ...] = DECODER_LINEARS) -> int:
    """Trainable LoRA weights: A (rank x in) and B (out x rank) per targeted linear layer
    (Hu et al. 2021, "LoRA", sec. 4.1)."""
    linears = decoder_linear_shapes(shape)
    unknown = set(targets) - set(linears)
    if unknown:
        raise ValueError(f"unknown LoRA targets {sorted(unknown)}; known: {list(linears)}")
    return shape.num_layers * sum(rank * (linears[name][0] + linears[name][1]) for name in targets)


# QLoRA's block sizes (Dettmers et al. 2023, "QLoRA", sec. 3): one fp32 absmax per 64 weights;
# double quantisation stores those constants in 8 bits, with one fp32 constant per 256 of them.
QLORA_BLOCK_SIZE = 64
DOUBLE_QUANT_BLOCK_SIZE = 256
DOUBLE_QUANT_CONSTANT_BITS = 8
FP32_BYTES = 4
FP32_BITS = 8 * FP32_BYTES


def quantized_bits_per_param(bits: int = 4, double_quant: bool = True) -> float:
    """Storage of one blockwise-quantised weight, its share of the constants included: 32/64 =
    0.5 extra bits, or 8/64 + 32/(64 x 256) = 0.127 with double quantisation (QLoRA, sec. 3)."""
    if not double_quant:
        return bits + FP32_BITS / QLORA_BLOCK_SIZE
    return (
        bits + DOUBLE_QUANT_CONSTANT_BITS / QLORA_BLOCK_SIZE + FP32_BITS / (QLORA_BLOCK_SIZE * DOUBLE_QUANT_BLOCK_SIZE)
    )


def base_weight_bytes(shape: LlamaShape, weight_bytes: float = 2, quant_bits: int | None = None) -> float:
    """Bytes of the model's own weights, optionally with the decoder linears quantised (QLoRA).

    bitsandbytes, through transformers, replaces the decoder's nn.Linear layers and keeps the LM
    head in the original precision; embedding and norms are not linear layers, so they stay too.
    """
    if quant_bits is None:
        return parameter_count(shape) * weight_bytes
    quantised = decoder_linear_parameter_count(shape)
    kept = parameter_count(shape) - quantised
    return quantised * quantized_bits_per_param(quant_bits) / 8 + kept * weight_bytes


# --- FLOPs ------------------------------------------------------------------------------------


def attention_matmul_flops_per_token(shape: LlamaShape, context_len: int) -> float:
    """QK^T and AV of one token against `context_len` positions, all layers: 2 matmuls x 2 FLOPs
    x context_len x (num_heads * head_dim) per layer (Narayanan 2021: 4Bs^2h per layer for B*s
    tokens). GQA does not change it: every query head still attends."""
    return 2 * 2 * context_len * shape.num_heads * shape.head_dim * shape.num_layers


def decoder_forward_flops_per_token(shape: LlamaShape, context_len: int) -> float:
    """One token through all decoder layers: 2 FLOPs per linear weight plus attention."""
    linears = 2 * decoder_linear_parameter_count(shape)
    return linears + attention_matmul_flops_per_token(shape, context_len)


def lm_head_flops_per_token(shape: LlamaShape) -> float:
    """The logits of one token: 2 x hidden x vocabulary (Narayanan 2021: 2BshV)."""
    return 2 * shape.hidden_size * shape.vocab_size


def forward_flops_per_token(shape: LlamaShape, seq_len: int) -> float:
    """One training token's forward pass, every token attending over `seq_len` positions.

    Equals 2 x matmul_parameter_count + 4 * L * h * seq_len. For a GPT layer (MLP of 4h, no GQA)
    this is 24Lh^2 + 4Lhs + 2hV, one pass of Narayanan 2021's formula per token.
    """
    return decoder_forward_flops_per_token(shape, seq_len) + lm_head_flops_per_token(shape)


def model_flops_per_token(shape: LlamaShape, seq_len: int) -> float:
    """Training FLOPs per token that MFU counts: forward plus a backward of twice the forward
    (one matmul for the input gradient, one for the weight gradient; Narayanan 2021).
    Recomputation is deliberately excluded (Chowdhery et al. 2022, appendix B)."""
    return 3 * forward_flops_per_token(shape, seq_len)


def hardware_flops_per_token(shape: LlamaShape, seq_len: int, recompute: bool, frozen_linears: bool = False) -> float:
    """Training FLOPs per token the GPUs execute. Full activation recomputation runs the decoder
    layers' forward once more; the LM head sits outside the checkpointed layers and is not
    recomputed (Narayanan 2021 count the transformer layers four times and the logit layer three
    times; Hugging Face's gradient checkpointing wraps the decoder layers only). With the decoder
    linears frozen (4-bit pre-training, LoRA, QLoRA) their weight gradients are never computed,
    while the input gradients still flow back to the embedding or the adapters; the adapters'
    own few FLOPs are left out, so this stays a floor."""
    extra = decoder_forward_flops_per_token(shape, seq_len) if recompute else 0.0
    skipped = 2 * decoder_linear_parameter_count(shape) if frozen_linears else 0.0
    return model_flops_per_token(shape, seq_len) + extra - skipped


def prefill_flops(shape: LlamaShape, prompt_len: int) -> float:
    """The forward over a prompt of one sequence. Only the last position's logits are needed to
    sample the first token (serving engines compute just those), so the LM head runs once."""
    decoder = prompt_len * decoder_forward_flops_per_token(shape, prompt_len)
    return decoder + lm_head_flops_per_token(shape)


def decode_flops_per_token(shape: LlamaShape, context_len: int) -> float:
    """One generated token of one sequence, attending over `context_len` positions (itself
    included)."""
    return decoder_forward_flops_per_token(shape, context_len) + lm_head_flops_per_token(shape)


# --- Bytes moved and held in inference --------------------------------------------------------


def kv_cache_bytes(shape: LlamaShape, tokens: int, bytes_per_elem: float) -> float:
    """K and V of `tokens` positions in every layer: 2 x L x num_kv_heads x head_dim per token."""
    return 2 * shape.num_layers * shape.kv_dim * tokens * bytes_per_elem


def weight_bytes_read_per_forward(shape: LlamaShape, weight_bytes: float) -> float:
    """Weights one forward step reads from memory: all of them, except that an untied input
    embedding is only gathered row by row (negligible beside the rest)."""
    gathered_only = 0 if shape.tie_embeddings else shape.vocab_size * shape.hidden_size
    return (parameter_count(shape) - gathered_only) * weight_bytes


def prefill_bytes(shape: LlamaShape, prompt_len: int, batch: int, weight_bytes: float, kv_bytes: float) -> float:
    """Least memory traffic of prefilling `batch` prompts: weights read once, K/V written once."""
    weights = weight_bytes_read_per_forward(shape, weight_bytes)
    return weights + batch * kv_cache_bytes(shape, prompt_len, kv_bytes)


def decode_step_bytes(shape: LlamaShape, context_len: int, batch: int, weight_bytes: float, kv_bytes: float) -> float:
    """Least memory traffic of one decode step, which yields one token for each of `batch`
    sequences: the weights are read once for the whole batch; each sequence reads the K/V of its
    context_len - 1 earlier positions and writes those of the new one."""
    weights = weight_bytes_read_per_forward(shape, weight_bytes)
    return weights + batch * kv_cache_bytes(shape, context_len, kv_bytes)


class ServingMemory(BaseModel):
    """Device memory a served model holds, in bytes (engine workspace and activations excluded)."""

    model_config = ConfigDict(frozen=True)

    weights: float
    kv_cache: float

    # mypy cannot type a decorator over a property: pydantic documents this ignore for computed_field
    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> float:
        return self.weights + self.kv_cache


def serving_memory(
    shape: LlamaShape, batch: int, context_len: int, weight_bytes: float, kv_bytes: float
) -> ServingMemory:
    """Weights plus a full KV cache for `batch` sequences of `context_len` tokens each."""
    return ServingMemory(
        weights=parameter_count(shape) * weight_bytes,
        kv_cache=batch * kv_cache_bytes(shape, context_len, kv_bytes),
    )


# Serving engines leave part of each GPU to the CUDA context, the activations of their profiling
# forward and the sampler: vLLM's `gpu_memory_utilization` and LightLLM's `mem_fraction` both
# default to 0.9 (vLLM engine arguments; LightLLM api_cli.py).
SERVING_MEMORY_SHARE = 0.9


def tensor_parallel_sizes(shape: LlamaShape, most: int) -> list[int]:
    """The tensor-parallel sizes an engine can split `shape` over, at most `most`, smallest first:
    powers of two that divide the attention heads, and the KV heads or are a multiple of them
    (vLLM replicates KV heads when there are fewer than ranks)."""
    sizes, size = [], 1
    while size <= most:
        if shape.num_heads % size == 0 and (shape.num_kv_heads % size == 0 or size % shape.num_kv_heads == 0):
            sizes.append(size)
        size *= 2
    return sizes


def serving_gpus_needed(
    shape: LlamaShape, sizes: list[int], capacity_bytes: float, context_len: int, element_bytes: float
) -> int | None:
    """The fewest of `sizes` GPUs whose share of memory (SERVING_MEMORY_SHARE) holds the weights
    and the KV cache of one sequence of `context_len` tokens, split evenly over them: what an
    engine must fit before it can serve anything. None where not even the largest does."""
    need = serving_memory(shape, 1, context_len, element_bytes, element_bytes).total
    return next((size for size in sizes if need / size <= SERVING_MEMORY_SHARE * capacity_bytes), None)


# --- Training memory --------------------------------------------------------------------------


def layer_activation_bytes(
    shape: LlamaShape,
    micro_batch: int,
    seq_len: int,
    flash_attention: bool = False,
    activation_bytes: float = 2,
) -> float:
    """Activations one decoder layer keeps for its backward pass, no recomputation, no tensor
    parallelism.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
    arXiv:2205.05198, sec. 4.1) count sbh(34 + 5as/h) bytes for a GPT layer in 16 bits. Adapted
    to Llama, element by element (s sequence, b micro-batch, h hidden, i intermediate,
    k = kv_dim, a heads): two RMSNorm inputs 2sbh; q/k/v input sbh; Q sbh; K and V 2sbk;
    softmax output as^2b; o_proj input sbh; gate/up input sbh; gate and up outputs 2sbi; SiLU
    output sbi; down_proj input sbi. Total sb(6h + 2k + 4i) + as^2b elements.
    Llama-2 has no dropout, which removes Korthikanti's masks and dropout outputs; SwiGLU keeps
    four i-wide tensors where GeLU keeps two 4h-wide ones. FlashAttention (Dao et al. 2022) keeps
    no score matrix, only an fp32 log-sum-exp per head and position (4asb bytes). These are the
    tensors the backward pass needs; eager code keeps more (e.g. fp32 copies inside Hugging
    Face's RMSNorm, and K/V repeated to all heads under GQA).
    """
    s, b, h = seq_len, micro_batch, shape.hidden_size
    per_token = 6 * h + 2 * shape.kv_dim + 4 * shape.intermediate_size
    linear_part = s * b * per_token * activation_bytes
    if flash_attention:
        return linear_part + FP32_BYTES * shape.num_heads * s * b
    return linear_part + shape.num_heads * s * s * b * activation_bytes


def training_activation_bytes(
    shape: LlamaShape,
    micro_batch: int,
    seq_len: int,
    recompute: bool,
    flash_attention: bool = False,
    activation_bytes: float = 2,
) -> float:
    """Activations of a whole training step at their peak (start of the backward pass).

    Without recomputation: every layer's activations. With full recomputation: each layer's
    input (2sbh per layer, as in Korthikanti et al. 2022) plus one layer's activations, rebuilt
    while that layer is back-propagated. Outside the layers (ibid., their output-layer term
    without dropout): the inputs of the final norm and of the LM head (2 x 2sbh) and fp32
    logits for the loss (4sbV).
    """
    s, b, h = seq_len, micro_batch, shape.hidden_size
    one_layer = layer_activation_bytes(shape, micro_batch, seq_len, flash_attention, activation_bytes)
    if recompute:
        layers = shape.num_layers * s * b * h * activation_bytes + one_layer
    else:
        layers = shape.num_layers * one_layer
    outside = 2 * s * b * h * activation_bytes + FP32_BYTES * s * b * shape.vocab_size
    return layers + outside


class TrainingMemory(BaseModel):
    """Bytes one GPU holds for a training step, by kind, and what was offloaded to host memory."""

    model_config = ConfigDict(frozen=True)

    weights: float
    gradients: float  # 16-bit gradients and, in mixed precision, the fp32 gradient partition
    optimizer_states: float
    activations: float
    offloaded_to_host: float
    gathered_parameters: float = 0.0  # ZeRO-3: the largest layer gathered, and the next prefetched

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer_states + self.activations + self.gathered_parameters

    @computed_field  # type: ignore[prop-decorator]
    @property
    def model_states(self) -> float:
        """Everything but the activations: what DeepSpeed's memory estimators count."""
        return self.total - self.activations


def largest_layer_parameter_count(shape: LlamaShape) -> int:
    """Parameters of the largest module that holds its own weights (the embedding or LM head for
    Llama), the unit ZeRO-3 gathers (DeepSpeed's model_to_params in runtime/zero/stage3.py)."""
    h, i = shape.hidden_size, shape.intermediate_size
    return max(shape.vocab_size * h, h * i, h * h)


# DeepSpeed's ZeRO-3 estimator (estimate_zero3_model_states_mem_needs, runtime/zero/stage3.py)
# counts 4 bytes per parameter of the largest layer on the GPU: that layer gathered in 16 bits
# while it computes, and the next one prefetched.
ZERO3_GATHER_BYTES_PER_PARAM = 4
# Mixed-precision DeepSpeed keeps an fp32 copy of its gradient partition: beside the 16-bit
# gradients up to ZeRO-2 (the "2_grads_16bit + 4_grads_32bit" of estimate_zero2_model_states_
# mem_needs, runtime/zero/stage_1_and_2.py; BF16_Optimizer's fp32 gradient accumulators without
# ZeRO), in place of them under ZeRO-3 (estimate_zero3_model_states_mem_needs counts 18 bytes
# per parameter over the ranks: 2 weights, 4 gradients, 12 optimizer states).
FP32_GRADIENT_BYTES = 4


def training_memory_per_gpu(
    shape: LlamaShape,
    *,
    world_size: int,
    zero_stage: Literal[0, 1, 2, 3],
    micro_batch: int,
    seq_len: int,
    recompute: bool = False,
    flash_attention: bool = False,
    offload_optimizer: bool = False,
    offload_params: bool = False,
    weight_bytes: float = 2,
    grad_bytes: float = 2,
    optimizer_bytes_per_param: float = ADAM_MIXED_PRECISION_BYTES_PER_PARAM,
    peft: Literal["lora", "qlora"] | None = None,
    quantized_linears: bool = False,
    lora_rank: int = 64,
    lora_targets: tuple[str, ...] = DECODER_LINEARS,
    qlora_bits: int = 4,
    activation_bytes: float = 2,
    master_gradient_bytes: float = FP32_GRADIENT_BYTES,
) -> TrainingMemory:
    """Persistent model states per GPU after Rajbhandari et al. 2020 ("ZeRO", sec. 3.1 and 5):
    2Ψ weights + 2Ψ gradients + KΨ optimizer states, stage 1 partitioning the optimizer states
    over the data-parallel ranks, stage 2 also the gradients, stage 3 also the weights, plus what
    DeepSpeed holds beyond the paper's count (its own estimators, estimate_zero2/3_model_states_
    mem_needs): the fp32 gradient partition of mixed precision (`master_gradient_bytes` per
    trainable parameter, partitioned like the optimizer states; 0 for a step without an fp32
    master copy) and, under ZeRO-3, the largest layer gathered and the next prefetched.
    Offloading the optimizer moves the optimizer states and gradients to host memory, as
    ZeRO-Offload does (Ren et al. 2021, "ZeRO-Offload"); offloading the parameters (stage 3 only)
    moves the weights. With LoRA/QLoRA only the adapters have gradients and optimizer states; the
    frozen base stays in `weight_bytes` (LoRA) or is quantised (QLoRA); `quantized_linears`
    (4-bit pre-training) quantises the decoder linears, frozen, and trains the rest. Activations are not
    partitioned by ZeRO; `activation_bytes` is the size of one activation element (2 in 16-bit
    training). Not modelled: communication buckets, the CUDA context, allocator fragmentation,
    so the total is a lower bound of what a step needs.
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, not {zero_stage}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, not {world_size}")
    if offload_optimizer and zero_stage == 0:
        raise ValueError("optimizer offload needs ZeRO stage 1, 2 or 3")
    if offload_params and zero_stage != 3:
        raise ValueError("parameter offload needs ZeRO stage 3")

    if peft is None and quantized_linears:  # the rest trains: embedding, norms, LM head
        trainable = parameter_count(shape) - decoder_linear_parameter_count(shape)
        weights = base_weight_bytes(shape, weight_bytes, qlora_bits)
    elif peft is None:
        trainable = parameter_count(shape)
        weights = base_weight_bytes(shape, weight_bytes)
    else:
        trainable = lora_parameter_count(shape, lora_rank, lora_targets)
        quant_bits = qlora_bits if peft == "qlora" else None
        weights = base_weight_bytes(shape, weight_bytes, quant_bits) + trainable * weight_bytes
    gradients = trainable * grad_bytes
    master_gradients = trainable * master_gradient_bytes
    optimizer_states = trainable * optimizer_bytes_per_param

    if zero_stage >= 1:
        optimizer_states /= world_size
        master_gradients /= world_size
    if zero_stage >= 2:
        gradients /= world_size
    if zero_stage == 3:
        weights /= world_size
        if master_gradient_bytes:
            gradients = 0.0  # the partition is kept in fp32 only
    gradients += master_gradients

    offloaded = 0.0
    if offload_optimizer:
        offloaded += optimizer_states + gradients
        optimizer_states = gradients = 0.0
    if offload_params:
        offloaded += weights
        weights = 0.0
    gathered = ZERO3_GATHER_BYTES_PER_PARAM * largest_layer_parameter_count(shape) if zero_stage == 3 else 0.0

    return TrainingMemory(
        weights=weights,
        gradients=gradients,
        optimizer_states=optimizer_states,
        activations=training_activation_bytes(
            shape, micro_batch, seq_len, recompute, flash_attention, activation_bytes
        ),
        offloaded_to_host=offloaded,
        gathered_parameters=gathered,
    )


# --- Roofline predictions ---------------------------------------------------------------------

# llm-analysis's published LLaMA training examples use these efficiencies (PROTOCOL.md,
# "Related analytical reference"); inference lower bounds use ideal hardware (1.0).
TRAINING_FLOPS_EFFICIENCY = 0.5
TRAINING_MEMORY_EFFICIENCY = 0.9


def predicted_step_time(flops: float, peak_tflops: float, flops_efficiency: float = TRAINING_FLOPS_EFFICIENCY) -> float:
    """Seconds to execute `flops` at a fraction of the device's peak."""
    return flops / (peak_tflops * 1e12 * flops_efficiency)


def memory_time(
    bytes_moved: float, bandwidth_gb_s: float, memory_efficiency: float = TRAINING_MEMORY_EFFICIENCY
) -> float:
    """Seconds to move `bytes_moved` at a fraction of the device's memory bandwidth."""
    return bytes_moved / (bandwidth_gb_s * 1e9 * memory_efficiency)


class LatencyBound(BaseModel):
    """Roofline: a step takes at least the longer of its compute time and its memory time."""

    model_config = ConfigDict(frozen=True)

    compute_s: float
    memory_s: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def limited_by(self) -> Literal["compute", "memory"]:
        return "compute" if self.compute_s >= self.memory_s else "memory"


def roofline(
    flops: float,
    bytes_moved: float,
    peak_tflops: float,
    bandwidth_gb_s: float,
    flops_efficiency: float = 1.0,
    memory_efficiency: float = 1.0,
) -> LatencyBound:
    """Compute and memory time of one step on one device; efficiencies of 1.0 give the
    physical limit, the lower bound no run can beat."""
    return LatencyBound(
        compute_s=predicted_step_time(flops, peak_tflops, flops_efficiency),
        memory_s=memory_time(bytes_moved, bandwidth_gb_s, memory_efficiency),
    )


def prefill_latency_lower_bound(
    shape: LlamaShape,
    prompt_len: int,
    batch: int,
    peak_tflops: float,
    bandwidth_gb_s: float,
    weight_bytes: float = 2,
    kv_bytes: float = 2,
) -> LatencyBound:
    """Least time to first token for `batch` prompts prefilled together on one device."""
    return roofline(
        batch * prefill_flops(shape, prompt_len),
        prefill_bytes(shape, prompt_len, batch, weight_bytes, kv_bytes),
        peak_tflops,
        bandwidth_gb_s,
    )


def decode_latency_lower_bound(
    shape: LlamaShape,
    context_len: int,
    batch: int,
    peak_tflops: float,
    bandwidth_gb_s: float,
    weight_bytes: float = 2,
    kv_bytes: float = 2,
) -> LatencyBound:
    """Least time of one decode step (one token for each of `batch` sequences) on one device."""
    return roofline(
        batch * decode_flops_per_token(shape, context_len),
        decode_step_bytes(shape, context_len, batch, weight_bytes, kv_bytes),
        peak_tflops,
        bandwidth_gb_s,
    )


# --- Derived metrics --------------------------------------------------------------------------


def achieved_tflops(flops_per_token: float, tokens_per_s: float) -> float:
    """Throughput in TFLOP/s (10^12 FLOP/s) of a run that processes `tokens_per_s`."""
    return flops_per_token * tokens_per_s / 1e12


def mfu(achieved_tflops: float, peak_tflops_per_device: float, devices: int) -> float:
    """Model FLOPs utilisation as a fraction (Chowdhery et al. 2022, sec. 4.1 and appendix B):
    achieved model FLOP/s over the summed peak of the devices. Pass TFLOP/s from
    model_flops_per_token. Not clipped: a value above 1 is impossible and is for the caller
    to flag."""
    if peak_tflops_per_device <= 0 or devices < 1:
        raise ValueError("peak_tflops_per_device must be positive and devices at least 1")
    return achieved_tflops / (peak_tflops_per_device * devices)


def scaling_efficiency(throughput_n: float, throughput_1: float, devices: int) -> float:
    """Data-parallel scaling efficiency as the paper defines it (PROTOCOL.md, Figure 4):
    throughput(N) / (N x throughput(1)), a fraction."""
    if throughput_1 <= 0 or devices < 1:
        raise ValueError("throughput_1 must be positive and devices at least 1")
    return throughput_n / (devices * throughput_1)
