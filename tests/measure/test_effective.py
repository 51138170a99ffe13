"""Every training option is proven in effect from the running engine, or the case is an error.

The judges and the merge over ranks are pure and tested on their own; then real two-process
runs (the kit's launcher, DeepSpeed, transformers, peft, bitsandbytes on CPU, as the local executor starts
them) check that each option of the smoke profile is reported in effect, and that a case whose
option is switched off behind the kit's back (tests/support/option_off.py) ends `error` naming it.
"""

from __future__ import annotations

import pytest
from support import TESTS

from kit.execute import case_run
from kit.execute.choice import named
from kit.host.this_host import Host
from kit.measure import effective
from kit.rundir.directory import RunDir
from kit.rundir.schema import EffectiveOption, RankSample, RunSample

OPTION_OFF = TESTS / "support" / "option_off.py"


def smoke_case(smoke_plan, case_id: str):
    return next(case for case in smoke_plan.cases if case.id == case_id)


# --- The judges -----------------------------------------------------------------------------------


def test_recomputation_in_eval_mode_is_not_in_effect():
    option = effective.recompute(layers=32, training_layers=0, checkpointing_layers=32, calls=0)
    assert not option.in_effect and "0 of 32 decoder layers in training mode" in option.observed


def test_recomputation_of_every_layer_is_in_effect():
    assert effective.recompute(layers=32, training_layers=32, checkpointing_layers=32, calls=32).in_effect


def test_flash_attention_configured_but_never_called_is_not_in_effect():
    option = effective.attention("flash_attention_2", "flash_attention_2", layers=32, calls=0)
    assert not option.in_effect and option.requested == "FlashAttention-2"
    assert effective.attention("flash_attention_2", "flash_attention_2", layers=32, calls=32).in_effect
    assert not effective.attention("flash_attention_2", "sdpa", layers=32, calls=32).in_effect


def test_offload_needs_the_flag_and_the_partitions_in_host_memory():
    on_gpu = effective.offload(False, True, ["cuda"], None, [], "DeepSpeedZeroOptimizer")
    assert not on_gpu.in_effect
    assert effective.offload(False, True, ["cpu", "cpu"], None, [], "DeepSpeedZeroOptimizer").in_effect
    params_on_gpu = effective.offload(True, True, ["cpu"], True, ["cpu", "cuda"], "DeepSpeedZeroOptimizer_Stage3")
    assert not params_on_gpu.in_effect and "parameters on cpu/cuda" in params_on_gpu.observed


def test_quantization_needs_nf4_double_quant_in_every_decoder_linear():
    every = [("nf4", True, "bfloat16")] * 14
    assert effective.quantization(14, "bfloat16", every).in_effect
    assert not effective.quantization(14, "bfloat16", every[:13]).in_effect
    assert not effective.quantization(14, "bfloat16", [("nf4", False, "bfloat16")] * 14).in_effect
    assert not effective.quantization(14, "bfloat16", [("fp4", True, "bfloat16")] * 14).in_effect


def test_lora_counts_must_match_the_prediction():
    assert effective.lora(299008, 299008, 64).in_effect and not effective.lora(299008, 149504, 64).in_effect


