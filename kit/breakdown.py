"""One pre-training step dissected: phases, modules and device activity (paper Tables V-VIII).

The profile workload (kit/workloads/profile.py) records a timestamp at each edge of every
module's forward and backward pass; this module turns those marks, and the profiler's Chrome
trace, into the breakdown a report shows. It imports no framework, so the report re-validates
a breakdown from the run directory, and the tests check the arithmetic on hand-made marks.

Vocabulary:
- part: a leaf of the paper's module table (q_proj, RoPE, Attention, ...), summed over layers.
  Parts never contain one another, so their times add up.
- block: a container the paper also names (decoder layers, self-attention, MLP). A block's time
  includes its parts' and is never added to them.
- recompute: forward work that activation recomputation re-runs inside the backward pass; it is
  taken out of the backward time of whatever part or block it ran inside, and shown on its own.
- other: the step's time inside no part: residual adds, the SwiGLU product, reshapes, the
  framework's Python between modules, and (under recomputation) re-run ops outside parts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, computed_field

# The paper's parts in the order of a forward pass; "Loss" (the causal-LM cross entropy) is not
# in the paper's table but is timed rather than left in "other".
PARTS = (
    "Embedding", "RMSNorm", "q_proj", "k_proj", "v_proj", "RoPE", "Attention", "o_proj",
    "gate_proj", "up_proj", "SiLU", "down_proj", "LM head", "Loss",
)  # fmt: skip
BLOCKS = ("Decoder layers", "Self-attention", "MLP")
PHASES = ("forward", "backward", "optimizer")

# The profile step names its phases with these profiler ranges (torch.profiler.record_function).
PHASE_RANGES = {phase: f"kit::{phase}" for phase in PHASES}

# The Hugging Face Llama module names (transformers' modeling_llama) -> the paper's parts.
# rotary_emb computes the cos/sin tables once per forward: it is RoPE's share outside the layers.
_PART_OF_MODULE = {
    "embed_tokens": "Embedding",
    "input_layernorm": "RMSNorm",
    "post_attention_layernorm": "RMSNorm",
    "norm": "RMSNorm",
    "rotary_emb": "RoPE",
    "q_proj": "q_proj",
    "k_proj": "k_proj",
    "v_proj": "v_proj",
    "o_proj": "o_proj",
    "gate_proj": "gate_proj",
    "up_proj": "up_proj",
    "down_proj": "down_proj",
    "act_fn": "SiLU",
    "lm_head": "LM head",
}
_BLOCK_OF_MODULE = {"self_attn": "Self-attention", "mlp": "MLP"}

# The share of the step that may be left unexplained before the breakdown says it does not
# add up (the issue's acceptance rule: the parts' sum within 10 % of the step).
OTHER_TOLERANCE = 0.10

# Device activity in a Chrome trace of torch.profiler (Kineto): its event categories.
KERNEL_CATEGORIES = ("kernel",)
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_OP_CATEGORIES = ("cpu_op",)


def paper_part(module_name: str) -> str | None:
    """The paper's part a module of a Llama model is, by its qualified name, or None."""
    return _PART_OF_MODULE.get(module_name.rsplit(".", 1)[-1])


def paper_block(module_name: str) -> str | None:
    """The paper's block (decoder layer, self-attention, MLP) a module is, or None."""
    names = module_name.split(".")
    if len(names) >= 2 and names[-2] == "layers" and names[-1].isdigit():
        return "Decoder layers"
    return _BLOCK_OF_MODULE.get(names[-1])


# --- Intervals ----------------------------------------------------------------------------------

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time as `intervals`."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def length(intervals: Iterable[Interval]) -> float:
    return sum(end - start for start, end in union(intervals))


def overlap(disjoint: Sequence[Interval], start: float, end: float) -> float:
    """Time of the disjoint intervals that falls within [start, end]."""
    return sum(max(0.0, min(end, e) - max(start, s)) for s, e in disjoint)


def subtract(intervals: Iterable[Interval], removed: Sequence[Interval]) -> list[Interval]:
    """`intervals` (made disjoint) minus the disjoint intervals `removed`."""
    left: list[Interval] = []
    for start, end in union(intervals):
        cursor = start
        for s, e in removed:
            if e <= cursor or s >= end:
                continue
            if s > cursor:
                left.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < end:
            left.append((cursor, end))
    return left


