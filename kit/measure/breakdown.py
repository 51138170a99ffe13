"""One pre-training step dissected on the device's own timeline (paper Tables V-VIII).

The profile workload (kit/workloads/step_timeline.py) runs plain steps, timed at their phase edges
only, then profiled steps recorded by torch.profiler, in which each phase (`kit::forward`,
`kit::backward`, `kit::optimizer`) and each module of the paper is a profiler range
(`kit::module::<qualified name>`; `kit::call::<part>` for RoPE, Attention and the loss, which are
functions), and whose Chrome trace carries, as metadata (`kit_module_calls`), the autograd
sequence numbers each module call spanned. No mark, hook or event is timed on the device: the
ranges live on the host and cost one profiler record each.

This module reads such a trace back. It imports no framework, so the tests check it on real
traces and on hand-made ones.

- Device events. On a GPU each kernel, memcpy and memset is joined to the host call that launched
  it by its CUPTI correlation id (the `correlation` of a `cuda_runtime` or `cuda_driver` event such
  as cudaLaunchKernel or cuLaunchKernelEx equals the kernel's): that gives the launching thread and
  the moment of the launch. On a CPU the operators run on the host thread itself: the time inside
  the profiler's CPU operators is the busy time, cut into slices wherever a range opens or closes.
- Who launched it: the ranges open on that thread at that moment. A module range open in the
  forward phase is that module's forward; one open in the backward phase is a recomputation (a
  checkpointed layer re-run). Else the innermost autograd node of the backward pass (a `cpu_op`
  with a "Sequence number" and a forward thread) is the backward of the module call whose
  sequence numbers contain the node's: the autograd engine numbers each node as the forward
  creates it, and the metadata says which numbers each module call spanned.
- Parts, blocks, other: a part (PARTS) is the innermost module that is a part; blocks (decoder
  layer, self-attention, MLP) contain parts and are never added to them; device time in no part
  is "other" (residual adds, the SwiGLU product, casts), named by operator.
- Phases on the device: the phases run back to back on one stream. The step begins when its
  forward range opens (the device is idle: the step starts after a synchronisation); a phase
  ends when its range has closed and its last device event has finished. The device's idle time
  in a phase is the phase's window less the union of the device events in it, so
  parts + other + optimizer + idle = the traced step.
- The host: on a GPU, the time from a phase's start until its last launch returned. Where that
  is the whole phase and the device was idle for much of it, the phase is bound by the host
  launching kernels (launch-bound), not by the device.

Every time is in milliseconds per step, the mean over the traced steps.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel

from kit.rundir.breakdown import Breakdown, OperatorTime, PartTime, PhaseTime

# The paper's parts in the order of a forward pass; "Loss" (the causal-LM cross entropy) is not
# in the paper's table but is measured rather than left in "other".
PARTS = (
    "Embedding",
    "RMSNorm",
    "q_proj",
    "k_proj",
    "v_proj",
    "RoPE",
    "Attention",
    "o_proj",
    "gate_proj",
    "up_proj",
    "SiLU",
    "down_proj",
    "LM head",
    "Loss",
)
BLOCKS = ("Decoder layers", "Self-attention", "MLP")
PHASES = ("forward", "backward", "optimizer")
KINDS = ("forward", "backward", "recompute")  # what a part's device time was spent on

# Profiler ranges the profile step opens (torch.profiler.record_function, or the same record).
PHASE_RANGES = {phase: f"kit::{phase}" for phase in PHASES}
MODULE_PREFIX = "kit::module::"  # + a module's qualified name
CALL_PREFIX = "kit::call::"  # + the part a function call is (RoPE, Attention, Loss)
RECOMPUTE_RANGE = "kit::recompute"  # a checkpointed decoder layer's re-run (torch.utils.checkpoint context_fn)
RECOMPUTED_BLOCK = "Decoder layers"  # what recomputation re-runs: whole decoder layers
CALLS_KEY = "kit_module_calls"  # trace metadata: [[range name, "main" | "worker", first seq, end seq], ...]

# Metric -> the parts it adds up (each part's forward + backward + recompute time). "mlp" is the
# MLP's matrix multiplications (the paper's GEMM parts), "qkv_proj" the three input projections.
PART_GROUPS = {
    "embedding_s": ("Embedding",),
    "rmsnorm_s": ("RMSNorm",),
    "qkv_proj_s": ("q_proj", "k_proj", "v_proj"),
    "rope_s": ("RoPE",),
    "attention_s": ("Attention",),
    "o_proj_s": ("o_proj",),
    "mlp_s": ("gate_proj", "up_proj", "down_proj"),
    "silu_s": ("SiLU",),
    "lm_head_s": ("LM head",),
    "loss_s": ("Loss",),
}

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


# Chrome trace categories of torch.profiler (Kineto).
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
HOST_CATEGORIES = ("cpu_op", "user_annotation")
OPERATOR_ROWS = 24  # the operators a breakdown keeps, largest device time first


def paper_part(module_name: str) -> str | None:
    """The paper's part a module of a Llama model is, by its qualified name, or None."""
    return _PART_OF_MODULE.get(module_name.rsplit(".", 1)[-1])


