"""A step dissected (kit.breakdown), the analytical model beside it (kit.predictions), and the
profile stage run for real through the CLI."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from kit.breakdown import (
    PARTS,
    Breakdown,
    Mark,
    StepBounds,
    average_module_times,
    paper_block,
    paper_part,
    phase_times,
    step_times,
    subtract,
    trace_activity,
    union,
)
from kit.hardware import load_hardware
from kit.host import Host, skip_reason
from kit.predictions import (
    host_gpu_spec,
    predicted_oom,
    predicted_training_memory,
    serving_bounds,
    training_step_bound,
)
from kit.protocol import build_plan
from kit.results import PeakMemory, RankSample, Result, RunDir, RunSample
from kit.stages.profile import breakdown_figures, profile_case_metrics
from kit.stages.training import train_case_metrics

H100 = "NVIDIA H100 80GB HBM3"
KIT = [sys.executable, "-m", "kit.cli"]


FIXTURES = Path(__file__).parent / "fixtures"


def case_of(plan, case_id):
    return next(c for c in plan.cases if c.id == case_id)


def fwd(t, key, label, edge):
    return Mark(t, key, label, "forward", edge)


def bwd(t, key, label, edge):
    return Mark(t, key, label, "backward", edge)


def passes(key, label, forward, backward):
    """Marks of one module instance's forward (begin, end) and backward (begin, end...) pass."""
    marks = [fwd(forward[0], key, label, "begin"), fwd(forward[1], key, label, "end")]
    marks.append(bwd(backward[0], key, label, "begin"))
    marks += [bwd(t, key, label, "end") for t in backward[1:]]
    return marks


# --- Names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module, part",
    [
        ("model.embed_tokens", "Embedding"),
        ("model.rotary_emb", "RoPE"),
        ("model.layers.0.input_layernorm", "RMSNorm"),
        ("model.layers.31.post_attention_layernorm", "RMSNorm"),
        ("model.norm", "RMSNorm"),
        ("model.layers.7.self_attn.q_proj", "q_proj"),
        ("model.layers.7.self_attn.k_proj", "k_proj"),
        ("model.layers.7.self_attn.v_proj", "v_proj"),
        ("model.layers.7.self_attn.o_proj", "o_proj"),
        ("model.layers.2.mlp.gate_proj", "gate_proj"),
        ("model.layers.2.mlp.up_proj", "up_proj"),
        ("model.layers.2.mlp.down_proj", "down_proj"),
        ("model.layers.2.mlp.act_fn", "SiLU"),
        ("lm_head", "LM head"),
        ("model.layers.2", None),
        ("model.layers.2.mlp", None),
        ("model", None),
    ],
)
def test_hugging_face_module_names_map_to_the_papers_parts(module, part):
    assert paper_part(module) == part


@pytest.mark.parametrize(
    "module, block",
    [("model.layers.0", "Decoder layers"), ("model.layers.0.self_attn", "Self-attention"),
     ("model.layers.0.mlp", "MLP"), ("model.layers", None), ("model.layers.0.mlp.up_proj", None)],
)  # fmt: skip
def test_blocks_are_named_apart_from_parts(module, block):
    assert paper_block(module) == block


# --- Intervals and marks ------------------------------------------------------------------------


def test_interval_union_and_subtraction():
    assert union([(3, 5), (0, 1), (0.5, 2), (4, 6)]) == [(0, 2), (3, 6)]
    assert subtract([(0, 10)], [(2, 3), (5, 7)]) == [(0, 2), (3, 5), (7, 10)]


