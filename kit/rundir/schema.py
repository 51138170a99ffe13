"""Every record a run writes, typed: what each process of a run measured (RankSample), each
independent run (RunSample), a case's result (Result) and the run itself (run.json, RunInfo).
Where each lies in the run directory: kit.rundir.directory."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from kit.host.environment import Check, Finding
from kit.host.fingerprint import KitInfo
from kit.plan.protocol import Case, Name, Plan

Status = Literal["ok", "oom", "error", "unavailable", "skipped", "timeout"]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class PeakMemory(BaseModel):
    """Peak memory of one process: device allocator (GPU) and resident set (host)."""

    device_allocated_bytes: int | None = None
    device_reserved_bytes: int | None = None
    host_rss_bytes: int


class DeviceTelemetry(BaseModel):
    """What NVML reported of this process's GPU during the measured steps (kit/measure/telemetry.py):
    the device-level view a buyer sizes a GPU by, beside the allocator's view in PeakMemory."""

    source: str  # "nvml"
    gpu_index: int | None = None  # NVML index of this process's GPU
    energy_j: float | None = None  # NVML total-energy counter delta over the measured steps
    mean_power_w: float | None = None
    peak_used_bytes: int | None = None  # device-level used memory, max of samples during measured steps
    samples: int = 0
    unavailable: str | None = None  # why absent, e.g. "no NVML: this host has no NVIDIA driver"
    # Clocks and heat over the same samples: a figure measured on a slowed GPU says so.
    sm_clock_mhz_mean: float | None = None  # nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
    sm_clock_mhz_min: int | None = None
    temperature_c_mean: float | None = None  # nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)
    temperature_c_max: int | None = None
    clock_event_samples: int = 0  # samples whose clock event reason mask was read
    clock_event_reasons: dict[str, int] = {}  # reason (kit.host.clock_events) -> samples in which NVML reported it


class SoakWindow(BaseModel):
    """One window of a soak (kit/plan/soak.py): when it began (seconds after the soak began), the
    seconds it measured, the tokens this process produced in them (a training rank's, or a
    burst's output tokens), a training rank's steps, and NVML's view of the window."""

    started_s: float
    seconds: float
    tokens: int
    step_s: list[float] = []
    telemetry: DeviceTelemetry | None = None


class EffectiveOption(BaseModel):
    """One option of a case's method as the running engine reports it (kit/measure/effective.py)."""

    requested: str  # what the method asks, e.g. "ZeRO-3", "offload optimizer+params to cpu", "on"
    observed: str  # what the running engine reports, e.g. "stage 3; optimizer states on cpu"
    in_effect: bool
    evidence: str  # where `observed` was read (API call / count), one line


class RankSample(BaseModel):
    """What one process of one run measured; written by the workload harness."""

    rank: int
    world_size: int
    status: Literal["ok", "oom", "error", "unavailable"]
    reason: str | None = None
    device: str
    device_name: str
    warmup_step_s: list[float] = []
    step_s: list[float] = []
    tokens_per_step: int = 0
    # Where the process's time went, in seconds: start (exec to the harness: interpreter and
    # imports before it), build (the workload: frameworks, model, engine), warmup, measured.
    phases_s: dict[str, float] = {}
    peak_memory: PeakMemory | None = None
    telemetry: DeviceTelemetry | None = None
    windows: list[SoakWindow] = []  # a soak case's windows, one after another
    details: dict[str, Any] = {}
    versions: dict[str, str] = {}
    started_at: str
    finished_at: str


class ContainerRun(BaseModel):
    """The container a run happened in (docker executor): which image exactly, and how it ended."""

    image: str  # the reference the lock names (repo:tag)
    image_digest: str  # the image's content digest (its ID, sha256 of its configuration)
    repo_digests: list[str] = []  # registry digests, for a pulled image
    container_id: str
    exit_code: int | None
    oom_killed: bool
    ulimits: dict[str, int] = {}  # as applied (an engine may refuse memlock=unlimited; -1 is unlimited)


class SlurmJob(BaseModel):
    """The batch job a run happened in (Slurm executor), as Slurm reported its end."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    time_limit: str = ""
    nodes: str = ""


class RunSample(BaseModel):
    """One independent run (its own processes) of a case."""

    index: int
    status: Status
    reason: str | None = None
    exit_code: int | None
    wall_s: float
    ranks: list[RankSample]
    container: ContainerRun | None = None  # set by the docker executor
    slurm_job: SlurmJob | None = None  # set by the Slurm executor
    micro_batch: int | None = None  # a max-batch search's trial (kit.measure.maxbatch): the micro-batch it ran


class Metric(BaseModel):
    """A figure over the independent runs: mean, sample standard deviation and each run's value."""

    mean: float
    std: float | None
    n: int
    unit: str
    per_run: list[float]


class Result(BaseModel):
    case_id: str
    stage: str
    status: Status
    reason: str | None = None
    case: Case
    metrics: dict[str, Metric | None] = {}
    # Option name (zero_stage, offload, recompute, attention, quantization, lora) -> what the
    # running engine reported, the same on every rank of every run.
    effective: dict[str, EffectiveOption] = {}
    notes: list[str] = []
    samples: list[RunSample] = []
    executor: str
    started_at: str
    finished_at: str


class AcceptedChanges(BaseModel):
    """Files that differed from the run's evidence when it was resumed with --accept-changes."""

    at: str
    files: list[str]


class ImagePreparation(BaseModel):
    """What `kit run` did to have one image of its plan here, and how long it took."""

    name: str
    reference: str
    action: Literal["present", "built", "pulled", "failed"]
    seconds: float
    image_id: str | None = None
    error: str | None = None


class RunInfo(BaseModel):
    """run.json: enough to resume the run and to know where its numbers came from."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    kit: KitInfo
    profile: str
    plan: Plan
    selected: list[Name]
    executor: str
    host: dict[str, Any]
    argv: list[str]
    started_at: str
    finished_at: str | None = None
    resumed_at: list[str] = []
    status: Literal["running", "finished", "interrupted"] = "running"
    checks: list[Check] = []  # the environment checks before the run (fingerprint.json)
    forced: bool = False  # started with --force despite failing checks
    findings: list[Finding] = []  # drift between fingerprint.json and fingerprint-after.json
    skip_predicted_oom: bool = False  # --skip-predicted-oom: GPU cases the memory model says cannot fit are skipped
    preflight: dict[str, Any] | None = None  # kit.execute.preflight.Preflight, as checked before the first case
    no_preflight: bool = False  # started with --no-preflight
    estimates: dict[str, dict[str, Any]] = {}  # case id -> kit.plan.estimate.Estimate made before the run
    redacted: bool = False  # kit run --redact: no host or user name, no identifying path in any file of the run
    accepted_changes: list[AcceptedChanges] = []  # resumed with --accept-changes: what differed from SHA256SUMS
    slurm: dict[str, Any] | None = None  # --executor slurm: its options (kit.execute.slurm_script.SlurmOptions)
    # --executor slurm: each node a job ran on -> its fingerprint, taken on it (kit.execute.node_fingerprint)
    node_fingerprints: dict[str, str] = {}

    @model_validator(mode="after")
    def _selected_cases_are_in_the_plan(self) -> "RunInfo":
        unknown = sorted(set(self.selected) - {case.id for case in self.plan.cases})
        if unknown:
            raise ValueError(f"selected case {unknown[0]!r} is not in the run's plan")
        return self
    # A GPU profile runs in its images (docker) unless the user asked for --executor local; the
    # images it needed, and whether each was present, built or pulled first, and in how long.
    image_preparation: list[ImagePreparation] = []
