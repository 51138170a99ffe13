"""A step dissected on the device's timeline (kit.measure.breakdown), the analytical model beside it
(kit.plan.predictions), and the profile stage run for real through the CLI.

The attribution is checked on hand-made traces (each rule alone), on the two real H100 traces of
the recorded one-GPU run (tests/fixtures/gpu_traces/SOURCE says what they hold and lack), on a
trace the workload records in this process (a tiny Llama on the CPU, with the GPU's recording
scopes), and on the smoke run's profile cases."""

from __future__ import annotations

import gzip
import json
import sys
from typing import NamedTuple

import pytest
from support import FIXTURES
from support.recorded_h100_traces import CASES, recorded

from kit.host.this_host import Host
from kit.measure.breakdown import (
    CALL_PREFIX,
    CALLS_KEY,
    MODULE_PREFIX,
    PARTS,
    PHASE_RANGES,
    PHASES,
    RECOMPUTE_RANGE,
    ModuleCalls,
    overlap,
    paper_block,
    paper_part,
    summarize_steps,
    timeline,
    union,
)
from kit.measure.profile import breakdown_figures, breakdown_notes, profile_case_metrics
from kit.measure.training import train_case_metrics
from kit.plan.fit import skip_reason
from kit.plan.predictions import (
    host_gpu_spec,
    predicted_oom,
    predicted_training_memory,
    serving_bounds,
    training_step_bound,
)
from kit.plan.protocol import Case, build_plan
from kit.reference.published import load_reference, relation_metrics
from kit.rundir.breakdown import Breakdown
from kit.rundir.directory import RunDir
from kit.rundir.schema import PeakMemory, RankSample, Result, RunSample
from kit.theory.hardware import load_hardware

H100 = "NVIDIA H100 80GB HBM3"
KIT = [sys.executable, "-m", "kit.cli"]


def case_of(plan, case_id):
    return next(c for c in plan.cases if c.id == case_id)


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
    [
        ("model.layers.0", "Decoder layers"),
        ("model.layers.0.self_attn", "Self-attention"),
        ("model.layers.0.mlp", "MLP"),
        ("model.layers", None),
        ("model.layers.0.mlp.up_proj", None),
    ],
)
def test_blocks_are_named_apart_from_parts(module, block):
    assert paper_block(module) == block


def test_interval_union():
    assert union([(3, 5), (0, 1), (0.5, 2), (4, 6)]) == [(0, 2), (3, 6)]


# --- Hand-made traces: one rule each ------------------------------------------------------------


class Trace:
    """A Chrome trace as torch.profiler writes one: ranges and operators on host threads, device
    events on a stream, each joined to its launch by its correlation id."""

    def __init__(self):
        self.events: list[dict] = []
        self.calls: list[list] = []
        self.correlation = 0

    def host(self, name, start, end, tid="main", cat="user_annotation", **args):
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": start, "dur": end - start, "args": args}
        )

    def node(self, name, start, end, sequence, forward_thread=1, tid="autograd"):
        self.host(name, start, end, tid, "cpu_op", **{"Sequence number": sequence, "Fwd thread id": forward_thread})

    def kernel(self, launched_at, start, end, tid="main", name="kernel", stream=7, launched=True):
        self.correlation += 1
        if launched:
            self.host(
                "cudaLaunchKernel", launched_at, launched_at + 1, tid, "cuda_runtime", correlation=self.correlation
            )
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": start,
                "dur": end - start,
                "args": {"correlation": self.correlation, "stream": stream},
            }
        )

    def phases(self, forward, backward, optimizer):
        for phase, (start, end) in zip(PHASES, (forward, backward, optimizer)):
            self.host(f"kit::{phase}", start, end)

    def module(self, name, start, end, sequences=None, tid="main"):
        self.host(name, start, end, tid)
        if sequences is not None:
            self.calls.append([name, "main" if tid == "main" else "worker", *sequences])

    def trace(self):
        return {"traceEvents": self.events, CALLS_KEY: json.dumps(self.calls)}