def paper_block(module_name: str) -> str | None:
    """The paper's block (decoder layer, self-attention, MLP) a module is, or None."""
    names = module_name.split(".")
    if len(names) >= 2 and names[-2] == "layers" and names[-1].isdigit():
        return "Decoder layers"
    return _BLOCK_OF_MODULE.get(names[-1])


def range_labels(name: str) -> tuple[str | None, str | None]:
    """(part, block) of a module or call range's name; (None, None) for any other range."""
    if name.startswith(CALL_PREFIX):
        part = name[len(CALL_PREFIX) :]
        return (part if part in PARTS else None), None
    if name.startswith(MODULE_PREFIX):
        module = name[len(MODULE_PREFIX) :]
        return paper_part(module), paper_block(module)
    return None, None


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


def overlap(disjoint: Sequence[Interval], start: float, end: float) -> float:
    """Time of the disjoint intervals that falls within [start, end]."""
    return sum(max(0.0, min(end, e) - max(start, s)) for s, e in disjoint)


# --- Reading a trace -----------------------------------------------------------------------------


class HostRecord(NamedTuple):
    """A range or operator on a host thread (microseconds, as the trace writes them)."""

    start: float
    end: float
    name: str
    kind: Literal["module", "recompute", "node", "op", "range"]
    seq: int | None = None  # autograd sequence number (a node of the backward pass)
    forward_thread: int | None = None  # the profiler's id of the thread that made the node


class Activity(NamedTuple):
    """Device time to attribute: a device event (GPU) or a slice of operator time (CPU), with
    the host thread and moment that say who caused it (None: a device event with no launch)."""

    start: float
    end: float
    thread: Any
    at: float | None
    name: str
    launch_end: float | None = None


class Attributed(NamedTuple):
    phase: str
    kind: str  # forward, backward, recompute (a part's or other's), or optimizer
    part: str | None
    blocks: tuple[str, ...]
    operator: str


def _args(event: Mapping[str, Any]) -> Mapping[str, Any]:
    return event.get("args") or {}


def _host_record(event: Mapping[str, Any]) -> HostRecord:
    start = float(event["ts"])
    end = start + float(event.get("dur", 0.0))
    name, args = str(event.get("name", "")), _args(event)
    if name.startswith((MODULE_PREFIX, CALL_PREFIX)):
        return HostRecord(start, end, name, "module")
    if name == RECOMPUTE_RANGE:
        return HostRecord(start, end, name, "recompute")
    forward_thread = args.get("Fwd thread id")
    sequence = args.get("Sequence number")
    if event.get("cat") == "cpu_op" and sequence is not None and forward_thread:  # 0: a forward op
        return HostRecord(start, end, name, "node", int(sequence), int(forward_thread))
    return HostRecord(start, end, name, "op" if event.get("cat") == "cpu_op" else "range")


def _stacks(records: Sequence[HostRecord], moments: Sequence[float]) -> list[tuple[HostRecord, ...]]:
    """The records open at each moment (outermost first), on one thread, whose records nest."""
    ordered = sorted(records, key=lambda r: (r.start, -r.end))
    found: list[tuple[HostRecord, ...]] = [()] * len(moments)
    stack: list[HostRecord] = []
    index = 0
    for position in sorted(range(len(moments)), key=moments.__getitem__):
        moment = moments[position]
        while index < len(ordered) and ordered[index].start <= moment:
            record = ordered[index]
            stack = [open_ for open_ in stack if open_.end > record.start]
            stack.append(record)
            index += 1
        stack = [open_ for open_ in stack if open_.end > moment]
        found[position] = tuple(stack)
    return found


