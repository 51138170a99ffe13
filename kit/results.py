"""The run directory: the one place results live, written so that nothing is ever half-written.

Layout:
    RUN_DIR/run.json                      what was asked, by which kit, on which host, when
    RUN_DIR/fingerprint.json              the environment before the run (after: fingerprint-after.json)
    RUN_DIR/cases/<case-id>/case.json     the fully resolved case the workload ran
    RUN_DIR/cases/<case-id>/result.json   status, metrics and every sample (written last)
    RUN_DIR/cases/<case-id>/log.txt       everything the workload printed
    RUN_DIR/cases/<case-id>/runs/<k>/rank-<r>.json   raw samples of each process of run k
    RUN_DIR/SHA256SUMS                    evidence: the digest of every other file
    RUN_DIR/SHA256SUMS.sig, provenance.intoto.json(.sig)   who vouches for SHA256SUMS (`kit sign`)
    RUN_DIR/report.html, report.pdf       rendered from the above by `kit report` (not evidence);
    RUN_DIR/report.json, report-*.csv     its export for spreadsheets (`kit report --format json,csv`)
A case is finished exactly when its result.json exists, which is what `--resume` relies on.
"""

from __future__ import annotations

import hashlib
import fcntl
import os
import platform
import re
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from kit.atomic_write import atomic_write_text
from kit.environment import Check, Finding
from kit.fingerprint import KitInfo
from kit.names import checked_name
from kit.protocol import Case, Name, Plan
from kit.regular_files import RUN_FILE_LIMIT, kind_of, read_regular

Status = Literal["ok", "oom", "error", "unavailable", "skipped", "timeout"]
SUMS_FILE = "SHA256SUMS"
# Rendered from the run, never measured: they may be (re)written beside it without changing
# the evidence, which covers everything else.
REPORT_FILES = ("report.html", "report.pdf", "report.json", "report-claims.csv", "report-metrics.csv")
# A signer's seal (kit.signing): a signature of SHA256SUMS, and a provenance statement naming it with
# a signature of its own. They sign SHA256SUMS, so it cannot cover them; a resume removes them.
SIGNATURE_FILES = (f"{SUMS_FILE}.sig", "provenance.intoto.json", "provenance.intoto.json.sig")
# atomic_write_text's temporary file: a write cut short by a crash, never evidence.
ATOMIC_TEMP = re.compile(r"\..+\.[A-Za-z0-9_]+\.tmp")
# Who holds the run directory (RunDir.lock): a note for the next kit, not evidence either.
LOCK_NOTE = "kit.lock"
LOCK_NOTE_LIMIT = 4096


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class PeakMemory(BaseModel):
    """Peak memory of one process: device allocator (GPU) and resident set (host)."""

    device_allocated_bytes: int | None = None
    device_reserved_bytes: int | None = None
    host_rss_bytes: int


