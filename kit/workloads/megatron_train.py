"""Pre-training steps under Megatron-LM's engine, megatron-core (the paper's Table II, claim C9).

The model is built with megatron-core's own API as Megatron-LM's pretrain_gpt.py drives it: a
GPTModel with a Llama layer spec (RMSNorm, SwiGLU, RoPE, no bias), wrapped in megatron-core's
DistributedDataParallel with `finalize_model_grads` set in the config (without it, data-parallel
gradients are never reduced), its distributed optimizer, and the step through
`get_forward_backward_func`. On a GPU the layer spec is Transformer Engine's where the image has
it, else megatron-core's local one; on a CPU (the smoke profile, gloo) the local spec, with the
adaptations of kit.workloads.megatron_cpu.
"""

from __future__ import annotations

import contextlib

from kit.plan.protocol import Case, TrainParams
from kit.rundir.schema import EffectiveOption, TrainDetails
from kit.workloads.synthetic import random_batches

BATCH_POOL = 8


class MegatronStep:
    """One optimizer step of megatron-core's DDP model and distributed optimizer on a fixed pool
    of random batches; each step's loss is kept (the TP=1 and TP=2 runs are compared by them)."""

    def __init__(
        self, case: Case, model, optimizer, batches, details: TrainDetails, context, first_of_tensor_group: bool
    ):
        self.case, self.model, self.optimizer, self.batches = case, model, optimizer, batches
        # The ranks of a tensor-parallel group consume one batch together: its first rank counts it.
        self.tokens_per_step = case.params_as(TrainParams).tokens_per_step if first_of_tensor_group else 0
        self.details = details
        self._context = context  # the CPU adaptations stay in force while the model lives
        self._index = 0

    def step(self) -> None:
        import torch
        from megatron.core.pipeline_parallel import get_forward_backward_func

        tokens = self.batches[self._index % len(self.batches)]
        self._index += 1
        positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0).expand_as(tokens)

        def forward_step(_, model):
            output = model(tokens, positions, None, labels=tokens)  # per-token losses

            def loss(per_token):
                mean = per_token.float().mean()
                return mean, {"loss": mean.detach()}

            return output, loss

        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        outcome = get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=iter([None]),
            model=[self.model],
            num_microbatches=1,
            seq_length=tokens.shape[1],
            micro_batch_size=tokens.shape[0],
            forward_only=False,
        )
        updated, _, _ = self.optimizer.step()
        if not updated:
            raise RuntimeError("megatron-core's optimizer skipped the step (a non-finite gradient)")
        self.details.losses.append(float(outcome[0]["loss"]))

    def release(self) -> None:
        import gc

        import torch.distributed as dist

        dist.barrier()
        self.model = self.optimizer = self.batches = None
        self._context.close()
        gc.collect()

    def close(self) -> None:
        import torch.distributed as dist
        from megatron.core import parallel_state

        dist.barrier()
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
        self._context.close()


def transformer_config(case: Case, tensor_parallel: int):
    """The Llama shape as megatron-core's TransformerConfig."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    shape, params = case.model_shape, case.params_as(TrainParams)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[params.dtype]
    extra = {}
    if case.device == "cpu":
        from kit.workloads.megatron_cpu import UNFUSED

        extra = dict(UNFUSED, use_cpu_initialization=True)
    return TransformerConfig(
        num_layers=shape.num_layers,
        hidden_size=shape.hidden_size,
        num_attention_heads=shape.num_heads,
        num_query_groups=shape.num_kv_heads,
        ffn_hidden_size=shape.intermediate_size,
        kv_channels=shape.hidden_size // shape.num_heads,
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        tensor_model_parallel_size=tensor_parallel,
        params_dtype=dtype,
        bf16=params.dtype == "bf16",
        fp16=params.dtype == "fp16",
        pipeline_dtype=dtype,
        **extra,
    )


# Transformer Engine's attention picks a flash or fused kernel unless told not to: "FlashAttention
# off" (the kit's baseline, eager attention) is its unfused DotProductAttention.
UNFUSED_ATTENTION = {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "0"}


def layer_spec(case: Case) -> tuple[object, str]:
    """Transformer Engine's Llama layer spec on a GPU where the image has it (its attention
    unfused), else megatron-core's local one (matmul, softmax, matmul)."""
    import os

    from megatron.core.models.gpt import gpt_layer_specs

    if case.device == "cuda":
        os.environ.update(UNFUSED_ATTENTION)  # read when Transformer Engine's attention is built
        try:
            import transformer_engine  # noqa: F401

            return (
                gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec(),
                "Transformer Engine layer spec, unfused attention",
            )
        except ImportError:
            pass
    return gpt_layer_specs.get_gpt_layer_local_spec(normalization="RMSNorm"), "megatron-core local layer spec"