class ModuleCalls:
    """Which module call made an autograd node: the sequence numbers each call spanned (the
    trace's metadata), per forward thread ("main": the step's own; "worker": a recomputation
    run by the autograd engine's device thread)."""

    def __init__(self, calls: Sequence[Sequence[Any]]):
        self._owner: dict[tuple[str, int], int] = {}
        self._parent: dict[int, int | None] = {}
        self.names = [str(call[0]) for call in calls]
        by_size = sorted(range(len(calls)), key=lambda i: (-(int(calls[i][3]) - int(calls[i][2])), i))
        for index in by_size:  # outer calls first: an inner call takes its numbers over
            _, thread, first, end = calls[index]
            self._parent[index] = self._owner.get((str(thread), int(first)))
            for number in range(int(first), int(end)):
                self._owner[(str(thread), number)] = index

    def chain(self, thread: str, number: int) -> list[str]:
        """The names of the calls that made node `number`, innermost first (empty: none)."""
        found, index = [], self._owner.get((thread, number))
        while index is not None:
            found.append(self.names[index])
            index = self._parent.get(index)
        return found


def _module_calls(trace: Mapping[str, Any]) -> ModuleCalls | None:
    calls = trace.get(CALLS_KEY)
    if isinstance(calls, str):
        calls = json.loads(calls)
    return ModuleCalls(calls) if calls else None


def _labels(names: Iterable[str]) -> tuple[str | None, tuple[str, ...]]:
    """The innermost part among range names (innermost first) and every block among them."""
    part, blocks = None, []
    for name in names:
        found_part, block = range_labels(name)
        if part is None and found_part is not None:
            part = found_part
        if block is not None:
            blocks.append(block)
    return part, tuple(dict.fromkeys(blocks))


class StepTimeline(BaseModel):
    """Everything one traced step's device timeline says, in milliseconds."""

    window_ms: dict[str, float]
    busy_ms: dict[str, float]
    host_ms: dict[str, float | None]
    parts: dict[str, dict[str, float]]  # part -> kind -> device time
    blocks: dict[str, dict[str, float]]
    calls: dict[str, int]  # forward calls of each part and block (their ranges in the forward phase)
    other_ms: dict[str, float]  # per phase: device time in no part (optimizer: all of it)
    recompute_ms: float  # device time of recomputation, in parts or not
    operators: dict[str, float]  # "phase|operator" -> device time
    operator_events: dict[str, int]
    events: int
    unlaunched: int  # device events no launch call was found for

    @property
    def step_ms(self) -> float:
        return sum(self.window_ms.values())


def _phase_ranges(records: Iterable[HostRecord]) -> list[list[HostRecord]]:
    """The phase ranges grouped into steps (a forward range opens a step), in time order."""
    names = {name: phase for phase, name in PHASE_RANGES.items()}
    steps: list[list[HostRecord | None]] = []
    for record in sorted((r for r in records if r.name in names), key=lambda r: r.start):
        phase = names[record.name]
        if phase == "forward" or not steps:
            steps.append([None, None, None])
        steps[-1][PHASES.index(phase)] = record
    return [[record for record in step if record is not None] for step in steps if all(step)]


def _device_activities(events: Sequence[Mapping[str, Any]]) -> list[Activity]:
    launches = {
        _args(e)["correlation"]: e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATEGORIES and "correlation" in _args(e)
    }
    found = []
    for event in events:
        if event.get("ph") != "X" or event.get("cat") not in DEVICE_CATEGORIES:
            continue
        start = float(event["ts"])
        launch = launches.get(_args(event).get("correlation"))
        at = float(launch["ts"]) if launch else None
        end_of_launch = float(launch["ts"]) + float(launch.get("dur", 0.0)) if launch else None
        found.append(
            Activity(
                start,
                start + float(event.get("dur", 0.0)),
                launch["tid"] if launch else None,
                at,
                str(event.get("name", "")),
                end_of_launch,
            )
        )
    return found


