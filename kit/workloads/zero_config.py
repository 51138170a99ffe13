"""The DeepSpeed configuration of a training case, derived from its parameters alone."""

from __future__ import annotations

from typing import Any

from kit.plan.protocol import TrainParams


def deepspeed_config(params: TrainParams, client_optimizer: bool) -> dict[str, Any]:
    """ZeRO stage, offload targets and precision as the case states them.

    Offload follows the paper: ZeRO-2 moves the optimizer states to CPU memory, ZeRO-3 the
    optimizer states and the parameters. Without a client optimizer DeepSpeed builds its own
    AdamW (FusedAdam on GPU, DeepSpeedCPUAdam when the optimizer is offloaded).
    """
    zero: dict[str, Any] = {"stage": params.zero_stage}
    if params.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if params.zero_stage == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": params.micro_batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": params.dtype == "bf16"},
        "fp16": {"enabled": params.dtype == "fp16"},
        "zero_optimization": zero,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if client_optimizer:
        # A torch or bitsandbytes optimizer is ours to choose; DeepSpeed would otherwise refuse
        # it under ZeRO and insist on its CPU Adam when offloading.
        config["zero_allow_untested_optimizer"] = True
        config["zero_force_ds_cpu_optimizer"] = False
    else:
        config["optimizer"] = {"type": "AdamW", "params": {"lr": params.learning_rate, "weight_decay": 0.0}}
    return config