Q = MODULE_PREFIX + "model.layers.0.self_attn.q_proj"
ATTN = MODULE_PREFIX + "model.layers.0.self_attn"
LAYER = MODULE_PREFIX + "model.layers.0"


def one_layer_step() -> Trace:
    """Forward 0-100 us: q_proj (a kernel of 20 us at 10-30) inside self-attention inside a decoder
    layer, then a residual add in no part but in the layer (10 us at 50-60); backward 100-200: q_proj's node (40 us at
    120-160) on the engine's thread, made by the forward's sequence number 11; optimizer 200-250."""
    t = Trace()
    t.phases((0, 100), (100, 200), (200, 250))
    t.module(LAYER, 2, 90, (10, 13))
    t.module(ATTN, 4, 42, (10, 12))
    t.module(Q, 5, 40, (11, 12))
    t.kernel(6, 10, 30)
    t.kernel(45, 50, 60, name="add")
    t.node("MmBackward0", 105, 118, 11)
    t.kernel(110, 120, 160, tid="autograd")
    t.kernel(205, 210, 240, name="adamw")
    return t


def test_each_kernel_goes_to_the_module_and_phase_that_launched_it():
    [step] = timeline(one_layer_step().trace(), "cuda")
    assert step.parts == {"q_proj": {"forward": 0.020, "backward": 0.040, "recompute": 0.0}}
    assert step.blocks["Decoder layers"] == pytest.approx({"forward": 0.030, "backward": 0.040, "recompute": 0.0})
    assert step.blocks["Self-attention"] == pytest.approx({"forward": 0.020, "backward": 0.040, "recompute": 0.0})
    assert step.other_ms == {"forward": pytest.approx(0.010), "backward": 0.0, "optimizer": pytest.approx(0.030)}
    assert step.calls == {"q_proj": 1, "Decoder layers": 1, "Self-attention": 1}
    assert step.operators == {
        "forward|kernel": pytest.approx(0.02),
        "forward|add": pytest.approx(0.01),
        "backward|MmBackward0": pytest.approx(0.04),
        "optimizer|adamw": pytest.approx(0.03),
    }


def test_the_parts_other_optimizer_and_idle_add_up_to_the_traced_step():
    [step] = timeline(one_layer_step().trace(), "cuda")
    assert step.window_ms == {"forward": 0.1, "backward": 0.1, "optimizer": 0.05}
    assert step.busy_ms == pytest.approx({"forward": 0.03, "backward": 0.04, "optimizer": 0.03})
    breakdown = summarize_steps([step], [{"forward": 0.1, "backward": 0.1, "optimizer": 0.05}], **FIELDS)
    assert breakdown.accounted_ms == pytest.approx(breakdown.traced_step_ms) == pytest.approx(0.25)
    assert [p.idle_ms for p in breakdown.phases] == pytest.approx([0.07, 0.06, 0.02])
    assert breakdown.within_tolerance and breakdown.profiler_overhead == pytest.approx(0.0)
    again = Breakdown.model_validate(json.loads(breakdown.model_dump_json()))  # as the report reads it
    assert again.accounted_ms == breakdown.accounted_ms


FIELDS = {
    "device": "cuda",
    "timer": "t",
    "profiler": "p",
    "micro_batch": 1,
    "seq_len": 8,
    "attention": "eager",
    "recompute": False,
    "optimizer": "o",
    "measured_steps": 1,
    "method": [],
}


def test_a_phase_lasts_until_its_last_kernel_ends_so_the_host_running_ahead_is_not_idle():
    t = Trace()
    t.phases((0, 20), (20, 30), (30, 40))  # the host leaves the forward range at 20 ...
    t.module(Q, 1, 19, (0, 1))
    for k in range(6):  # ... with 6 kernels of 10 us queued from 2: the device ends at 62
        t.kernel(2 + 3 * k, 2 + 10 * k, 12 + 10 * k)
    t.node("MmBackward0", 21, 29, 0)
    t.kernel(22, 62, 72, tid="autograd")  # queued behind the forward
    [step] = timeline(t.trace(), "cuda")
    assert step.window_ms["forward"] == pytest.approx(0.062) and step.busy_ms["forward"] == pytest.approx(0.060)
    assert step.window_ms["backward"] == pytest.approx(0.010) and step.busy_ms["backward"] == pytest.approx(0.010)
    assert step.host_ms["forward"] == pytest.approx(0.018)  # the last launch returned at 18


