"""A profile case's breakdown of one pre-training step as its rank records it (the details of its
rank sample): the timeline's (kit.measure.breakdown attributes the device's own timeline), or the
marks' of kits before it (kit.measure.marked_breakdown), read back only."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, computed_field

# Acceptance rules (issue 31): on a GPU the parts plus the measured idle equal the plain step
# within ACCOUNTED_TOLERANCE, and the profiled step is at most PROFILER_OVERHEAD_LIMIT slower.
ACCOUNTED_TOLERANCE = 0.05
PROFILER_OVERHEAD_LIMIT = 0.10


# A phase is launch-bound when the host issued work until (nearly) its end and the device sat
# idle for more than this share of it.
LAUNCH_BOUND_IDLE = 0.10
LAUNCH_BOUND_HOST = 0.90


def launch_bound(idle_share: float | None, host: float | None, window: float) -> bool | None:
    """Whether a phase waited for the host: the host issued work until (nearly) its end (`host`
    at least LAUNCH_BOUND_HOST of its `window`, in one unit) while the device sat idle for more
    than LAUNCH_BOUND_IDLE of it; None where either is unknown (a CPU)."""
    if idle_share is None or host is None:
        return None
    return idle_share > LAUNCH_BOUND_IDLE and host >= LAUNCH_BOUND_HOST * window


class PartTime(BaseModel):
    """A part or block per step on the device, summed over layers; backward excludes
    recomputation, which is shown on its own."""

    name: str
    forward_ms: float
    backward_ms: float
    recompute_ms: float = 0.0
    calls: int = 0  # forward calls per step (e.g. q_proj: one per layer)

    # mypy cannot type a decorator over a property: pydantic documents this ignore for computed_field
    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_ms(self) -> float:
        return self.forward_ms + self.backward_ms + self.recompute_ms


class PhaseTime(BaseModel):
    """One phase: its time in the plain steps, and on the device's timeline of the profiled steps
    (means over the steps)."""

    name: Literal["forward", "backward", "optimizer"]
    wall_ms: float  # mean over the plain measured steps
    wall_ms_per_step: list[float]
    window_ms: float  # the phase on the device, in the profiled steps
    busy_ms: float  # union of the device events in the window (CPU: of the operators)
    parts_ms: float  # device time in the paper's parts (backward: recomputation of parts included)
    other_ms: float  # device time in no part; the optimizer phase's whole device time
    recompute_ms: float = 0.0  # device time of recomputation, in parts or not
    host_ms: float | None = None  # GPU: from the phase's start until its last launch returned

    @computed_field  # type: ignore[prop-decorator]
    @property
    def idle_ms(self) -> float:
        return self.window_ms - self.busy_ms

    @computed_field  # type: ignore[prop-decorator]
    @property
    def idle_share(self) -> float | None:
        """Share of the phase's window in which the device ran nothing."""
        return self.idle_ms / self.window_ms if self.window_ms > 0 else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def launch_bound(self) -> bool | None:
        """Did the device wait for the host? The host issued work until (nearly) the phase's end
        and the device was idle for more than LAUNCH_BOUND_IDLE of it (None on a CPU)."""
        return launch_bound(self.idle_share, self.host_ms, self.window_ms)


class OperatorTime(BaseModel):
    """An operator's device time per step in one phase: the CPU operator or autograd node that
    launched the kernels, else (where the profiler did not record operators) the kernel itself."""

    phase: str
    name: str
    device_ms: float
    events: float  # device events (CPU: operator slices) per step


