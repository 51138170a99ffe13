"""Reading the running engine: what a training case's options actually are (judged in kit.measure.effective).

Two counts need a step to happen: checkpointed decoder-layer calls and calls of the attention
function the model dispatches to. `CallCounters` installs counting wrappers for one step (the
first measured one) and removes them after it, so the other measured steps run untouched.
Seen with transformers 5.23: a decoder layer (GradientCheckpointingLayer) calls its
`_gradient_checkpointing_func` only when both `gradient_checkpointing` and `training` are true,
and the attention of a Llama layer is looked up at every call in the shared AttentionInterface
(`ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)`).
"""

from __future__ import annotations

from kit.measure import effective
from kit.plan.protocol import Case, TrainParams
from kit.rundir.schema import EffectiveOption


def decoder_layers(model) -> list:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]


def attention_implementation(model) -> str | None:
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None)


class CallCounters:
    """Counts, while active, checkpointed decoder-layer calls and attention-function calls."""

    def __init__(self, model):
        self.model = model
        self.checkpointed_calls = 0
        self.attention_calls = 0
        self._restore: list = []

    def __enter__(self) -> CallCounters:
        for layer in decoder_layers(self.model):
            original = layer.__dict__.get("_gradient_checkpointing_func")
            if original is None:
                continue  # checkpointing was never enabled on this layer: nothing to count

            def counted(*args, _original=original, **kwargs):
                self.checkpointed_calls += 1
                return _original(*args, **kwargs)

            layer._gradient_checkpointing_func = counted
            self._restore.append(
                lambda layer=layer, original=original: setattr(layer, "_gradient_checkpointing_func", original)
            )
        self._count_attention(attention_implementation(self.model))
        return self

    def _count_attention(self, implementation: str | None) -> None:
        if implementation is None:
            return
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from transformers.models.llama.modeling_llama import eager_attention_forward

        # A local entry of the shared interface overrides the global one for every model.
        local = ALL_ATTENTION_FUNCTIONS._local_mapping
        had_local, previous = implementation in local, local.get(implementation)
        original = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)

        def counted(*args, **kwargs):
            self.attention_calls += 1
            return original(*args, **kwargs)

        ALL_ATTENTION_FUNCTIONS[implementation] = counted

        def restore():
            if had_local:
                ALL_ATTENTION_FUNCTIONS[implementation] = previous
            else:
                del ALL_ATTENTION_FUNCTIONS[implementation]

        self._restore.append(restore)

    def __exit__(self, *exc) -> None:
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()


def _offload(engine, params: TrainParams) -> EffectiveOption:
    optimizer = engine.optimizer
    if engine.zero_optimization_stage() == 3:
        optimizer_flag = bool(getattr(optimizer, "offload_optimizer", False))
        partitions = list(getattr(optimizer, "fp32_partitioned_groups_flat", []))
        parameter_flag = bool(getattr(optimizer, "offload_param", False))
        parameter_devices = [p.ds_tensor.device.type for p in engine.module.parameters() if hasattr(p, "ds_tensor")]
    else:
        optimizer_flag = bool(getattr(optimizer, "cpu_offload", False))
        partitions = list(getattr(optimizer, "single_partition_of_fp32_groups", []))
        parameter_flag, parameter_devices = None, []
    return effective.offload(
        with_parameters=params.zero_stage == 3,
        optimizer_flag=optimizer_flag,
        optimizer_devices=[tensor.device.type for tensor in partitions],
        parameter_flag=parameter_flag,
        parameter_devices=parameter_devices,
        optimizer_class=type(optimizer).__name__,
    )


def _quantized_linears(model) -> list[tuple[str, bool, str]]:
    import bitsandbytes as bnb

    found = []
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            # The weight is bitsandbytes' Params4bit, though nn.Linear's annotation says a Tensor.
            state = module.weight.quant_state  # type: ignore[attr-defined]
            quant_type = state.quant_type if state is not None else module.weight.quant_type  # type: ignore[attr-defined]
            nested = bool(state.nested) if state is not None else False
            found.append((quant_type, nested, str(module.compute_dtype).removeprefix("torch.")))
    return found


def _trainable_parameters(model) -> int:
    return sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if p.requires_grad)


def effective_options(case: Case, engine, counters: CallCounters, compute_dtype: str) -> dict[str, EffectiveOption]:
    """Each option of the case's method, as the engine reports it after the counted step;
    `compute_dtype` is the torch dtype name the case computes in ("bfloat16")."""
    params = case.params_as(TrainParams)
    model = engine.module
    layers = decoder_layers(model)
    expected_layers = case.model_shape.num_layers
    found: dict[str, EffectiveOption] = {
        "zero_stage": effective.zero_stage(params.zero_stage, engine.zero_optimization_stage())
    }
    found["attention"] = effective.attention(
        params.attention, attention_implementation(model), expected_layers, counters.attention_calls
    )
    if params.offload:
        found["offload"] = _offload(engine, params)
    if params.recompute:
        found["recompute"] = effective.recompute(
            layers=expected_layers,
            training_layers=sum(1 for layer in layers if layer.training),
            checkpointing_layers=sum(1 for layer in layers if layer.gradient_checkpointing),
            calls=counters.checkpointed_calls,
        )
    if params.quantization != "none":
        found["quantization"] = effective.quantization(
            effective.expected_quantized_modules(case), compute_dtype, _quantized_linears(model)
        )
    if params.peft != "none":
        found["lora"] = effective.lora(
            effective.expected_lora_parameters(case), _trainable_parameters(model), params.lora_rank
        )
    return found