def test_a_launch_bound_phase_is_said_to_be_so():
    t = Trace()
    t.phases((0, 100), (100, 110), (110, 120))
    for k in range(10):  # a kernel of 2 us every 10 us: the device waits for the host
        t.kernel(10 * k, 10 * k + 1, 10 * k + 3)
    [step] = timeline(t.trace(), "cuda")
    breakdown = summarize_steps([step], [{"forward": 0.1, "backward": 0.01, "optimizer": 0.01}], **FIELDS)
    forward = breakdown.phase("forward")
    assert forward.idle_share == pytest.approx(0.8) and forward.host_ms == pytest.approx(0.091)
    assert forward.launch_bound and not breakdown.phase("optimizer").launch_bound
    assert any(
        note.startswith("launch-bound (the device waited for the host): forward") for note in breakdown_notes(breakdown)
    )


def test_kernels_on_two_streams_at_once_count_once_and_a_kernel_without_launch_by_its_time():
    t = Trace()
    t.phases((0, 100), (100, 110), (110, 120))
    t.module(Q, 1, 50, (0, 1))
    t.kernel(2, 10, 30)
    t.kernel(3, 20, 40, stream=8)  # overlaps the first by 10 us
    t.kernel(0, 60, 70, launched=False, name="nccl")  # no launch recorded
    [step] = timeline(t.trace(), "cuda")
    assert step.parts["q_proj"]["forward"] == pytest.approx(0.030) and step.busy_ms["forward"] == pytest.approx(0.040)
    assert step.unlaunched == 1 and step.other_ms["forward"] == pytest.approx(0.010)


def test_a_recomputation_is_its_parts_recompute_time_and_the_decoder_layers():
    t = Trace()
    t.phases((0, 100), (100, 300), (300, 310))
    t.module(Q, 5, 40, (11, 12))
    t.kernel(6, 10, 30)
    t.node("MulBackward0", 110, 200, 30)  # the node that needs the dropped activation ...
    t.host(RECOMPUTE_RANGE, 112, 190, tid="autograd")  # ... re-runs the layer's forward
    t.module(Q, 115, 150, tid="autograd")
    t.kernel(120, 130, 150, tid="autograd")
    t.kernel(160, 160, 170, tid="autograd", name="add")  # the residual add, in no part
    t.node("MmBackward0", 210, 230, 11)
    t.kernel(215, 220, 260, tid="autograd")
    [step] = timeline(t.trace(), "cuda")
    assert step.parts["q_proj"] == pytest.approx({"forward": 0.020, "backward": 0.040, "recompute": 0.020})
    assert step.blocks["Decoder layers"]["recompute"] == pytest.approx(0.030)
    assert step.recompute_ms == pytest.approx(0.030) and step.other_ms["backward"] == pytest.approx(0.010)


def test_module_calls_name_a_node_by_its_sequence_number_innermost_first():
    calls = ModuleCalls([[LAYER, "main", 10, 20], [ATTN, "main", 10, 15], [Q, "main", 11, 12], [Q, "worker", 0, 2]])
    assert calls.chain("main", 11) == [Q, ATTN, LAYER]
    assert calls.chain("main", 14) == [ATTN, LAYER] and calls.chain("main", 19) == [LAYER]
    assert calls.chain("worker", 1) == [Q] and calls.chain("main", 20) == [] and calls.chain("main", 1) == []