# --- Marks -> times of one step ------------------------------------------------------------------


class Mark(NamedTuple):
    """One edge of one module instance's pass: `key` tells instances apart (a qualified module
    name, or a function call's serial), `label` is the part or block it counts for."""

    t_ms: float
    key: str
    label: str
    direction: Literal["forward", "backward"]
    edge: Literal["begin", "end"]


RECOMPUTE = "recompute"  # label of the windows in which a checkpointed layer is re-run


class StepBounds(NamedTuple):
    """The phase edges of one step, in ms on the marks' clock."""

    begin: float
    forward_end: float
    backward_end: float
    optimizer_end: float

    def walls(self) -> dict[str, float]:
        return {
            "forward": self.forward_end - self.begin,
            "backward": self.backward_end - self.forward_end,
            "optimizer": self.optimizer_end - self.backward_end,
        }


class LabelTimes(BaseModel):
    """A part's or block's time in one step, summed over its instances (layers)."""

    forward_ms: float = 0.0
    backward_ms: float = 0.0
    recompute_ms: float = 0.0
    calls: int = 0


class StepTimes(BaseModel):
    """Everything one instrumented step's marks say."""

    walls_ms: dict[str, float]
    labels: dict[str, LabelTimes]
    recompute_ms: float  # the recompute windows, re-run ops outside parts included
    covered_ms: dict[str, float]  # per phase: time inside at least one part
    summed_ms: dict[str, float]  # per phase: the parts' times added up
    unmatched_marks: int


def _pair_forward(marks: Sequence[Mark]) -> tuple[list[tuple[str, Interval]], int]:
    """(label, interval) of every completed forward pass; begins never ended (a recomputation
    that stopped early) are counted and dropped."""
    open_: dict[str, list[float]] = defaultdict(list)
    done: list[tuple[str, Interval]] = []
    unmatched = 0
    for mark in marks:
        if mark.edge == "begin":
            open_[mark.key].append(mark.t_ms)
        elif open_[mark.key]:
            done.append((mark.label, (open_[mark.key].pop(), mark.t_ms)))
        else:
            unmatched += 1
    return done, unmatched + sum(len(stack) for stack in open_.values())


def _pair_backward(marks: Sequence[Mark]) -> tuple[list[tuple[str, Interval]], int]:
    """(label, interval) of every backward pass: from its begin (output gradients exist) to the
    last of its end marks (input gradients exist, parameter gradients accumulated)."""
    spans: dict[str, list[list[float]]] = defaultdict(list)
    labels: dict[str, str] = {}
    unmatched = 0
    for mark in marks:
        labels[mark.key] = mark.label
        if mark.edge == "begin":
            spans[mark.key].append([mark.t_ms, mark.t_ms])
        elif spans[mark.key]:
            spans[mark.key][-1][1] = max(spans[mark.key][-1][1], mark.t_ms)
        else:
            unmatched += 1
    done = [(labels[key], (b, e)) for key, items in spans.items() for b, e in items]
    return done, unmatched


def step_times(marks: Sequence[Mark], bounds: StepBounds) -> StepTimes:
    """Attribute one step's marks to parts and blocks, phase by phase.

    A forward pass that starts after the forward phase has ended is recomputation. Every
    backward interval loses the time of the recompute windows inside it: recomputation is
    triggered from within the backward of the first operation that needs a dropped activation,
    and is not that operation's work.
    """
    ordered = sorted(marks, key=lambda m: m.t_ms)
    forward, unmatched_f = _pair_forward([m for m in ordered if m.direction == "forward"])
    backward, unmatched_b = _pair_backward([m for m in ordered if m.direction == "backward"])
    windows = [iv for label, iv in forward if label == RECOMPUTE]
    rerun = [(label, iv) for label, iv in forward if label != RECOMPUTE and iv[0] >= bounds.forward_end]
    first_run = [(label, iv) for label, iv in forward if label != RECOMPUTE and iv[0] < bounds.forward_end]
    recomputing = union(windows + [iv for _, iv in rerun])

    labels: dict[str, LabelTimes] = defaultdict(LabelTimes)
    for label, (start, end) in first_run:
        labels[label].forward_ms += end - start
        labels[label].calls += 1
    for label, (start, end) in rerun:
        labels[label].recompute_ms += end - start
    for label, (start, end) in backward:
        labels[label].backward_ms += (end - start) - overlap(recomputing, start, end)

    part_forward = [iv for label, iv in first_run if label in PARTS]
    part_rerun = [iv for label, iv in rerun if label in PARTS]
    part_backward = subtract([iv for label, iv in backward if label in PARTS], recomputing)
    covered = {
        "forward": length(part_forward),
        "backward": length(part_backward) + length(part_rerun),
        "optimizer": 0.0,
    }
    summed = {
        "forward": sum(labels[p].forward_ms for p in PARTS if p in labels),
        "backward": sum(labels[p].backward_ms + labels[p].recompute_ms for p in PARTS if p in labels),
        "optimizer": 0.0,
    }
    return StepTimes(
        walls_ms=bounds.walls(),
        labels=dict(labels),
        recompute_ms=length(recomputing),
        covered_ms=covered,
        summed_ms=summed,
        unmatched_marks=unmatched_f + unmatched_b,
    )