def test_parts_are_summed_over_layers_and_the_rest_of_each_phase_is_other():
    bounds = StepBounds(begin=0, forward_end=10, backward_end=30, optimizer_end=35)
    marks = [
        *passes("model.layers.0.self_attn.q_proj", "q_proj", (1, 2), (25, 27)),
        *passes("model.layers.1.self_attn.q_proj", "q_proj", (4, 6), (15, 18)),
        *passes("lm_head", "LM head", (7, 9), (11, 14)),
    ]
    step = step_times(marks, bounds)
    assert step.labels["q_proj"].forward_ms == 3 and step.labels["q_proj"].calls == 2
    assert step.labels["q_proj"].backward_ms == 5
    assert step.walls_ms == {"forward": 10, "backward": 20, "optimizer": 5}
    assert step.covered_ms == {"forward": 5, "backward": 8, "optimizer": 0}
    assert step.summed_ms["forward"] == step.covered_ms["forward"]


def test_a_backward_pass_ends_at_its_last_end_mark():
    # input gradients at 12, the weight's gradient accumulated at 13: the backward lasts 3
    marks = passes("lm_head", "LM head", (1, 2), (10, 12, 13))
    step = step_times(marks, StepBounds(0, 5, 20, 21))
    assert step.labels["LM head"].backward_ms == 3


def test_recomputation_is_taken_out_of_the_backward_pass_it_ran_in():
    bounds = StepBounds(begin=0, forward_end=10, backward_end=30, optimizer_end=31)
    marks = [
        *passes("model.layers.0.mlp.down_proj", "down_proj", (5, 6), (12, 22)),
        *passes("model.layers.0.self_attn.q_proj", "q_proj", (1, 2), (25, 26)),
        fwd(13, "recompute#0", "recompute", "begin"),
        fwd(14, "model.layers.0.self_attn.q_proj", "q_proj", "begin"),  # the re-run forward
        fwd(15, "model.layers.0.self_attn.q_proj", "q_proj", "end"),
        fwd(17, "recompute#0", "recompute", "end"),
    ]
    step = step_times(marks, bounds)
    assert step.labels["down_proj"].backward_ms == 10 - 4
    assert step.labels["q_proj"].recompute_ms == 1 and step.labels["q_proj"].calls == 1
    assert step.recompute_ms == 4
    assert step.covered_ms["backward"] == 6 + 1 + 1  # down_proj, q_proj's backward, its re-run


def test_a_recomputation_stopped_early_is_counted_not_paired():
    marks = [
        *passes("model.layers.0.mlp.down_proj", "down_proj", (5, 6), (12, 22)),
        fwd(13, "recompute#0", "recompute", "begin"),
        fwd(15, "model.layers.0.mlp.down_proj", "down_proj", "begin"),  # never ends
        fwd(16, "recompute#0", "recompute", "end"),
    ]
    step = step_times(marks, StepBounds(0, 10, 30, 31))
    assert step.unmatched_marks == 1
    assert step.labels["down_proj"].recompute_ms == 0 and step.labels["down_proj"].backward_ms == 7


def breakdown_of(steps, plain, **activity):
    return Breakdown(
        device="cpu", timer="test", micro_batch=1, seq_len=8, attention="sdpa", recompute=False,
        optimizer="test", measured_steps=len(plain), step_ms=sum(b.optimizer_end - b.begin for b in plain) / len(plain),
        step_ms_per_step=[b.optimizer_end - b.begin for b in plain],
        instrumented_step_ms=sum(sum(s.walls_ms.values()) for s in steps) / len(steps),
        instrumented_step_ms_per_step=[sum(s.walls_ms.values()) for s in steps],
        phases=phase_times(plain, steps, activity), modules=average_module_times(steps, PARTS),
        blocks=[], blocks_step_ms=0.0, activity_method="test", method=[],
    )  # fmt: skip


def test_the_parts_the_optimizer_and_other_add_up_to_the_step():
    bounds = StepBounds(begin=0, forward_end=10, backward_end=30, optimizer_end=35)
    marks = [*passes("lm_head", "LM head", (1, 9), (11, 28)), *passes("model.embed_tokens", "Embedding", (0, 1), (28, 29))]
    breakdown = breakdown_of([step_times(marks, bounds)], [bounds])
    assert breakdown.modules_ms == 9 + 18 + 5 and breakdown.overlap_ms == 0
    assert breakdown.instrumented_step_ms == 35 and breakdown.other_ms == pytest.approx(3)
    assert breakdown.other_share == pytest.approx(3 / 35) and breakdown.within_tolerance is True  # 8.6 % <= 10 %
    assert [p.other_ms for p in breakdown.phases] == [1, 2, 0]
    again = Breakdown.model_validate(json.loads(breakdown.model_dump_json()))  # as the report reads it
    assert again.other_ms == breakdown.other_ms