def test_on_a_cpu_the_busy_time_is_operator_time_and_python_between_them_is_idle():
    t = Trace()
    t.phases((0, 100), (100, 200), (200, 250))
    t.module(Q, 5, 60, (0, 1))
    t.host("aten::linear", 10, 40, cat="cpu_op")
    t.host("aten::mm", 12, 38, cat="cpu_op")  # nested: counted once
    t.host("aten::add", 70, 80, cat="cpu_op")
    t.host("MmBackward0", 120, 150, "main", "cpu_op", **{"Sequence number": 0, "Fwd thread id": 1})
    t.host("aten::mm", 125, 145, cat="cpu_op")
    t.host("aten::_foreach_add_", 210, 230, cat="cpu_op")
    [step] = timeline(t.trace(), "cpu")
    assert step.parts["q_proj"] == pytest.approx({"forward": 0.030, "backward": 0.030, "recompute": 0.0})
    assert step.other_ms == pytest.approx({"forward": 0.010, "backward": 0.0, "optimizer": 0.020})
    assert step.busy_ms == pytest.approx({"forward": 0.040, "backward": 0.030, "optimizer": 0.020})
    assert step.host_ms == {"forward": None, "backward": None, "optimizer": None}
    assert step.operators["forward|aten::linear"] == pytest.approx(0.030)


# --- The real H100 traces -------------------------------------------------------------------------


@pytest.fixture(scope="module", params=CASES)
def h100(request):
    return request.param, recorded(request.param)