class DeviceTelemetry(BaseModel):
    """What NVML reported of this process's GPU during the measured steps (kit/telemetry.py):
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
    clock_event_reasons: dict[str, int] = {}  # reason (kit.clock_events) -> samples in which NVML reported it


class SoakWindow(BaseModel):
    """One window of a soak (kit/soak_plan.py): when it began (seconds after the soak began), the
    seconds it measured, the tokens this process produced in them (a training rank's, or a
    burst's output tokens), a training rank's steps, and NVML's view of the window."""

    started_s: float
    seconds: float
    tokens: int
    step_s: list[float] = []
    telemetry: DeviceTelemetry | None = None


class EffectiveOption(BaseModel):
    """One option of a case's method as the running engine reports it (kit/effective.py)."""

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
    micro_batch: int | None = None  # a max-batch search's trial (kit.stages.maxbatch): the micro-batch it ran


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
    preflight: dict[str, Any] | None = None  # kit.preflight.Preflight, as checked before the first case
    no_preflight: bool = False  # started with --no-preflight
    estimates: dict[str, dict[str, Any]] = {}  # case id -> kit.estimate.Estimate made before the run
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


def atomic_write_model(path: Path, model: BaseModel) -> None:
    atomic_write_text(path, model.model_dump_json(indent=2) + "\n")


M = TypeVar("M", bound=BaseModel)


class UnreadableRun(ValueError):
    """A file of a run directory this kit cannot read (cut short, not JSON, written by another
    kit version, naming a path outside the run), said in one line: the file, the key, the reason."""


def read_model(path: Path, model: type[M]) -> M:
    try:
        return model.model_validate_json(read_regular(path, RUN_FILE_LIMIT))
    except ValidationError as exc:
        raise UnreadableRun(f"{path}: {first_problem(exc)}") from None
    except OSError as exc:
        raise UnreadableRun(f"{path}: {exc.strerror or exc}") from None


def first_problem(exc: ValidationError) -> str:
    """The first thing pydantic found wrong, in one line: the key, and what."""
    first = exc.errors()[0]
    return f"{'.'.join(str(part) for part in first['loc']) or '(top level)'}: {first['msg']}"


def not_a_file(path: Path) -> bool:
    """Whether something other than a regular file is where the kit keeps one: a link (written
    through, it would reach outside the run), a folder, a FIFO."""
    return path.is_symlink() or (path.exists() and not path.is_file())


def printable(name: str) -> str:
    """A file name as it can be shown: each character a terminal would act on or hide (a line
    break, an escape sequence, a right-to-left override) and each byte that was not UTF-8 written
    as its escape, `\\n`, `\\x1b`, `\\u202e`, `\\udcff`."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)


class RunInUse(RuntimeError):
    """Another process holds the run directory."""


class RunDir:
    """Typed access to one run directory."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Hold the run directory for this process's life: a second kit on it (two `--resume`,
        say) is refused, naming the holder, instead of running the same cases twice. The kernel
        lock (flock on the folder itself) goes with the process, however it ends."""
        self.root.mkdir(parents=True, exist_ok=True)
        note = self.root / LOCK_NOTE
        if not_a_file(note):
            raise UnreadableRun(f"{note}: not a file, where the kit writes who holds the run")
        fd = os.open(self.root, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                holder = read_regular(note, LOCK_NOTE_LIMIT).decode("utf-8", "replace").strip()
            except OSError:  # not there yet, or not a note the kit wrote
                holder = "unknown"
            raise RunInUse(f"{self.root} is in use by another kit ({holder}); wait for it, or stop it first") from None
        self._lock_fd = fd
        atomic_write_text(self.root / LOCK_NOTE, f"pid {os.getpid()} on {platform.node()}, since {utc_now()}\n")

    @property
    def info_path(self) -> Path:
        return self.root / "run.json"

    @property
    def fingerprint_path(self) -> Path:
        return self.root / "fingerprint.json"

    @property
    def fingerprint_after_path(self) -> Path:
        return self.root / "fingerprint-after.json"

    def case_dir(self, case_id: str) -> Path:
        """The case's folder, never a path out of the run directory: its name is one segment,
        and neither it nor `cases` may be a link (written or removed through, it would reach
        outside the run) or a file."""
        folder = self.root / "cases" / checked_name(case_id)
        for path in (folder.parent, folder):
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                kind = "a symbolic link" if path.is_symlink() else "not a folder"
                raise UnreadableRun(f"{path}: {kind}; the kit writes and removes a run's cases only in folders of the run itself")
        return folder

    def result_path(self, case_id: str) -> Path:
        return self.case_dir(case_id) / "result.json"

    def read_info(self) -> RunInfo:
        return read_model(self.info_path, RunInfo)

    def write_info(self, info: RunInfo) -> None:
        atomic_write_model(self.info_path, info)

    def is_finished(self, case_id: str) -> bool:
        return self.result_path(case_id).is_file()

    def read_result(self, case_id: str) -> Result:
        """The case's result; one that is another case's (moved into this folder) is refused."""
        path = self.result_path(case_id)
        result = read_model(path, Result)
        if result.case_id != case_id:
            raise UnreadableRun(f"{path}: the result of case {printable(result.case_id)!r}, not of {case_id!r}")
        return result

    def write_result(self, result: Result) -> None:
        atomic_write_model(self.result_path(result.case_id), result)

    def prepare_case(self, case: Case) -> Path:
        """A clean case folder: leftovers of an interrupted attempt are discarded, never mixed in."""
        folder = self.case_dir(case.id)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        atomic_write_model(folder / "case.json", case)
        return folder

    def results(self) -> list[Result]:
        return [self.read_result(cid) for cid in self.read_info().selected if self.is_finished(cid)]

    def write_sums(self) -> Path:
        """SHA256SUMS over every file of the run (sha256sum format, paths relative to the run)."""
        lines = [f"{digest}  {rel}" for rel, digest in sorted(self.digests().items())]
        path = self.root / SUMS_FILE
        atomic_write_text(path, "\n".join(lines) + "\n")
        return path

    def digests(self) -> dict[str, str]:
        """Every file of the run directory, dot-files included. What the kit never writes there,
        and could neither hold in SHA256SUMS nor read safely, is refused (UnreadableRun naming
        each): a symbolic link (a report would read through it, out of the run), a FIFO, a
        device or a socket (a read would wait for ever), a name that is not printable UTF-8
        text (a line break would split its line of SHA256SUMS; an escape sequence acts on the
        terminal that shows it)."""
        found, foreign = {}, []
        for folder, dirs, files in os.walk(self.root):  # a linked folder is listed in dirs, not entered
            for name in dirs + files:
                path = Path(folder) / name
                rel = path.relative_to(self.root).as_posix()
                mode = path.lstat().st_mode
                if printable(rel) != rel:
                    foreign.append(f"{printable(rel)} (a name SHA256SUMS cannot hold: not printable UTF-8 text)")
                elif stat.S_ISLNK(mode):
                    foreign.append(f"{rel} (a symbolic link)")
                elif not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
                    foreign.append(f"{rel} ({kind_of(mode)})")
                elif name in files and rel not in (SUMS_FILE, LOCK_NOTE, *REPORT_FILES, *SIGNATURE_FILES) \
                        and not ATOMIC_TEMP.fullmatch(name):  # fmt: skip
                    found[rel] = sha256_file(path)
        if foreign:
            raise UnreadableRun(f"{self.root}: not what a run writes, so neither listed in SHA256SUMS nor read: "
                                + "; ".join(sorted(foreign)) + ". Remove it, then resume or verify again")  # fmt: skip
        return dict(sorted(found.items()))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