def test_the_flash_attention_function_is_counted_while_a_step_runs_and_restored_after(monkeypatch):
    """CPU has no flash-attn kernel: the function transformers dispatches FlashAttention-2 to is
    replaced by a stand-in here, and the counter is checked to wrap whatever is registered for
    the model's implementation, count its calls, and put it back."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from kit.workloads.observe import CallCounters

    calls = []
    monkeypatch.setitem(
        type(ALL_ATTENTION_FUNCTIONS)._global_mapping, "flash_attention_2", lambda *args, **kwargs: calls.append(args)
    )
    model = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=128,
        )
    )
    model.config._attn_implementation = "flash_attention_2"
    stand_in = ALL_ATTENTION_FUNCTIONS.get_interface("flash_attention_2", None)
    with CallCounters(model) as counters:
        dispatched = ALL_ATTENTION_FUNCTIONS.get_interface("flash_attention_2", None)
        assert dispatched is not stand_in
        dispatched("query", "key")
        dispatched("query", "key")
    assert counters.attention_calls == 2 and len(calls) == 2
    assert ALL_ATTENTION_FUNCTIONS.get_interface("flash_attention_2", None) is stand_in
    assert "flash_attention_2" not in ALL_ATTENTION_FUNCTIONS._local_mapping


# --- Over ranks and runs --------------------------------------------------------------------------


def rank(index: int, options: dict[str, EffectiveOption]) -> RankSample:
    return RankSample(
        rank=index,
        world_size=2,
        status="ok",
        device="cpu",
        device_name="cpu",
        started_at="t",
        finished_at="t",
        details={"effective": {k: v.model_dump() for k, v in options.items()}},
    )


def run_of(*ranks: RankSample) -> RunSample:
    return RunSample(index=1, status="ok", exit_code=0, wall_s=1.0, ranks=list(ranks))


def in_effect(case) -> dict[str, EffectiveOption]:
    return {
        "zero_stage": effective.zero_stage(0, 0),
        "attention": effective.attention("eager", "eager", 2, 4),
        "recompute": effective.recompute(2, 2, 2, 2),
    }


def test_a_run_whose_option_is_off_is_an_error_naming_the_option(smoke_plan):
    case = smoke_case(smoke_plan, "pretrain.tiny-llama.r.g2")
    off = {**in_effect(case), "recompute": effective.recompute(2, 0, 2, 0)}
    judged = effective.judged(case, run_of(rank(0, off), rank(1, off)))
    assert judged.status == "error"
    assert judged.reason.startswith("recomputation requested but not active:")
    result = case_run.result_of(case, [judged], "local", "t")
    assert result.status == "error" and result.metrics == {} and not result.effective["recompute"].in_effect


def test_ranks_that_disagree_are_an_error(smoke_plan):
    case = smoke_case(smoke_plan, "pretrain.tiny-llama.r.g2")
    other = {**in_effect(case), "attention": effective.attention("eager", "eager", 2, 3)}
    _, problem = effective.merge(case, [run_of(rank(0, in_effect(case)), rank(1, other))])
    assert problem.startswith("ranks disagree on the attention implementation")


def test_an_option_not_reported_is_an_error(smoke_plan):
    case = smoke_case(smoke_plan, "pretrain.tiny-llama.r.g2")
    options = in_effect(case)
    del options["recompute"]
    _, problem = effective.merge(case, [run_of(rank(0, options), rank(1, options))])
    assert "did not report its recomputation" in problem


def test_every_smoke_training_method_has_its_options_listed(smoke_plan):
    found = {case.method: effective.options_of(case.params) for case in smoke_plan.cases if case.workload == "train"}
    assert found["z3+o"] == ["zero_stage", "offload", "attention"]
    assert found["ql+z2"] == ["zero_stage", "attention", "quantization", "lora"]
    assert found["r"] == ["zero_stage", "recompute", "attention"]


# --- Real runs on CPU, two processes --------------------------------------------------------------


def run_case(case, tmp_path, monkeypatch, option_off: str | None = None):
    """One run of the case through the runner and the local executor (the kit's launcher, 2 processes)."""
    from kit.execute import local

    case = case.model_copy(
        update={"params": case.params.model_copy(update={"runs": 1, "warmup_steps": 1, "measured_steps": 2})}
    )
    if option_off is not None:
        launch = local.launcher_command

        def sabotaged(case, case_file, out_dirs, **kwargs):
            command = launch(case, case_file, out_dirs, **kwargs)
            at = command.index("-m", command.index("--"))
            return [*command[:at], str(OPTION_OFF), option_off, *command[at + 2 :]]

        monkeypatch.setattr(local, "launcher_command", sabotaged)
    return case_run.execute_case(RunDir(tmp_path), case, Host(gpu_names=[]), case_run.Progress(), named("local"))


@pytest.mark.e2e
@pytest.mark.parametrize("case_id", ["pretrain.tiny-llama.r.g2", "finetune.tiny-llama.l+r.g2"])
def test_recomputation_checkpoints_every_layer_also_from_a_checkpoint(case_id, smoke_plan, tmp_path, monkeypatch):
    """l+r loads its base with from_pretrained, which returns the model in eval mode."""
    result = run_case(smoke_case(smoke_plan, case_id), tmp_path, monkeypatch)
    assert result.status == "ok", result.reason
    recompute = result.effective["recompute"]
    assert recompute.in_effect and "2 checkpointed layer calls" in recompute.observed


@pytest.mark.e2e
@pytest.mark.parametrize(
    "case_id, option, named",
    [
        ("pretrain.tiny-llama.r.g2", "recompute", "recomputation"),
        ("pretrain.tiny-llama.z2.g2", "zero_stage", "ZeRO stage"),
        ("pretrain.tiny-llama.z3+o.g2", "offload", "offload"),
        ("pretrain.tiny-llama.naive.g2", "attention", "attention implementation"),
        ("pretrain.tiny-llama.q.g2", "quantization", "4-bit quantisation"),
        ("finetune.tiny-llama.l.g2", "lora", "LoRA"),
    ],
)
def test_an_option_switched_off_behind_the_kits_back_makes_the_case_an_error(
    case_id, option, named, smoke_plan, tmp_path, monkeypatch
):
    result = run_case(smoke_case(smoke_plan, case_id), tmp_path, monkeypatch, option_off=option)
    assert result.status == "error"
    assert result.reason.startswith(f"{named} requested but not active:"), result.reason
    assert not result.effective[option].in_effect and result.metrics == {}
