"""A workload process whose training option is switched off behind the kit's back.

Run by the kit's launcher in place of `python -m kit.workloads`: `python tests/support/option_off.py OPTION
--case ... --out ...`. Each sabotage is what a framework could do silently (a model left in
eval mode, a config key lost on the way, a quantisation setting ignored); the case must then
end `error` naming the option, never `ok`.
"""

from __future__ import annotations

import sys


def recompute() -> None:
    """The model ends up in eval mode (what from_pretrained leaves): no checkpointing happens."""
    import deepspeed

    initialize = deepspeed.initialize

    def initialize_then_eval(*args, **kwargs):
        engine, *rest = initialize(*args, **kwargs)
        engine.module.eval()
        return (engine, *rest)

    deepspeed.initialize = initialize_then_eval


def _config_edit(edit) -> None:
    from kit.workloads import train

    original = train.deepspeed_config

    def edited(*args, **kwargs):
        config = original(*args, **kwargs)
        edit(config["zero_optimization"])
        return config

    train.deepspeed_config = edited


def zero_stage() -> None:
    """The ZeRO section loses its stage: DeepSpeed runs stage 0."""
    _config_edit(lambda zero: zero.update(stage=0))


def offload() -> None:
    """The offload keys are lost: DeepSpeed keeps everything where it was."""
    _config_edit(lambda zero: [zero.pop(key, None) for key in ("offload_optimizer", "offload_param")])


def attention() -> None:
    """The model is switched to another attention implementation after loading."""
    from kit.workloads import train

    load = train._load_model

    def load_then_switch(*args, **kwargs):
        model = load(*args, **kwargs)
        model.set_attn_implementation("sdpa")
        return model

    train._load_model = load_then_switch


def quantization() -> None:
    """Double quantisation is dropped from the quantisation config."""
    import transformers

    original = transformers.BitsAndBytesConfig

    def without_double_quant(*args, **kwargs):
        return original(*args, **{**kwargs, "bnb_4bit_use_double_quant": False})

    transformers.BitsAndBytesConfig = without_double_quant


def lora() -> None:
    """The adapters get another rank than the method's."""
    import peft

    original = peft.LoraConfig

    def other_rank(*args, **kwargs):
        return original(*args, **{**kwargs, "r": kwargs["r"] // 2})

    peft.LoraConfig = other_rank


SABOTAGE = {f.__name__: f for f in (recompute, zero_stage, offload, attention, quantization, lora)}

if __name__ == "__main__":
    SABOTAGE[sys.argv[1]]()
    from kit.workloads.harness import main

    main(sys.argv[2:])
