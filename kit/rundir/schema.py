"""Every record a run writes, typed: what each process of a run measured (RankSample), each
independent run (RunSample), a case's result (Result) and the run itself (run.json, RunInfo).
Where each lies in the run directory: kit.rundir.directory."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, Tag, field_validator, model_validator

from kit.comm.sweep import CommSweep
from kit.host.environment import Check, Finding
from kit.host.fingerprint import Calibration, KitInfo
from kit.host.health import SdcPair, SilentDataCorruption
from kit.plan.estimate import Estimate
from kit.plan.protocol import Case, Name, Plan
from kit.rundir.breakdown import Breakdown, MarkedBreakdown
from kit.rundir.serving import ServeDetails

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


class TrainDetails(BaseModel):
    """What a training rank records of its engine: its settings as built (DeepSpeed's config, the
    ops it loaded, where the weights came from), and each option of the method as the running
    engine reported it (kit.measure.effective)."""

    kind: Literal["train"] = "train"
    framework: str | None = None  # Megatron-LM's engine names itself; DeepSpeed's cases leave it out
    world_size: int | None = None
    zero_stage: int | None = None
    deepspeed_ops: dict[str, str] = {}  # op -> where it came from (built, cached, loaded)
    weights: str | None = None
    optimizer: str | None = None
    deepspeed_config: dict[str, JsonValue] = {}  # the configuration DeepSpeed was given, as it takes it
    local_rank: int | None = None
    effective: dict[str, EffectiveOption] = {}
    losses: list[float] = []  # Megatron-LM's loss of each step


class Timed(BaseModel):
    """A calibration measurement's repeats: the calls each ran, and its seconds per call."""

    iterations: int
    repeat_s: list[float]


class MatmulTiming(Timed):
    m: int
    k: int
    n: int
    dtype: str
    threads: int | None = None  # on a CPU: the intra-op threads it ran with


class CopyTiming(Timed):
    bytes: int
    threads: int | None = None
    pinned: bool = False  # a host-device copy from pinned host memory


class AllReduceTiming(Timed):
    bytes: int
    dtype: str
    ranks: int


class CalibrationDetails(BaseModel):
    """The raw times of a calibration rank (kit.workloads.calibrate); its figures: kit.measure.calibration."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    kind: Literal["calibrate"] = "calibrate"
    matmul: list[MatmulTiming]
    copies: list[CopyTiming] = Field(alias="copy")
    host_to_device: CopyTiming | None = None
    device_to_host: CopyTiming | None = None
    all_reduce: AllReduceTiming | None = None


class SdcDetails(BaseModel):
    """What one rank of the silent-data-corruption check computed (kit.workloads.sdc_check): each
    step's loss and gradient norm, and their float32 bit patterns (the fingerprints compared across
    devices by kit.measure.sdc), and the all-reduces of known data it took part in, verified."""

    kind: Literal["sdc"] = "sdc"
    device: str  # "GPU2: NVIDIA H100 80GB HBM3", "CPU rank 1"
    losses: list[float]
    grad_norms: list[float]
    loss_bits: list[str]  # "0x40b1c2d3" per step
    grad_norm_bits: list[str]
    all_reduce: list[SdcPair] = []


def details_kind(value: object) -> str:
    """The record a rank's details are: their `kind`, or, in a run written before the details said
    it, the kind their keys show."""
    if isinstance(
        value, (TrainDetails, Breakdown, MarkedBreakdown, ServeDetails, CommSweep, CalibrationDetails, SdcDetails)
    ):
        return str(value.kind)
    if not isinstance(value, dict):
        return "train"  # pydantic then says what is wrong with it
    if "kind" in value:
        return str(value["kind"])
    if "engine" in value:
        return "serve"
    if "collective" in value:
        return "comm"
    if "instrumented_step_ms" in value:
        return "profile-marks"
    if value.get("format") == "timeline":
        return "profile"
    if "matmul" in value:
        return "calibrate"
    return "train"


RankDetails = Annotated[
    Annotated[TrainDetails, Tag("train")]
    | Annotated[Breakdown, Tag("profile")]
    | Annotated[MarkedBreakdown, Tag("profile-marks")]
    | Annotated[ServeDetails, Tag("serve")]
    | Annotated[CommSweep, Tag("comm")]
    | Annotated[CalibrationDetails, Tag("calibrate")]
    | Annotated[SdcDetails, Tag("sdc")],
    Discriminator(details_kind),
]
D = TypeVar("D", TrainDetails, Breakdown, MarkedBreakdown, ServeDetails, CommSweep, CalibrationDetails, SdcDetails)


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
    details: RankDetails | None = None  # what the stage's workload records beside its times
    versions: dict[str, str] = {}
    started_at: str
    finished_at: str

    @field_validator("details", mode="before")
    @classmethod
    def _none_for_empty(cls, value: object) -> object:
        return None if value == {} else value  # a rank that recorded nothing (written as {} before)

    def details_as(self, kind: type[D]) -> D | None:
        """The rank's details as the record of its stage (None where it recorded none); ValueError
        where they are another stage's."""
        if self.details is not None and not isinstance(self.details, kind):
            raise ValueError(f"rank {self.rank} holds {type(self.details).__name__}, not {kind.__name__}")
        return self.details


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