# --- Device activity from the profiler's Chrome trace ------------------------------------------


class PhaseActivity(BaseModel):
    """What the profiled step's trace shows inside one phase's window."""

    window_ms: float
    kernel_ms: float | None = None  # union of GPU kernels
    device_busy_ms: float | None = None  # union of kernels, memcpy and memset
    host_op_ms: float | None = None  # union of CPU operators (CPU runs only)

    @computed_field
    @property
    def idle_share(self) -> float | None:
        """Share of the window with nothing running on the GPU (None without a GPU)."""
        if self.device_busy_ms is None or self.window_ms <= 0:
            return None
        return 1.0 - self.device_busy_ms / self.window_ms

    @computed_field
    @property
    def host_op_share(self) -> float | None:
        if self.host_op_ms is None or self.window_ms <= 0:
            return None
        return self.host_op_ms / self.window_ms


def _spans(events: Iterable[Mapping[str, Any]], categories: Sequence[str]) -> list[Interval]:
    return [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if e.get("ph") == "X" and e.get("cat") in categories
    ]


def trace_activity(trace: Mapping[str, Any], device: Literal["cuda", "cpu"]) -> dict[str, PhaseActivity]:
    """Per phase of the profiled step: the window of its `kit::<phase>` range (the profile step
    synchronises the device at the end of each range, so the window holds all of the phase's
    device work) and the time inside it covered by GPU kernels and copies (on a GPU) or by CPU
    operators (on a CPU). Trace timestamps are microseconds (Chrome trace format)."""
    events = trace.get("traceEvents", [])
    ranges = {
        e["name"]: (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") in PHASE_RANGES.values()
    }  # a later range of the same name (there is one profiled step) replaces an earlier one
    kernels = union(_spans(events, KERNEL_CATEGORIES))
    busy = union(_spans(events, DEVICE_CATEGORIES))
    host_ops = union(_spans(events, HOST_OP_CATEGORIES))
    found: dict[str, PhaseActivity] = {}
    for phase, name in PHASE_RANGES.items():
        if name not in ranges:
            continue
        start, end = ranges[name]
        window = (end - start) / 1e3
        if device == "cuda":
            found[phase] = PhaseActivity(
                window_ms=window,
                kernel_ms=overlap(kernels, start, end) / 1e3,
                device_busy_ms=overlap(busy, start, end) / 1e3,
            )
        else:
            found[phase] = PhaseActivity(window_ms=window, host_op_ms=overlap(host_ops, start, end) / 1e3)
    return found


# --- The breakdown a profile case records --------------------------------------------------------


class ModuleTime(BaseModel):
    """A part or block per step, summed over layers; backward excludes recomputation."""

    name: str
    forward_ms: float
    backward_ms: float
    recompute_ms: float = 0.0
    calls: int  # forward calls per step (e.g. q_proj: one per layer)

    @computed_field
    @property
    def total_ms(self) -> float:
        return self.forward_ms + self.backward_ms + self.recompute_ms


class PhaseTime(BaseModel):
    """One phase: its time in the plain steps, its decomposition in the instrumented steps, and
    the device activity in the profiled step."""

    name: Literal["forward", "backward", "optimizer"]
    wall_ms: float  # mean over the plain measured steps
    wall_ms_per_step: list[float]
    instrumented_wall_ms: float  # mean over the instrumented steps
    parts_ms: float  # the parts' times added up (backward: recomputation of parts included)
    covered_ms: float  # time inside at least one part
    recompute_ms: float = 0.0  # recompute windows (backward only)
    activity: PhaseActivity | None = None

    @computed_field
    @property
    def other_ms(self) -> float:
        """Instrumented phase time inside no part (the optimizer phase has no parts: 0)."""
        return 0.0 if self.name == "optimizer" else self.instrumented_wall_ms - self.covered_ms


class Breakdown(BaseModel):
    """The details of a profile case's sample: re-validated by the metrics and the report."""

    device: Literal["cuda", "cpu"]
    timer: str
    micro_batch: int
    seq_len: int
    attention: str
    recompute: bool
    optimizer: str
    measured_steps: int
    step_ms: float  # mean over the plain measured steps
    step_ms_per_step: list[float]
    instrumented_step_ms: float
    instrumented_step_ms_per_step: list[float]
    phases: list[PhaseTime]
    modules: list[ModuleTime]  # the parts, in PARTS order
    blocks: list[ModuleTime]  # from steps of their own, with only the blocks marked
    blocks_step_ms: float  # mean step time of those steps
    unmatched_marks: int = 0
    trace_file: str | None = None
    activity_method: str
    method: list[str]

    def phase(self, name: str) -> PhaseTime:
        return next(p for p in self.phases if p.name == name)

    def module(self, name: str) -> ModuleTime | None:
        return next((m for m in [*self.modules, *self.blocks] if m.name == name), None)

    @computed_field
    @property
    def modules_ms(self) -> float:
        """The parts added up, plus the optimizer phase (which has no parts of its own)."""
        return sum(m.total_ms for m in self.modules) + self.phase("optimizer").instrumented_wall_ms

    @computed_field
    @property
    def overlap_ms(self) -> float:
        """Time counted in two parts at once; 0 when the backward passes of parts do not
        interleave (the autograd engine runs them one after another)."""
        return sum(p.parts_ms - p.covered_ms for p in self.phases)

    @computed_field
    @property
    def other_ms(self) -> float:
        """modules_ms - overlap_ms + other_ms = instrumented_step_ms."""
        return self.instrumented_step_ms - (self.modules_ms - self.overlap_ms)

    @computed_field
    @property
    def other_share(self) -> float:
        return self.other_ms / self.instrumented_step_ms if self.instrumented_step_ms > 0 else 0.0

    @computed_field
    @property
    def within_tolerance(self) -> bool:
        """Do the parts explain the step to within OTHER_TOLERANCE?"""
        return abs(self.other_share) <= OTHER_TOLERANCE

    @computed_field
    @property
    def instrumentation_overhead_ms(self) -> float:
        """Instrumented minus plain step time: what the marks cost, plus step-to-step variation."""
        return self.instrumented_step_ms - self.step_ms


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def average_module_times(steps: Sequence[StepTimes], names: Sequence[str]) -> list[ModuleTime]:
    """Per-step mean of each name's times over the instrumented steps (absent: zero)."""
    rows = []
    for name in names:
        found = [step.labels.get(name, LabelTimes()) for step in steps]
        if not any(t.calls or t.backward_ms or t.recompute_ms for t in found):
            continue
        rows.append(
            ModuleTime(
                name=name,
                forward_ms=_mean([t.forward_ms for t in found]),
                backward_ms=_mean([t.backward_ms for t in found]),
                recompute_ms=_mean([t.recompute_ms for t in found]),
                calls=max(t.calls for t in found),
            )
        )
    return rows


def phase_times(
    plain: Sequence[StepBounds], instrumented: Sequence[StepTimes], activity: Mapping[str, PhaseActivity]
) -> list[PhaseTime]:
    rows = []
    for name in PHASES:
        per_step = [bounds.walls()[name] for bounds in plain]
        rows.append(
            PhaseTime(
                name=name,
                wall_ms=_mean(per_step),
                wall_ms_per_step=per_step,
                instrumented_wall_ms=_mean([s.walls_ms[name] for s in instrumented]),
                parts_ms=_mean([s.summed_ms[name] for s in instrumented]),
                covered_ms=_mean([s.covered_ms[name] for s in instrumented]),
                recompute_ms=_mean([s.recompute_ms for s in instrumented]) if name == "backward" else 0.0,
                activity=activity.get(name),
            )
        )
    return rows


def step_ms(bounds: StepBounds) -> float:
    return bounds.optimizer_end - bounds.begin
