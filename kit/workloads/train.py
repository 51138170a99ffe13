"""Pre-training and fine-tuning steps under the real DeepSpeed engine.

Every training case, pre-training or fine-tuning, runs through `deepspeed.initialize`: the
paper's Naive configuration is DeepSpeed data parallelism without ZeRO (stage 0), so the only
thing a configuration changes is the parameters this module reads from the case.
"""

from __future__ import annotations

import os

from kit.plan.protocol import Case, StepParams, TrainParams, unavailable_by_design
from kit.rundir.schema import TrainDetails
from kit.workloads.deepspeed_ops import needed_ops, prepare_ops
from kit.workloads.harness import SteppedWorkload, StepWorkload, Unavailable
from kit.workloads.observe import CallCounters, effective_options
from kit.workloads.synthetic import (
    checkpoint_digest,
    llama_config,
    random_batches,
    synthetic_checkpoint,
)
from kit.workloads.zero_config import deepspeed_config

# Distinct random batches cycled through the steps; drawn up front so that making data is
# never inside a timed step.
BATCH_POOL = 8
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def check_available(case: Case) -> None:
    """Refuse, with the reason, what this host cannot run; never substitute something else."""
    reason = unavailable_by_design(case)
    if reason is not None:
        raise Unavailable(reason)
    if case.params_as(StepParams).attention == "flash_attention_2":
        from transformers.utils import is_flash_attn_2_available

        if not is_flash_attn_2_available():
            raise Unavailable("the flash-attn package is not installed in this environment")


class TrainStep:
    """One optimizer step of a DeepSpeed engine on a fixed pool of random batches.

    The first measured step (the one after the case's warm-up steps) is also counted
    (kit.workloads.observe): what the engine did in it goes into details["effective"].
    """

    def __init__(self, case: Case, engine, batches, details: TrainDetails, keep_alive=None):
        self.case, self.params, self.engine, self.batches = case, case.params_as(TrainParams), engine, batches
        self.tokens_per_step, self.details = self.params.tokens_per_step, details
        self._keep_alive = keep_alive  # HfDeepSpeedConfig must outlive model loading under ZeRO-3
        self._index = 0

    def step(self) -> None:
        if self._index != self.params.warmup_steps:
            self._step()
            return
        with CallCounters(self.engine.module) as counters:
            self._step()
        self.details.effective = effective_options(self.case, self.engine, counters, DTYPES[self.params.dtype])

    def _step(self) -> None:
        input_ids = self.batches[self._index % len(self.batches)]
        self._index += 1
        loss = self.engine(input_ids=input_ids, labels=input_ids).loss
        self.engine.backward(loss)
        self.engine.step()

    def release(self) -> None:
        """Let go of this run's engine, model and batches (the next run of a shared launch builds
        its own); the ranks stay together and the process group stays."""
        import gc

        import torch.distributed as dist

        dist.barrier()
        self.engine.destroy()
        self.engine = self.batches = self._keep_alive = None
        gc.collect()

    def close(self) -> None:
        """All ranks leave together; a rank that exits early can abort the others (gloo)."""
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()


def _load_model(case: Case, dtype, device: str, details: TrainDetails):
    """Random init in memory, or, where 4-bit or a fine-tuning base demands it, a checkpoint."""
    import torch
    from transformers import BitsAndBytesConfig, LlamaForCausalLM

    params, shape = case.params_as(TrainParams), case.model_shape
    placement = f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu"
    zero3 = params.zero_stage == 3
    if not case.needs_checkpoint:
        details.weights = "random initialisation"
        if zero3:  # under HfDeepSpeedConfig transformers builds the model inside zero.Init
            return LlamaForCausalLM._from_config(llama_config(shape), dtype=dtype, attn_implementation=params.attention)
        with torch.device(placement):
            return LlamaForCausalLM._from_config(llama_config(shape), dtype=dtype, attn_implementation=params.attention)

    path = synthetic_checkpoint(*case.named_model, params.seed)
    details.weights = f"synthetic checkpoint {path.name} (sha256 {checkpoint_digest(path)})"
    kwargs = {"dtype": dtype, "attn_implementation": params.attention}
    if params.quantization == "nf4-double":
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype,
            # ZeRO-3 partitions parameters by dtype; storing the packed 4-bit weights in the
            # compute dtype lets it shard them like the rest (transformers' QLoRA+ZeRO-3 recipe).
            bnb_4bit_quant_storage=dtype if zero3 else torch.uint8,
        )
    if not zero3:
        kwargs["device_map"] = {"": placement}
    return LlamaForCausalLM.from_pretrained(path, **kwargs)