def _host_activities(threads: Mapping[Any, list[HostRecord]]) -> list[Activity]:
    """Operator time on the host (CPU runs): each thread's time inside at least one operator or
    autograd node, cut wherever any record opens or closes, so that each slice has one context."""
    found = []
    for thread, records in threads.items():
        slices = list(pairwise(sorted({t for r in records for t in (r.start, r.end)})))
        for (a, b), stack in zip(slices, _stacks(records, [(a + b) / 2 for a, b in slices])):
            if b > a and any(r.kind in ("op", "node") for r in stack):
                found.append(Activity(a, b, thread, (a + b) / 2, "", None))
    return found


def _operator(stack: Sequence[HostRecord], activity: Activity, after: int) -> str:
    """The operator a device event is said to be: the outermost CPU operator below its innermost
    module range (or the autograd node), else the kernel's own name."""
    for record in stack[after:]:
        if record.kind in ("op", "node"):
            return record.name
    name = activity.name
    return name if len(name) <= 80 else name[:77] + "..."


def _attribute(
    stack: Sequence[HostRecord], phase: str, activity: Activity, calls: ModuleCalls | None, main_thread: int | None
) -> Attributed:
    if phase == "optimizer":
        return Attributed(phase, "optimizer", None, (), _operator(stack, activity, 0))
    module_at = max((i for i, r in enumerate(stack) if r.kind == "module"), default=-1)
    node_at = max((i for i, r in enumerate(stack) if r.kind == "node"), default=-1)
    recompute_at = max((i for i, r in enumerate(stack) if r.kind == "recompute"), default=-1)
    if recompute_at > node_at:  # a checkpointed layer re-run from within the backward pass
        names = [r.name for r in reversed(stack[recompute_at + 1 :]) if r.kind == "module"]
        part, blocks = _labels(names)
        blocks = tuple(dict.fromkeys((*blocks, RECOMPUTED_BLOCK)))
        return Attributed(
            phase, "recompute", part, blocks, _operator(stack, activity, max(module_at, recompute_at) + 1)
        )
    if module_at > node_at:  # a module's forward: in the backward phase, its recomputation
        names = [r.name for r in reversed(stack[node_at + 1 :]) if r.kind == "module"]
        part, blocks = _labels(names)
        kind = "forward" if phase == "forward" else "recompute"
        return Attributed(phase, kind, part, blocks, _operator(stack, activity, module_at + 1))
    if node_at >= 0:
        node = stack[node_at]
        chain = []
        if calls is not None and node.seq is not None:
            thread = "main" if node.forward_thread == main_thread else "worker"
            chain = calls.chain(thread, node.seq)
        part, blocks = _labels(chain)
        return Attributed(phase, "backward", part, blocks, node.name)
    return Attributed(phase, phase, None, (), _operator(stack, activity, 0))