class Breakdown(BaseModel):
    """The details of a profile case's sample: re-validated by the metrics and the report."""

    kind: Literal["profile"] = "profile"
    format: Literal["timeline"] = "timeline"
    device: Literal["cuda", "cpu"]
    timer: str
    profiler: str
    micro_batch: int
    seq_len: int
    attention: str
    recompute: bool
    optimizer: str
    measured_steps: int
    step_ms: float  # mean over the plain measured steps
    step_ms_per_step: list[float]
    traced_step_ms: float  # mean over the profiled steps, on the device's timeline
    traced_step_ms_per_step: list[float]
    phases: list[PhaseTime]
    modules: list[PartTime]  # the paper's parts, in PARTS order
    blocks: list[PartTime]
    operators: list[OperatorTime]  # the largest, by device time
    device_events: float  # per profiled step
    unlaunched_events: float = 0.0  # per profiled step: device events without a launch found
    trace_file: str | None = None
    method: list[str]

    def phase(self, name: str) -> PhaseTime:
        return next(p for p in self.phases if p.name == name)

    def module(self, name: str) -> PartTime | None:
        return next((m for m in [*self.modules, *self.blocks] if m.name == name), None)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def parts_ms(self) -> float:
        return sum(m.total_ms for m in self.modules)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def other_ms(self) -> float:
        """Device time of the forward and backward phases in no part."""
        return self.phase("forward").other_ms + self.phase("backward").other_ms

    @computed_field  # type: ignore[prop-decorator]
    @property
    def busy_ms(self) -> float:
        return sum(p.busy_ms for p in self.phases)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def idle_ms(self) -> float:
        return sum(p.idle_ms for p in self.phases)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def accounted_ms(self) -> float:
        """The parts + other + the optimizer's device time + the idle time (= the traced step)."""
        return self.parts_ms + self.other_ms + self.phase("optimizer").other_ms + self.idle_ms

    @computed_field  # type: ignore[prop-decorator]
    @property
    def accounted_vs_step(self) -> float:
        """accounted_ms against the plain step: the issue's goal is within ACCOUNTED_TOLERANCE."""
        return self.accounted_ms / self.step_ms - 1 if self.step_ms > 0 else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def profiler_overhead(self) -> float:
        """How much longer the profiled step took than the plain one (goal: at most
        PROFILER_OVERHEAD_LIMIT on a GPU)."""
        return self.traced_step_ms / self.step_ms - 1 if self.step_ms > 0 else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def other_share(self) -> float:
        return self.other_ms / self.traced_step_ms if self.traced_step_ms > 0 else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def within_tolerance(self) -> bool:
        """Do the parts and the idle time account for the plain step within ACCOUNTED_TOLERANCE?"""
        return abs(self.accounted_vs_step) <= ACCOUNTED_TOLERANCE


class PhaseActivity(BaseModel):
    """What the profiled step's trace showed inside one phase's range (synchronised at its end)."""

    window_ms: float
    kernel_ms: float | None = None
    device_busy_ms: float | None = None

    @property
    def idle_share(self) -> float | None:
        if self.device_busy_ms is None or self.window_ms <= 0:
            return None
        return 1.0 - self.device_busy_ms / self.window_ms


class ModuleTime(BaseModel):
    name: str
    forward_ms: float
    backward_ms: float
    recompute_ms: float = 0.0
    calls: int

    @property
    def total_ms(self) -> float:
        return self.forward_ms + self.backward_ms + self.recompute_ms


class MarkedPhaseTime(BaseModel):
    name: Literal["forward", "backward", "optimizer"]
    wall_ms: float
    wall_ms_per_step: list[float]
    instrumented_wall_ms: float
    parts_ms: float
    covered_ms: float
    recompute_ms: float = 0.0
    activity: PhaseActivity | None = None

    @property
    def other_ms(self) -> float:
        return 0.0 if self.name == "optimizer" else self.instrumented_wall_ms - self.covered_ms


class MarkedBreakdown(BaseModel):
    """A profile case's rank details as kits before the timeline attribution wrote them."""

    kind: Literal["profile-marks"] = "profile-marks"

    device: Literal["cuda", "cpu"]
    timer: str
    micro_batch: int
    seq_len: int
    attention: str
    recompute: bool
    optimizer: str
    measured_steps: int
    step_ms: float
    step_ms_per_step: list[float]
    instrumented_step_ms: float
    instrumented_step_ms_per_step: list[float]
    phases: list[MarkedPhaseTime]
    modules: list[ModuleTime]
    blocks: list[ModuleTime]
    blocks_step_ms: float
    unmatched_marks: int = 0
    trace_file: str | None = None
    activity_method: str
    method: list[str]

    def phase(self, name: str) -> MarkedPhaseTime:
        return next(p for p in self.phases if p.name == name)

    def module(self, name: str) -> ModuleTime | None:
        return next((m for m in [*self.modules, *self.blocks] if m.name == name), None)

    @property
    def modules_ms(self) -> float:
        return sum(m.total_ms for m in self.modules) + self.phase("optimizer").instrumented_wall_ms

    @property
    def overlap_ms(self) -> float:
        return sum(p.parts_ms - p.covered_ms for p in self.phases)

    @property
    def other_ms(self) -> float:
        return self.instrumented_step_ms - (self.modules_ms - self.overlap_ms)

    @property
    def other_share(self) -> float:
        return self.other_ms / self.instrumented_step_ms if self.instrumented_step_ms > 0 else 0.0

    @property
    def instrumentation_overhead_ms(self) -> float:
        return self.instrumented_step_ms - self.step_ms