def test_on_the_real_h100_traces_every_device_event_joins_its_launch_and_the_timeline_adds_up(h100):
    _, found = h100
    [step] = timeline(found.trace, "cuda")
    device_events = sum(1 for e in found.trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert step.unlaunched == 0 and step.events == device_events
    breakdown = found.breakdown
    # other, the optimizer's device time and the idle time are the traced step, to the rounding
    assert breakdown.accounted_ms == pytest.approx(breakdown.traced_step_ms, rel=1e-9)
    # each phase's busy time is what the recording kit made of the same trace, and the operators share it out
    assert [p.busy_ms for p in breakdown.phases] == pytest.approx(
        [p.activity.device_busy_ms for p in found.marked.phases], rel=1e-9
    )
    assert sum(step.operators.values()) == pytest.approx(breakdown.busy_ms, rel=1e-9)
    # recorded without module ranges nor the calls' sequence numbers (SOURCE): no part can be named
    assert breakdown.modules == [] and breakdown.parts_ms == 0


# The goal (issue 31): parts + other + optimizer + idle, the traced step, within 5 % of the plain
# step. These traces were recorded with every operator and a synchronisation at each phase's end
# (SOURCE): at micro-batch 1, where the host's launches bound the step, that recording lengthened it
# by 17 % (the plain steps themselves took 189 to 249 ms); at micro-batch 16 by 1.3 %.
TRACED_VS_PLAIN = {
    "profile.llama2-7b.base.g1": (247.34, 210.88, False),  # traced ms, plain ms, within 5 %
    "profile.llama2-7b.r.g1.b16": (812.11, 801.74, True),
}


def test_against_the_plain_step_the_h100_traces_meet_the_goal_where_the_host_does_not_bound_the_step(h100):
    case_id, found = h100
    breakdown = found.breakdown
    traced, plain, within = TRACED_VS_PLAIN[case_id]
    assert breakdown.accounted_ms == pytest.approx(traced, abs=0.01)
    assert breakdown.step_ms == pytest.approx(plain, abs=0.01) and breakdown.step_ms == found.marked.step_ms
    assert breakdown.within_tolerance is within
    assert breakdown.profiler_overhead == pytest.approx(traced / plain - 1, abs=1e-4)
    assert ("within" if within else "outside") + " the 5% goal" in breakdown_notes(breakdown)[0]


def test_at_micro_batch_1_the_h100_waits_for_the_host_in_forward_and_backward(h100):
    case_id, found = h100
    breakdown = found.breakdown
    bound = {p.name for p in breakdown.phases if p.launch_bound}
    assert bound == ({"forward", "backward"} if case_id.endswith("base.g1") else set())
    top = {(o.phase, o.name) for o in breakdown.operators[:3]}
    assert ("optimizer", "aten::_fused_adamw_") in top and ("backward", "MmBackward0") in top


# --- A trace the workload records: a tiny Llama on this CPU ---------------------------------------


class TinyRecording(NamedTuple):
    case: Case
    plain: list[dict[str, float]]  # the plain steps' phases (ms)
    scoped: tuple[str, dict]  # what recorded it, the trace: with the scopes a GPU records
    full: tuple[str, dict]  # with every operator, as a CPU records


@pytest.fixture(scope="module")
def tiny_recorded(tmp_path_factory, smoke_plan) -> TinyRecording:
    """The profile workload's own steps of the smoke model (with recomputation), in this process:
    two plain steps, then two profiled steps with the scopes it records on a GPU (only the ranges
    and the backward pass's autograd nodes, so every node must be named by the module calls'
    sequence numbers), then two with every operator, as on a CPU."""
    torch = pytest.importorskip("torch")
    from kit.workloads import step_timeline

    torch.manual_seed(0)
    case = case_of(smoke_plan, "profile.tiny-llama.r.g1.b16")
    ranges = step_timeline.RecomputeRanges()
    model, _ = step_timeline._build_model(case, ranges)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batches = [torch.randint(0, case.shape.vocab_size, (2, 16))]
    step = step_timeline.ProfileStep(model, optimizer, batches, step_timeline.Clock("cpu"), lambda: None)
    step.run()
    plain = [step.walls(step.run()) for _ in range(2)]
    folder = tmp_path_factory.mktemp("trace")
    traces = []
    for scoped in (True, False):
        path = folder / f"trace-{scoped}.json.gz"
        recorded_by = step_timeline.record_trace(step, model, "cpu", path, 2, scoped=scoped, recompute_ranges=ranges)
        with gzip.open(path, "rt") as handle:
            traces.append((recorded_by, json.load(handle)))
    return TinyRecording(case, plain, *traces)


def test_the_workloads_trace_names_every_backward_node_by_the_module_that_made_it(tiny_recorded):
    recorded_by, trace = tiny_recorded.scoped
    assert recorded_by == "scoped"
    names = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert not any(name.startswith("aten::") for name in names)  # the GPU's scopes: no operator recorded
    assert {CALL_PREFIX + "RoPE", CALL_PREFIX + "Attention", CALL_PREFIX + "Loss", RECOMPUTE_RANGE} <= names
    steps = timeline(trace, "cpu")
    assert len(steps) == 2
    layers = tiny_recorded.case.shape.num_layers
    for step in steps:
        assert step.calls["q_proj"] == layers and step.calls["RMSNorm"] == 2 * layers + 1
        assert step.calls["RoPE"] == layers + 1 and step.calls["Decoder layers"] == layers
        backward = {part for part, kinds in step.parts.items() if kinds["backward"] > 0}
        # every part with weights or a node of its own is named in the backward pass
        assert {
            "Embedding",
            "RMSNorm",
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
            "SiLU",
            "LM head",
            "Loss",
            "Attention",
        } <= backward
        # most of the backward pass is named (about 10 % is not on an idle machine, 26 % was seen on a loaded one)
        assert step.other_ms["backward"] < 0.5 * step.busy_ms["backward"]
        assert step.recompute_ms > 0 and step.blocks["Decoder layers"]["recompute"] == pytest.approx(step.recompute_ms)
    calls = trace[CALLS_KEY]
    assert {thread for _, thread, _, _ in calls} == {"main"} and all(end >= first for _, _, first, end in calls)


def test_on_a_cpu_each_part_gets_its_operators_time_and_parts_other_optimizer_and_idle_are_the_step(tiny_recorded):
    recorded_by, trace = tiny_recorded.full
    assert recorded_by == "full"
    steps = timeline(trace, "cpu")
    fields = {**FIELDS, "device": "cpu", "recompute": True, "measured_steps": 2}
    breakdown = summarize_steps(steps, tiny_recorded.plain, **fields)
    assert breakdown.accounted_ms == pytest.approx(breakdown.traced_step_ms, rel=1e-9)
    # busy: the time inside at least one operator, each phase's as the trace's operators give it
    events = trace["traceEvents"]
    operators = union((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "cpu_op")
    phases = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") in PHASE_RANGES.values()]
    inside = sum(overlap(operators, start, end) for start, end in phases) / 1e3
    assert sum(sum(step.busy_ms.values()) for step in steps) == pytest.approx(inside, rel=1e-6)
    assert all(m.forward_ms > 0 and m.backward_ms > 0 for m in breakdown.modules) and len(breakdown.modules) == len(
        PARTS
    )
    recompute = breakdown.phase("backward").recompute_ms
    assert recompute > 0 and breakdown.module("Decoder layers").recompute_ms == pytest.approx(recompute)
    assert breakdown.other_share < 0.1 and breakdown.parts_ms > breakdown.other_ms
    assert sum(o.device_ms for o in breakdown.operators) <= breakdown.busy_ms
    # every profile metric a claim reads but a GPU's idle shares
    read = {
        metric
        for claim in load_reference().claims
        for relation in claim.relations
        for stage, metric in relation_metrics(relation)
        if stage == "profile"
    }
    gpu_only = {"forward_idle_share", "backward_idle_share", "optimizer_idle_share"}
    assert sorted(read - set(breakdown_figures(breakdown)) - gpu_only) == []


# --- Figures and notes ----------------------------------------------------------------------------


def test_the_real_h100_step_gives_a_gpus_figures_and_says_where_it_is_launch_bound():
    """The recorded H100 step's timeline as its case's metrics (its parts: none, SOURCE)."""
    found_case = recorded("profile.llama2-7b.base.g1")
    rank = found_case.rank.model_copy(update={"details": found_case.breakdown})
    found, notes = profile_case_metrics(
        found_case.result.case, [RunSample(index=1, status="ok", exit_code=0, wall_s=1.0, ranks=[rank])]
    )
    assert found["step_s"].mean == pytest.approx(0.21088, abs=1e-5) and found["tokens_per_s"].mean == pytest.approx(
        350 / 0.21088, rel=1e-4
    )
    assert (
        found["forward_idle_share"].mean == pytest.approx(0.7655, abs=1e-4)
        and found["forward_idle_share"].unit == "fraction"
    )
    assert found["forward_host_s"].mean == pytest.approx(0.06751, abs=1e-5) and found["forward_host_s"].unit == "s"
    assert found["device_busy_s"].mean == pytest.approx(0.10506, abs=1e-5)  # C15's whole
    assert found["profiler_overhead"].mean == pytest.approx(0.1729, abs=1e-4) and "mfu" in found
    assert any(
        note.startswith(
            "launch-bound (the device waited for the host): forward: the host issued work for 67.51 of "
            "its 67.65 ms, the device idle 77%; backward"
        )
        for note in notes
    )
    assert any(note.startswith("parts 0 ms + other ") and "outside the 5% goal" in note for note in notes)


def test_a_breakdown_recorded_by_the_marks_keeps_its_figures():
    """The recorded H100 run predates the timeline: its figures are recomputed as that kit did."""
    found_case = recorded("profile.llama2-7b.base.g1")
    stored = found_case.result
    run = RunSample(index=1, status="ok", exit_code=0, wall_s=1.0, ranks=[found_case.rank])
    found, notes = profile_case_metrics(stored.case, [run])
    assert set(found) == set(stored.metrics) - {"joules_per_token", "mean_power_per_gpu_w"}  # the runner adds those
    assert all(found[name].mean == pytest.approx(stored.metrics[name].mean, rel=1e-12) for name in found)
    assert notes[0].startswith("recorded by marks at module and autograd edges")


# --- The analytical model beside measurements ----------------------------------------------------


@pytest.fixture(scope="module")
def hardware():
    return load_hardware()


def test_a_7b_step_without_zero_is_predicted_not_to_fit_in_80_gb(paper_plan, hardware):
    case = case_of(paper_plan, "pretrain.llama2-7b.naive.g8")
    reason = predicted_oom(case, hardware.gpus["a800-sxm4-80gb"])
    # 20 bytes per parameter (DeepSpeed's bf16 model states) x 6.74e9 parameters alone exceed 80 GB
    assert reason.startswith("predicted OOM (needs 1") and reason.endswith(
        "device has 80 GB (datasheet, hardware.yaml))"
    )


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
    stored = json.loads((FIXTURES / "gpu_results" / "h200x1-scaling.llama2-7b.q.g1.b2.json").read_text())
    measured_gib = stored["metrics"]["peak_memory_gib"]["mean"]
    case = Result.model_validate(stored).case
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
    return RunSample(
        index=1,
        status="ok",
        exit_code=0,
        wall_s=1.0,
        ranks=[
            RankSample(
                rank=r,
                world_size=ranks,
                status="ok",
                device="cuda",
                device_name=name,
                step_s=[step_s],
                tokens_per_step=350,
                peak_memory=PeakMemory(host_rss_bytes=1, device_allocated_bytes=allocated),
                started_at="t",
                finished_at="t",
            )
            for r in range(ranks)
        ],
    )


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
    assert small.decode_step_one.limited_by == "memory" and small.decode_step_one.seconds == pytest.approx(
        5.0e-4, rel=0.05
    )
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
        trace_file = run / "cases" / case.id / "runs" / "1" / breakdown.trace_file
        assert f"cases/{case.id}/runs/1/{breakdown.trace_file}" in sums
        with gzip.open(trace_file, "rt") as handle:
            trace = json.load(handle)
        # the breakdown is what the trace it kept says
        steps = timeline(trace, "cpu")
        assert len(steps) == case.params.measured_steps == len(breakdown.traced_step_ms_per_step)
        assert [s.step_ms for s in steps] == pytest.approx(breakdown.traced_step_ms_per_step)

        assert [p.name for p in breakdown.phases] == ["forward", "backward", "optimizer"]
        assert all(p.wall_ms > 0 and len(p.wall_ms_per_step) == case.params.measured_steps for p in breakdown.phases)
        calls = {m.name: m.calls for m in breakdown.modules}
        assert set(calls) == set(PARTS)
        assert calls["q_proj"] == calls["Attention"] == calls["SiLU"] == layers
        assert calls["RMSNorm"] == 2 * layers + 1 and calls["RoPE"] == layers + 1 and calls["Embedding"] == 1
        assert all(m.forward_ms > 0 and m.backward_ms > 0 for m in breakdown.modules)
        assert {b.name: b.calls for b in breakdown.blocks} == {
            "Decoder layers": layers,
            "Self-attention": layers,
            "MLP": layers,
        }
        # the acceptance rule on a CPU: the parts, other, the optimizer and the idle time (Python between
        # operators) add up to the profiled step within 5 %, and little of it is in no part
        assert abs(breakdown.accounted_ms - breakdown.traced_step_ms) <= 0.05 * breakdown.traced_step_ms
        assert breakdown.other_share < 0.1 and breakdown.parts_ms > breakdown.other_ms
        assert any(note.startswith(f"parts {breakdown.parts_ms:.4g} ms") for note in result.notes)
        assert all(p.host_ms is None and p.launch_bound is None for p in breakdown.phases)
        for metric in (
            "step_s",
            "optimizer_s",
            "attention_forward_s",
            "attention_backward_s",
            "decoder_layers_s",
            "device_busy_s",
            "traced_step_s",
            "forward_idle_s",
        ):
            assert result.metrics[metric].mean > 0, metric
        assert result.metrics["decoder_layers_s"].mean <= result.metrics["device_busy_s"].mean
        assert "forward_idle_share" not in result.metrics  # a GPU's idle share: not measurable on a CPU
        if case.params.recompute:
            assert breakdown.phase("backward").recompute_ms > 0 and result.metrics["recompute_s"].mean > 0
            assert breakdown.module("Decoder layers").recompute_ms == pytest.approx(
                breakdown.phase("backward").recompute_ms
            )