def timeline(trace: Mapping[str, Any], device: Literal["cuda", "cpu"]) -> list[StepTimeline]:
    """Each traced step of a Chrome trace of the profile workload (or of any trace whose steps
    have the three phase ranges), attributed on the device's timeline."""
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, Mapping)]
    threads: dict[Any, list[HostRecord]] = defaultdict(list)
    for event in events:
        if event.get("ph") == "X" and event.get("cat") in HOST_CATEGORIES:
            threads[event.get("tid")].append(_host_record(event))
    steps = _phase_ranges(r for records in threads.values() for r in records)
    if not steps:
        return []
    if device == "cuda":
        activities = _device_activities(events)
    else:
        activities = _host_activities(threads)
    calls = _module_calls(trace)
    # The profiler's id of the step's own thread: the node the backward pass begins with (the
    # loss's) was made by it.
    first_backward = steps[0][1]
    nodes = sorted(
        (
            r
            for records in threads.values()
            for r in records
            if r.kind == "node" and first_backward.start <= r.start <= first_backward.end
        ),
        key=lambda r: r.start,
    )
    main_thread = nodes[0].forward_thread if nodes else None

    edges = [(record.start, record.end, PHASES[k], s) for s, step in enumerate(steps) for k, record in enumerate(step)]
    edges.sort()
    starts = [edge[0] for edge in edges]

    def phase_at(moment: float) -> tuple[str, int] | None:
        index = bisect_right(starts, moment) - 1
        if index >= 0 and moment <= edges[index][1]:
            return edges[index][2], edges[index][3]
        return None

    by_thread: dict[Any, list[tuple[int, float]]] = defaultdict(list)  # an activity's index and launch moment
    for index, activity in enumerate(activities):
        if activity.at is not None:
            by_thread[activity.thread].append((index, activity.at))
    stacks: dict[int, tuple[HostRecord, ...]] = {}
    for thread, launched in by_thread.items():
        for (index, _), stack in zip(launched, _stacks(threads.get(thread, []), [at for _, at in launched])):
            stacks[index] = stack

    per_step: list[list[tuple[Activity, Attributed]]] = [[] for _ in steps]
    unlaunched = [0] * len(steps)
    for index, activity in enumerate(activities):
        where = phase_at(activity.at) if activity.at is not None else None
        if where is None and activity.at is None:  # no launch found: its phase by its own time
            where = phase_at(activity.start)
            if where is not None:
                unlaunched[where[1]] += 1
        if where is None:
            continue
        phase, step = where
        attributed = _attribute(stacks.get(index, ()), phase, activity, calls, main_thread)
        per_step[step].append((activity, attributed))
    module_ranges = [r for records in threads.values() for r in records if r.kind == "module"]
    calls_per_step = [
        Counter(
            label
            for r in module_ranges
            if step[0].start <= r.start <= step[0].end
            for label in range_labels(r.name)
            if label is not None
        )
        for step in steps
    ]
    return [_step_timeline(*found) for found in zip(steps, per_step, unlaunched, calls_per_step)]


def _step_timeline(
    step: Sequence[HostRecord], found: list[tuple[Activity, Attributed]], unlaunched: int, calls: Mapping[str, int]
) -> StepTimeline:
    boundaries = [step[0].start]
    for k, phase in enumerate(PHASES):
        ends = [activity.end for activity, attributed in found if attributed.phase == phase]
        boundaries.append(max([step[k].end, boundaries[-1], *ends]))
    windows = {phase: (boundaries[k], boundaries[k + 1]) for k, phase in enumerate(PHASES)}
    busy = {phase: overlap(union((a.start, a.end) for a, _ in found), *windows[phase]) / 1e3 for phase in PHASES}
    host = {}
    for phase in PHASES:
        launched = [a.launch_end for a, attributed in found if attributed.phase == phase and a.launch_end is not None]
        host[phase] = (max(launched) - windows[phase][0]) / 1e3 if launched else None

    parts: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(KINDS, 0.0))
    blocks: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(KINDS, 0.0))
    other = dict.fromkeys(PHASES, 0.0)
    operators: defaultdict[str, float] = defaultdict(float)
    operator_events: Counter[str] = Counter()
    recompute = 0.0
    cursor = -float("inf")
    for activity, attributed in sorted(found, key=lambda pair: (pair[0].start, pair[0].end)):
        exclusive = max(0.0, activity.end - max(activity.start, cursor)) / 1e3  # two streams count once
        cursor = max(cursor, activity.end)
        if attributed.part is not None:
            parts[attributed.part][attributed.kind] += exclusive
        else:
            other[attributed.phase] += exclusive
        for block in attributed.blocks:
            if attributed.kind in KINDS:
                blocks[block][attributed.kind] += exclusive
        if attributed.kind == "recompute":
            recompute += exclusive
        key = f"{attributed.phase}|{attributed.operator}"
        operators[key] += exclusive
        operator_events[key] += 1
    return StepTimeline(
        window_ms={phase: (end - start) / 1e3 for phase, (start, end) in windows.items()},
        busy_ms=busy,
        host_ms=host,
        parts={name: dict(times) for name, times in parts.items()},
        blocks={name: dict(times) for name, times in blocks.items()},
        calls=dict(calls),
        other_ms=other,
        recompute_ms=recompute,
        operators=dict(operators),
        operator_events=dict(operator_events),
        events=len(found),
        unlaunched=unlaunched,
    )


# --- The breakdown a profile case records --------------------------------------------------------


class ModuleTimes(Protocol):
    """What part_figures reads of a breakdown: its modules' times (Breakdown, MarkedBreakdown)."""

    @property
    def modules(self) -> Sequence[Any]: ...

    def module(self, name: str) -> Any: ...