def build(case: Case) -> MegatronStep:
    import os

    import megatron.core
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    params, shape = case.params_as(TrainParams), case.model_shape
    context = contextlib.ExitStack()
    seed_options = {}
    if case.device == "cpu":
        from kit.workloads.megatron_cpu import SEED_OPTIONS, adapted

        context.enter_context(adapted())
        seed_options = SEED_OPTIONS
    if not dist.is_initialized():  # a shared launch's later runs keep the process group
        dist.init_process_group("nccl" if case.device == "cuda" else "gloo")
    world = dist.get_world_size()
    if world % params.tensor_parallel:
        raise ValueError(f"tensor parallel {params.tensor_parallel} does not divide the {world} processes")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=params.tensor_parallel)
    tensor_parallel.model_parallel_cuda_manual_seed(params.seed, **seed_options)
    torch.manual_seed(params.seed)  # the full weights are drawn alike whatever the tensor-parallel split
    config = transformer_config(case, params.tensor_parallel)
    spec, spec_name = layer_spec(case)
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=shape.vocab_size,
        max_sequence_length=shape.max_position_embeddings,
        position_embedding_type="rope",
        share_embeddings_and_output_weights=False,
        rotary_base=10000,
    )
    if case.device == "cuda":
        model.cuda(torch.cuda.current_device())
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=True)
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    config.finalize_model_grads_func = finalize_model_grads
    optimizer = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam",
            lr=params.learning_rate,
            weight_decay=0.0,
            bf16=params.dtype == "bf16",
            fp16=params.dtype == "fp16",
            params_dtype=config.params_dtype,
            use_distributed_optimizer=True,
            clip_grad=1.0,
        ),
        [model],
    )
    data_rank = parallel_state.get_data_parallel_rank()
    device = torch.device("cuda", torch.cuda.current_device()) if case.device == "cuda" else torch.device("cpu")
    batches = [
        batch.to(device)
        for batch in random_batches(
            shape.vocab_size, params.micro_batch, params.seq_len, BATCH_POOL, params.seed + data_rank
        )
    ]
    tp = parallel_state.get_tensor_model_parallel_world_size()
    details = TrainDetails(
        framework=f"megatron-core {megatron.core.__version__}",
        world_size=world,
        weights="random initialisation",
        effective={
            "framework": EffectiveOption(
                requested=f"Megatron-LM engine, tensor parallel {params.tensor_parallel}, distributed optimizer",
                observed=f"{type(model).__name__} over {type(model.module).__name__}, tensor parallel {tp}, data "
                f"parallel {parallel_state.get_data_parallel_world_size()}, {type(optimizer).__name__} of "
                f"{', '.join(sorted({type(o).__name__ for o in getattr(optimizer, 'chained_optimizers', [optimizer])}))}",
                in_effect=tp == params.tensor_parallel
                and type(model).__name__ == "DistributedDataParallel"
                and config.finalize_model_grads_func is finalize_model_grads,
                evidence="parallel_state, the model's and optimizer's classes, config.finalize_model_grads_func",
            ),
            "attention": EffectiveOption(
                requested="eager (matmul, softmax, matmul)",
                observed=f"{spec_name}: {type(model.module.decoder.layers[0].self_attention.core_attention).__name__}",
                in_effect=params.attention == "eager",
                evidence="the decoder's first core_attention module"
                + (
                    f"; {', '.join(f'{k}={os.environ.get(k)}' for k in UNFUSED_ATTENTION)}"
                    if case.device == "cuda"
                    else ""
                ),
            ),
        },
    )
    return MegatronStep(
        case, model, optimizer, batches, details, context, parallel_state.get_tensor_model_parallel_rank() == 0
    )