class PreflightLine(BaseModel):
    """One check of one image: what was tried, how it went, and what to do if it failed."""

    image: str
    check: str
    status: Literal["ok", "fail"]
    detail: str
    hint: str | None = None
    seconds: float


class Preflight(BaseModel):
    lines: list[PreflightLine]
    seconds: float
    # What the host achieved (kit.measure.calibration); `kit run` moves it into the run's fingerprint.
    calibration: Calibration | None = None
    # The silent-data-corruption check (kit.measure.sdc); `kit run` moves it into the fingerprint's health.
    silent_data_corruption: SilentDataCorruption | None = None

    def failed_images(self) -> dict[str, str]:
        """Image -> the first failed check's reason, for the cases that would run in it."""
        failed: dict[str, str] = {}
        for line in self.lines:
            if line.status == "fail" and line.image != "host" and line.image not in failed:
                failed[line.image] = f"preflight: {line.check} failed: {line.detail}"
        return failed


class SlurmOptions(BaseModel):
    """`kit run --executor slurm`'s options, kept in run.json so that a resume submits alike."""

    partition: str | None = None
    account: str | None = None
    nodes: int | None = Field(default=None, ge=1, description="nodes per job (default: as many as the ranks need)")
    gpus_per_node: int | None = Field(
        default=None, ge=1, description="GPUs of a node; a GPU case's ranks fill nodes of this size"
    )
    time_limit: str | None = Field(default=None, description="Slurm's --time (default: the case's timeout)")
    sbatch_args: list[str] = []
    container_mode: Literal["none", "pyxis"] = "none"
    nodelist: str | None = Field(
        default=None, description="every job on these nodes (sbatch --nodelist): a per-node run's node"
    )


class HostSummary(BaseModel):
    """The host a run was started on, as run.json names it (its fingerprint says the rest)."""

    hostname: str | None = None  # a redacted run's is made a token when the run directory is sealed
    os: str | None = None
    python: str | None = None
    gpus: list[str] = []


class RunInfo(BaseModel):
    """run.json: enough to resume the run and to know where its numbers came from."""

    run_id: str
    kit: KitInfo
    profile: str
    plan: Plan
    selected: list[Name]
    executor: str
    host: HostSummary
    argv: list[str]
    started_at: str
    finished_at: str | None = None
    resumed_at: list[str] = []
    status: Literal["running", "finished", "interrupted"] = "running"
    checks: list[Check] = []  # the environment checks before the run (fingerprint.json)
    forced: bool = False  # started with --force despite failing checks
    findings: list[Finding] = []  # drift between fingerprint.json and fingerprint-after.json
    skip_predicted_oom: bool = False  # --skip-predicted-oom: GPU cases the memory model says cannot fit are skipped
    preflight: Preflight | None = None  # as checked before the first case (its calibration is in fingerprint.json)
    no_preflight: bool = False  # started with --no-preflight
    estimates: dict[str, Estimate] = {}  # case id -> how long it was estimated to take before the run
    redacted: bool = False  # kit run --redact: no host or user name, no identifying path in any file of the run
    accepted_changes: list[AcceptedChanges] = []  # resumed with --accept-changes: what differed from SHA256SUMS
    slurm: SlurmOptions | None = None  # --executor slurm: its options
    # --executor slurm: each node a job ran on -> its fingerprint, taken on it (kit.execute.node_fingerprint)
    node_fingerprints: dict[str, str] = {}
    # A GPU profile runs in its images (docker) unless the user asked for --executor local; the
    # images it needed, and whether each was present, built or pulled first, and in how long.
    image_preparation: list[ImagePreparation] = []
    images: dict[str, str] = {}  # each image a case ran in (reference) -> its digest, as its containers said
    synthetic: str | None = None  # why a run's numbers were measured on no machine (a test's run directory)
    repetition_spent_s: float = 0.0  # the time runs beyond the planned ones took (the plan's repetition)

    @model_validator(mode="after")
    def _selected_cases_are_in_the_plan(self) -> RunInfo:
        unknown = sorted(set(self.selected) - {case.id for case in self.plan.cases})
        if unknown:
            raise ValueError(f"selected case {unknown[0]!r} is not in the run's plan")
        return self
