"""The protocol manifest as a plan: the paper's matrix, stable ids, methods as parameters."""

from __future__ import annotations

import itertools

import pytest

from kit.manifest import ManifestError
from kit.plan.protocol import build_plan, case_id, load_protocol, select

PAPER_MODELS = ("llama2-7b", "llama2-13b", "llama2-70b")


def test_paper_profile_crosses_every_training_method_with_every_model(protocol, paper_plan):
    for stage in ("pretrain", "finetune"):
        methods = protocol.stages[stage].matrix.methods
        ids = {c.id for c in paper_plan.cases if c.stage == stage and c.variant is None}
        expected = {case_id(stage, m, method, 8, 1) for m, method in itertools.product(PAPER_MODELS, methods)}
        assert ids == expected


def test_paper_pretraining_covers_the_named_configurations(protocol):
    methods = set(protocol.stages["pretrain"].matrix.methods)
    assert {"naive", "z2", "z3", "z2+o", "z3+o", "q", "r", "f"} <= methods
    assert any(method.count("+") >= 2 for method in methods), "combinations are part of the matrix"


def test_finetuning_covers_lora_and_qlora_with_each_optimisation(protocol):
    methods = set(protocol.stages["finetune"].matrix.methods)
    for base in ("l", "ql"):
        assert {base, f"{base}+z2", f"{base}+z3", f"{base}+f", f"{base}+r"} <= methods
        assert any(m.startswith(base + "+") and "+o" in m for m in methods)


def test_paper_parameters_are_the_published_ones(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.z3+o.g8")
    p = case.params
    assert (p.seq_len, p.micro_batch, p.dtype, p.warmup_steps, p.measured_steps, p.runs) == (350, 1, "bf16", 30, 100, 3)
    assert (p.zero_stage, p.offload) == (3, True)


def test_models_have_the_llama2_shapes(protocol):
    m70 = protocol.models["llama2-70b"]
    assert (m70.hidden_size, m70.num_layers, m70.num_heads, m70.num_kv_heads, m70.intermediate_size) == (
        8192,
        80,
        64,
        8,
        28672,
    )
    m13 = protocol.models["llama2-13b"]
    assert (m13.hidden_size, m13.num_layers, m13.intermediate_size) == (5120, 40, 13824)


def test_case_ids_are_identical_from_one_load_to_the_next(paper_plan):
    again = build_plan(load_protocol(), "paper")
    assert [c.id for c in again.cases] == [c.id for c in paper_plan.cases]
    assert again.model_dump_json() == paper_plan.model_dump_json()


def test_case_ids_are_unique(paper_plan):
    ids = [c.id for c in paper_plan.cases]
    assert len(ids) == len(set(ids))


def test_a_non_default_micro_batch_is_part_of_the_id(paper_plan):
    scaling = [c.id for c in paper_plan.cases if c.stage == "scaling" and c.variant is None]
    assert scaling == [f"scaling.llama2-7b.q.g{n}.b2" for n in (1, 2, 4, 8)]


def test_qlora_sets_both_lora_and_4bit(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "finetune.llama2-7b.ql+z2.g8")
    assert (case.params.peft, case.params.quantization, case.params.zero_stage) == ("qlora", "nf4-double", 2)
    assert case.params.lora_rank == 64


def test_unpublished_parameters_are_declared_with_the_case(paper_plan):
    case = next(c for c in paper_plan.cases if c.stage == "finetune")
    assert "lora_rank" in case.unpublished
    serve = next(c for c in paper_plan.cases if c.stage == "serve")
    assert "max_output_tokens" in serve.unpublished


def test_later_stages_are_declared_in_the_paper_profile(paper_plan):
    assert {"serve", "comm", "profile", "scaling"} <= {c.stage for c in paper_plan.cases}


def test_smoke_profile_runs_tiny_llama_on_cpu(smoke_plan):
    assert smoke_plan.device == "cpu" and not smoke_plan.comparable_to_reference
    assert {c.model for c in smoke_plan.cases if c.workload == "train"} == {"tiny-llama"}
    zero = {c.params.zero_stage for c in smoke_plan.cases if c.workload == "train" and c.gpus == 2}
    assert zero == {0, 2, 3}


@pytest.mark.parametrize(
    "method, reason",
    [
        ("o", "needs one of z2, z3"),
        ("l+ql", "cannot go with"),
        ("z2+z3", "cannot go with"),
        ("z9", "unknown option 'z9'"),
        ("r+r", "repeats"),
    ],
)
def test_an_invalid_method_names_the_manifest_key_and_reason(manifests_copy, method, reason):
    path = manifests_copy / "protocol.yaml"
    text = path.read_text().replace(
        "methods: [naive, z2, z3, z2+o, z3+o, q, r, f, megatron+tp2]", f"methods: [{method}]"
    )
    path.write_text(text)
    with pytest.raises(ManifestError) as err:
        load_protocol(path)
    assert err.value.key == "profiles.smoke.stages.pretrain.methods"
    assert reason in err.value.reason


def test_select_refuses_unknown_names(smoke_plan):
    with pytest.raises(ValueError, match="no stage"):
        select(smoke_plan, stages=("warp",))
    with pytest.raises(ValueError, match="no case"):
        select(smoke_plan, case_ids=("pretrain.nope.g1",))


def test_select_by_stage_and_case(smoke_plan):
    chosen = select(smoke_plan, stages=("scaling",), case_ids=("pretrain.tiny-llama.z3.g2",))
    assert [c.id for c in chosen] == [
        "pretrain.tiny-llama.z3.g2",
        "scaling.tiny-llama.q.g1.b2",
        "scaling.tiny-llama.q.g2.b2",
    ]