def _enable_recompute(model, **checkpoint_options) -> None:
    """Full activation recomputation of every decoder layer (the paper's R). Extra options go to
    torch.utils.checkpoint (the profile workload passes a `context_fn` that marks recomputation)."""
    model.config.use_cache = False
    options = {"use_reentrant": False, **checkpoint_options}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=options)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)


def _apply_lora(model, params: TrainParams):
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if params.peft == "qlora":
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=params.recompute,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    config = LoraConfig(
        r=params.lora_rank,
        lora_alpha=params.lora_alpha,
        lora_dropout=0.0,
        target_modules=list(params.lora_targets),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def _client_optimizer(params: TrainParams, trainable):
    """The optimizer we hand DeepSpeed, or None to let DeepSpeed build its own AdamW."""
    import torch

    if params.quantization != "none" and params.peft == "none":
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit(trainable, lr=params.learning_rate, weight_decay=0.0)
    if params.optimizer_impl == "torch":
        return torch.optim.AdamW(trainable, lr=params.learning_rate, weight_decay=0.0)
    return None


def build(case: Case) -> StepWorkload:
    params, shape = case.params_as(TrainParams), case.model_shape
    check_available(case)
    if params.framework == "megatron":  # Megatron-LM's engine instead of DeepSpeed's
        from kit.workloads.megatron_train import build as build_megatron

        return build_megatron(case)
    import deepspeed
    import torch
    import torch.distributed as dist

    needs_client_optimizer = params.optimizer_impl == "torch" or (
        params.quantization != "none" and params.peft == "none"
    )
    ops = prepare_ops(needed_ops(params, case.device, needs_client_optimizer))
    deepspeed.init_distributed()  # NCCL on GPUs; DeepSpeed's CPU accelerator picks gloo
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, DTYPES[params.dtype])
    details = TrainDetails(world_size=world_size, zero_stage=params.zero_stage, deepspeed_ops=ops)

    config = deepspeed_config(params, client_optimizer=needs_client_optimizer)
    keep_alive = None
    if params.zero_stage == 3:
        from transformers.integrations import HfDeepSpeedConfig

        keep_alive = HfDeepSpeedConfig(config)

    model = _load_model(case, dtype, case.device, details)
    if params.recompute and params.peft != "qlora":  # QLoRA's preparation enables it itself
        _enable_recompute(model)
    if params.peft != "none":
        model = _apply_lora(model, params)
    # from_pretrained returns the model in eval mode (PEFT wraps it as it is), and transformers
    # recomputes activations only in training mode: without this, R runs without recomputation.
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = _client_optimizer(params, trainable)
    engine, engine_optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=trainable, optimizer=optimizer, config=config
    )
    batches = [
        batch.to(engine.device)
        for batch in random_batches(
            shape.vocab_size, params.micro_batch, params.seq_len, BATCH_POOL, params.seed + rank
        )
    ]
    inner = getattr(engine_optimizer, "optimizer", engine_optimizer)
    details.optimizer = type(inner).__name__
    details.deepspeed_config = config
    details.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return TrainStep(case, engine, batches, details, keep_alive)


WORKLOAD = SteppedWorkload(build)