def test_a_step_that_parts_leave_mostly_unexplained_is_outside_the_tolerance():
    bounds = StepBounds(begin=0, forward_end=10, backward_end=20, optimizer_end=21)
    breakdown = breakdown_of([step_times(passes("lm_head", "LM head", (1, 2), (11, 12)), bounds)], [bounds])
    assert breakdown.other_share == pytest.approx(18 / 21) and not breakdown.within_tolerance


# --- Device activity ----------------------------------------------------------------------------


def span(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_gpu_idle_share_is_the_phase_window_without_kernels_or_copies():
    trace = {"traceEvents": [
        span("user_annotation", "kit::forward", 1000, 100),
        span("user_annotation", "kit::backward", 1100, 200),
        span("user_annotation", "kit::optimizer", 1300, 50),
        span("kernel", "gemm", 1010, 40), span("kernel", "gemm", 1030, 40),  # overlapping: 60 us
        span("gpu_memcpy", "copy", 1080, 10),
        span("kernel", "gemm_bwd", 1100, 190),
        span("kernel", "adam", 1290, 60),  # 10 us in backward, 50 in optimizer
        span("cpu_op", "aten::mm", 1000, 300),  # host ops do not count on a GPU
    ]}  # fmt: skip
    found = trace_activity(trace, "cuda")
    assert found["forward"].kernel_ms == pytest.approx(0.060) and found["forward"].device_busy_ms == pytest.approx(0.070)
    assert found["forward"].idle_share == pytest.approx(0.3)
    assert found["backward"].idle_share == pytest.approx(0.0)
    assert found["optimizer"].idle_share == pytest.approx(0.0)


def test_a_cpu_trace_gives_operator_time_and_no_idle_share():
    trace = {"traceEvents": [span("user_annotation", "kit::forward", 0, 100), span("cpu_op", "aten::linear", 10, 50),
                             span("cpu_op", "aten::mm", 20, 30), span("cpu_op", "aten::add", 70, 10)]}  # fmt: skip
    found = trace_activity(trace, "cpu")
    assert found["forward"].idle_share is None and found["forward"].host_op_share == pytest.approx(0.6)
    assert set(found) == {"forward"}


def rank_with(details, device="cpu", name="x86_64", allocated=None):
    return RankSample(
        rank=0, world_size=1, status="ok", device=device, device_name=name, details=details,
        peak_memory=PeakMemory(host_rss_bytes=2**30, device_allocated_bytes=allocated), started_at="t", finished_at="t",
    )  # fmt: skip


def test_profile_metrics_carry_the_names_the_reference_claims_read(paper_plan):
    bounds = StepBounds(begin=0, forward_end=100, backward_end=300, optimizer_end=400)
    marks = [*passes("model.layers.0.self_attn.q_proj", "q_proj", (1, 9), (250, 260)),
             *passes("Attention#0", "Attention", (10, 30), (200, 240)),
             *passes("model.layers.0.mlp.up_proj", "up_proj", (40, 60), (110, 150))]  # fmt: skip
    trace_phase = {"forward": trace_activity({"traceEvents": [span("user_annotation", "kit::forward", 0, 100_000),
                                                              span("kernel", "k", 0, 93_000)]}, "cuda")["forward"]}  # fmt: skip
    breakdown = breakdown_of([step_times(marks, bounds)], [bounds], **trace_phase)
    case = case_of(paper_plan, "profile.llama2-7b.base.g1")
    run = RunSample(index=1, status="ok", exit_code=0, wall_s=1.0,
                    ranks=[rank_with(breakdown.model_dump(mode="json"), "cuda", H100, 60 * 2**30)])  # fmt: skip
    found, notes = profile_case_metrics(case, [run])
    assert found["step_s"].mean == pytest.approx(0.4) and found["optimizer_s"].mean == pytest.approx(0.1)
    assert found["attention_forward_s"].mean == pytest.approx(0.02) and found["attention_backward_s"].mean == pytest.approx(0.04)
    assert found["forward_idle_share"].mean == pytest.approx(0.07) and found["forward_idle_share"].unit == "fraction"
    assert found["qkv_proj_s"].mean == pytest.approx(0.018) and found["mlp_s"].mean == pytest.approx(0.06)
    assert "mfu" in found and found["tokens_per_s"].mean == pytest.approx(350 / 0.4)
    assert any("predicted peak memory" in note for note in notes)
    assert set(breakdown_figures(breakdown)) >= {"backward_s", "forward_share", "other_s"}


# --- The analytical model beside measurements ----------------------------------------------------


@pytest.fixture(scope="module")
def hardware():
    return load_hardware()


def test_a_7b_step_without_zero_is_predicted_not_to_fit_in_80_gb(paper_plan, hardware):
    case = case_of(paper_plan, "pretrain.llama2-7b.naive.g8")
    reason = predicted_oom(case, hardware.gpus["a800-sxm4-80gb"])
    # 20 bytes per parameter (DeepSpeed's bf16 model states) x 6.74e9 parameters alone exceed 80 GB
    assert reason.startswith("predicted OOM (needs 1") and reason.endswith("device has 80 GB (datasheet, hardware.yaml))")


# An H100 80GB HBM3 as nvidia-smi reports it ("0MiB /  81559MiB" in a public H100 server's
# nvidia-smi output): NVML's total memory, in bytes.
H100_NVML_BYTES = 81559 * 2**20


def test_the_gpus_capacity_comes_from_nvml_in_bytes_before_the_datasheet(paper_plan, hardware):
    case = case_of(paper_plan, "pretrain.llama2-7b.naive.g8")
    reason = predicted_oom(case, hardware.gpus["a800-sxm4-80gb"], capacity_bytes=H100_NVML_BYTES)
    assert reason.endswith("the GPU has 79.6 GiB (NVML))")
    host = Host(gpu_names=["NVIDIA H100 80GB HBM3"] * 8, gpu_memory_bytes=[H100_NVML_BYTES] * 8)
    assert "(NVML)" in skip_reason(case, host, skip_predicted_oom=True)


def test_a_case_whose_prediction_fits_the_nvml_capacity_exactly_is_never_skipped(paper_plan):
    case = case_of(paper_plan, "pretrain.llama2-7b.z2.g8")
    needs = int(predicted_training_memory(case).memory.total) + 1
    assert predicted_oom(case, None, capacity_bytes=needs) is None
    assert predicted_oom(case, None, capacity_bytes=needs - 2).startswith("predicted OOM")


def test_every_training_case_of_the_quick_profile_fits_one_80_gb_gpu(protocol):
    quick = build_plan(protocol, "quick")
    training = [case for case in quick.cases if case.workload == "train"]
    assert training and all(predicted_oom(case, None, capacity_bytes=H100_NVML_BYTES) is None for case in training)
    assert all(predicted_training_memory(case).memory is not None for case in training)


def test_the_4bit_memory_model_stays_below_the_peak_measured_on_real_gpus():
    """4-bit pre-training (frozen NF4 linears, 8-bit AdamW on the rest) at micro-batch 2, against
    the allocator peak of the recorded one-GPU runs (tests/fixtures/gpu_results: H200)."""
    recorded = json.loads((FIXTURES / "gpu_results" / "h200x1-scaling.llama2-7b.q.g1.b2.json").read_text())
    measured_gib = recorded["metrics"]["peak_memory_gib"]["mean"]
    case = Result.model_validate(recorded).case
    predicted = predicted_training_memory(case).memory
    assert 0.9 * measured_gib < predicted.total / 2**30 <= measured_gib
    assert "decoder linears frozen in NF4" in predicted_training_memory(case).basis


def test_zero3_spreads_the_states_so_the_7b_step_fits(paper_plan, hardware):
    assert predicted_oom(case_of(paper_plan, "pretrain.llama2-7b.z3.g8"), hardware.gpus["a800-sxm4-80gb"]) is None


def test_the_profile_step_fits_on_one_80_gb_gpu_but_not_on_24_gb(paper_plan, hardware):
    case = case_of(paper_plan, "profile.llama2-7b.r.g1.b16")
    assert predicted_oom(case, hardware.gpus["a800-sxm4-80gb"]) is None
    assert "device has 24 GB" in predicted_oom(case, hardware.gpus["rtx-4090"])


def test_no_prediction_without_a_known_memory_size_or_on_a_cpu(paper_plan, smoke_plan, hardware):
    assert predicted_oom(case_of(paper_plan, "pretrain.llama2-7b.naive.g8"), hardware.gpus["h20"]) is None
    assert predicted_oom(case_of(smoke_plan, "pretrain.tiny-llama.naive.g2"), hardware.gpus["rtx-4090"]) is None
    assert predicted_training_memory(case_of(paper_plan, "pretrain.llama2-7b.megatron.g8")).memory is not None
    assert predicted_training_memory(case_of(smoke_plan, "pretrain.tiny-llama.megatron+tp2.g2")).memory is None


def test_the_runner_skips_a_predicted_oom_only_when_asked(paper_plan):
    case = case_of(paper_plan, "pretrain.llama2-7b.naive.g8")
    host = Host(gpu_names=["NVIDIA A800-SXM4-80GB"] * 8)
    assert skip_reason(case, host) is None
    assert skip_reason(case, host, skip_predicted_oom=True).startswith("predicted OOM")


def test_mixed_gpus_have_no_single_spec(hardware):
    assert host_gpu_spec(["NVIDIA H100 80GB HBM3", "NVIDIA H200"], 2, hardware) is None
    assert host_gpu_spec(["NVIDIA H100 80GB HBM3"] * 2, 2, hardware).model.startswith("H100")


def train_run(step_s, allocated, name=H100, ranks=8):
    return RunSample(index=1, status="ok", exit_code=0, wall_s=1.0, ranks=[
        RankSample(rank=r, world_size=ranks, status="ok", device="cuda", device_name=name, step_s=[step_s],
                   tokens_per_step=350, peak_memory=PeakMemory(host_rss_bytes=1, device_allocated_bytes=allocated),
                   started_at="t", finished_at="t") for r in range(ranks)])  # fmt: skip


def test_training_results_get_the_predicted_memory_beside_the_measured(paper_plan):
    _, notes = train_case_metrics(case_of(paper_plan, "pretrain.llama2-7b.z3.g8"), [train_run(1.0, 20 * 2**30)])
    memory = next(note for note in notes if note.startswith("predicted peak memory per GPU"))
    assert "ZeRO-3, world size 8" in memory and "measured 20 GiB" in memory
    assert not any("impossible" in note for note in notes)


def test_memory_below_the_weights_is_flagged(paper_plan):
    _, notes = train_case_metrics(case_of(paper_plan, "pretrain.llama2-7b.naive.g8"), [train_run(1.0, 2**30)])
    assert any("below the weights" in note and "impossible" in note for note in notes)


def test_a_step_faster_than_the_roofline_bound_is_flagged(paper_plan, hardware):
    case = case_of(paper_plan, "pretrain.llama2-7b.z3.g8")
    bound = training_step_bound(case, hardware.lookup(H100))
    assert bound.limited_by == "compute" and 0.01 < bound.seconds < 0.1
    _, notes = train_case_metrics(case, [train_run(bound.seconds / 2, 20 * 2**30)])
    assert any("below its lower bound" in note for note in notes)


def test_serving_bounds_put_decode_on_the_memory_roof(paper_plan, hardware):
    h100 = hardware.lookup(H100)
    small = serving_bounds(case_of(paper_plan, "serve.llama2-7b.vllm.g8"), h100)
    large = serving_bounds(case_of(paper_plan, "serve.llama2-70b.vllm.g8"), h100)
    # one decode step of one sequence reads every weight: ~13.5 GB over 8 x 3.35 TB/s
    assert small.decode_step_one.limited_by == "memory" and small.decode_step_one.seconds == pytest.approx(5.0e-4, rel=0.05)
    assert small.request_latency_s > small.prefill_one.seconds + 254 * small.decode_step_one.seconds * 0.99
    # compute grows with the parameters (x 10); memory does not: 70B's GQA keeps a smaller KV cache
    assert large.burst.compute_s / small.burst.compute_s == pytest.approx(10, rel=0.15)
    assert large.burst.seconds > small.burst.seconds and large.burst.limited_by == "compute"
    assert small.max_output_tokens_per_s == pytest.approx(1000 * 256 / small.burst.seconds)
    assert serving_bounds(case_of(paper_plan, "serve.llama2-7b.vllm.g8"), hardware.gpus["h20"]) is None


# --- End to end: the profile stage of the smoke profile, through the CLI ----------------------


@pytest.mark.e2e
def test_kit_run_profile_stage_writes_phase_and_module_breakdowns(real_smoke_run, smoke_plan):
    run = real_smoke_run
    run_dir = RunDir(run)
    sums = (run / "SHA256SUMS").read_text()
    layers = smoke_plan.cases[0].shape.num_layers
    for case in (c for c in smoke_plan.cases if c.stage == "profile"):
        result = run_dir.read_result(case.id)
        if case.method == "f":
            assert result.status == "unavailable" and "CUDA" in result.reason
            continue
        assert result.status == "ok", f"{case.id}: {result.reason}"
        rank = result.samples[0].ranks[0]
        breakdown = Breakdown.model_validate(rank.details)
        trace = run / "cases" / case.id / "runs" / "1" / breakdown.trace_file
        with gzip.open(trace, "rt") as handle:
            assert any(e.get("name") == "kit::backward" for e in json.load(handle)["traceEvents"])
        assert f"cases/{case.id}/runs/1/{breakdown.trace_file}" in sums

        assert [p.name for p in breakdown.phases] == ["forward", "backward", "optimizer"]
        assert all(p.wall_ms > 0 and len(p.wall_ms_per_step) == case.params.measured_steps for p in breakdown.phases)
        calls = {m.name: m.calls for m in breakdown.modules}
        assert set(calls) == set(PARTS)
        assert calls["q_proj"] == calls["Attention"] == calls["SiLU"] == layers
        assert calls["RMSNorm"] == 2 * layers + 1 and calls["RoPE"] == layers + 1 and calls["Embedding"] == 1
        assert all(m.forward_ms > 0 for m in breakdown.modules)
        assert {b.name for b in breakdown.blocks} == {"Decoder layers", "Self-attention", "MLP"}
        # the acceptance rule: the parts explain the step to within 10 %, or the gap is reported
        assert 0 < breakdown.modules_ms and 0 < breakdown.instrumented_step_ms <= 1000 * result.metrics["step_s"].mean * 1.5
        assert any(f"other {breakdown.other_ms:.4g} ms" in note for note in result.notes)
        assert all(p.activity.idle_share is None and 0 < p.activity.host_op_share <= 1 for p in breakdown.phases)
        for metric in ("step_s", "optimizer_s", "attention_forward_s", "attention_backward_s", "decoder_layers_s", "other_s"):
            assert result.metrics[metric].mean > 0 or metric == "other_s", metric
        # a block's time is a part of the steps that timed it (C15's share is of those)
        assert result.metrics["decoder_layers_s"].mean <= result.metrics["blocks_step_s"].mean
        assert "forward_idle_share" not in result.metrics  # not measurable on a CPU
        if case.params.recompute:
            assert breakdown.phase("backward").recompute_ms > 0 and result.metrics["recompute_s"].mean > 0
