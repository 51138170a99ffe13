"""The DeepSpeed config follows the case: ZeRO stage, the paper's offload targets, precision."""

from __future__ import annotations

from kit.workloads.zero_config import deepspeed_config


def params_of(plan, case_id):
    return next(c for c in plan.cases if c.id == case_id).params


def test_naive_is_data_parallel_without_zero(paper_plan):
    config = deepspeed_config(params_of(paper_plan, "pretrain.llama2-7b.naive.g8"), client_optimizer=False)
    assert config["zero_optimization"] == {"stage": 0}
    assert config["bf16"] == {"enabled": True} and config["train_micro_batch_size_per_gpu"] == 1


def test_zero2_offload_moves_only_the_optimizer(paper_plan):
    zero = deepspeed_config(params_of(paper_plan, "pretrain.llama2-7b.z2+o.g8"), client_optimizer=False)[
        "zero_optimization"
    ]
    assert zero["stage"] == 2 and zero["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in zero


def test_zero3_offload_moves_optimizer_and_parameters(paper_plan):
    zero = deepspeed_config(params_of(paper_plan, "pretrain.llama2-7b.z3+o.g8"), client_optimizer=False)[
        "zero_optimization"
    ]
    assert zero["offload_optimizer"]["device"] == "cpu" and zero["offload_param"]["device"] == "cpu"


def test_without_client_optimizer_deepspeed_builds_adamw(paper_plan):
    config = deepspeed_config(params_of(paper_plan, "pretrain.llama2-7b.z3.g8"), client_optimizer=False)
    assert config["optimizer"]["type"] == "AdamW"
    assert "zero_allow_untested_optimizer" not in config


def test_a_client_optimizer_is_allowed_under_zero_and_offload(paper_plan):
    config = deepspeed_config(params_of(paper_plan, "pretrain.llama2-7b.z3+o.g8"), client_optimizer=True)
    assert "optimizer" not in config
    assert config["zero_allow_untested_optimizer"] and config["zero_force_ds_cpu_optimizer"] is False