def part_figures(breakdown: ModuleTimes) -> dict[str, float]:
    """The paper's parts (PART_GROUPS), attention's two passes and the decoder layers, in seconds,
    by the same names whichever breakdown measured them (the timeline's, or the marks' of an
    older run: kit.measure.marked_breakdown)."""
    parts = {m.name: m for m in breakdown.modules}
    figures = {}
    for metric, names in PART_GROUPS.items():
        found = [parts[name] for name in names if name in parts]
        if found:
            figures[metric] = sum(m.total_ms for m in found) / 1e3
    if "Attention" in parts:
        figures["attention_forward_s"] = parts["Attention"].forward_ms / 1e3
        figures["attention_backward_s"] = parts["Attention"].backward_ms / 1e3
    layers = breakdown.module("Decoder layers")
    if layers is not None:
        figures["decoder_layers_s"] = layers.total_ms / 1e3
    return figures


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _part_times(steps: Sequence[StepTimeline], names: Sequence[str], block: bool) -> list[PartTime]:
    rows = []
    for name in names:
        found = [(step.blocks if block else step.parts).get(name, {}) for step in steps]
        calls = [step.calls.get(name, 0) for step in steps]
        if not any(sum(times.values()) for times in found) and not any(calls):
            continue
        rows.append(
            PartTime(
                name=name,
                forward_ms=_mean([times.get("forward", 0.0) for times in found]),
                backward_ms=_mean([times.get("backward", 0.0) for times in found]),
                recompute_ms=_mean([times.get("recompute", 0.0) for times in found]),
                calls=max(calls),
            )
        )
    return rows


def summarize_steps(steps: Sequence[StepTimeline], plain: Sequence[Mapping[str, float]], **fields: Any) -> Breakdown:
    """The breakdown of the profiled steps' timelines beside the plain steps' phase times."""
    if not steps:
        raise ValueError("the profiler's trace holds no step with its three phase ranges")
    phases = []
    for name in PHASES:
        per_step = [walls[name] for walls in plain]
        part_ms = [
            sum(
                times.get("forward", 0.0)
                if name == "forward"
                else times.get("backward", 0.0) + times.get("recompute", 0.0)
                for times in step.parts.values()
            )
            if name != "optimizer"
            else 0.0
            for step in steps
        ]
        hosts = [step.host_ms.get(name) for step in steps]
        phases.append(
            PhaseTime(
                name=name,
                wall_ms=_mean(per_step),
                wall_ms_per_step=per_step,
                window_ms=_mean([step.window_ms[name] for step in steps]),
                busy_ms=_mean([step.busy_ms[name] for step in steps]),
                parts_ms=_mean(part_ms),
                other_ms=_mean([step.other_ms[name] for step in steps]),
                recompute_ms=_mean([step.recompute_ms for step in steps]) if name == "backward" else 0.0,
                host_ms=None if any(h is None for h in hosts) else _mean(hosts),  # type: ignore[arg-type]
            )
        )
    keys: defaultdict[str, float] = defaultdict(float)  # "phase|operator" -> device time over the steps
    for step in steps:
        for key, device_ms in step.operators.items():
            keys[key] += device_ms
    operators = [
        OperatorTime(
            phase=key.split("|", 1)[0],
            name=key.split("|", 1)[1],
            device_ms=total / len(steps),
            events=sum(step.operator_events.get(key, 0) for step in steps) / len(steps),
        )
        for key, total in sorted(keys.items(), key=lambda item: item[1], reverse=True)[:OPERATOR_ROWS]
    ]
    step_per_step = [sum(walls.values()) for walls in plain]
    traced = [step.step_ms for step in steps]
    return Breakdown(
        step_ms=_mean(step_per_step),
        step_ms_per_step=step_per_step,
        traced_step_ms=_mean(traced),
        traced_step_ms_per_step=traced,
        phases=phases,
        modules=_part_times(steps, PARTS, block=False),
        blocks=_part_times(steps, BLOCKS, block=True),
        operators=operators,
        device_events=_mean([step.events for step in steps]),
        unlaunched_events=_mean([step.unlaunched for step in steps]),
        **fields,
    )
