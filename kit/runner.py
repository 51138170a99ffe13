"""Running a plan into a run directory: case after case, resumable, never losing a result.

The runner decides what happens to each case (skip it, run it N times, stop at the first failed
run), turns the runs into a Result with its metrics, and writes it atomically before moving on.
A failing case is a recorded result; only an interruption (Ctrl-C, kill) stops the run, and
`--resume` continues it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import platform
import shutil
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict

from kit.cache import cache_dir
from kit.execute.base import Executor
from kit.execute.case_run import Progress, execute_case
from kit.execute.choice import describe_choice, named, needs_local_frameworks
from kit.execute.narrowing import RepetitionBudget, repeats
from kit.execute.preflight import check_host, failing, run_preflight
from kit.execute.slurm import SlurmExecutor, configured
from kit.host.collection import collect
from kit.host.environment import Check, drift
from kit.host.fingerprint import Calibration, Fingerprint
from kit.host.health import SilentDataCorruption
from kit.host.this_host import Host, this_host
from kit.plan.estimate import RUNS_ROOT, Estimate, estimates
from kit.plan.first_run import first_run_text, first_run_work
from kit.plan.fit import predicted_failure, skip_reason
from kit.plan.protocol import Case, Plan, plan_for, select, with_runs
from kit.plan.view import duration_text, plan_text
from kit.rundir.directory import (
    SUMS_FILE,
    RunDir,
    UnreadableRun,
    atomic_write_model,
    not_a_file,
    read_model,
    unusable_out,
)
from kit.rundir.evidence import EvidenceChanged, changes_since_evidence, unsealed_cases
from kit.rundir.schema import (
    AcceptedChanges,
    HostSummary,
    ImagePreparation,
    Preflight,
    Result,
    RunInfo,
    SlurmOptions,
    utc_now,
)

# `kit run`'s options for the Slurm executor (SlurmOptions), and --per-node.
SLURM_OPTIONS = (
    "partition",
    "account",
    "nodes",
    "gpus_per_node",
    "time_limit",
    "sbatch_args",
    "container_mode",
    "nodelist",
    "per_node",
)
SMOKE_NOTICE = "No GPU found: running the smoke profile (tiny Llama on CPU; not comparable to the reference)."


def default_run_dir(profile: str, root: Path = RUNS_ROOT) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return root / f"{stamp}-{profile}"


def host_summary(host: Host) -> HostSummary:
    return HostSummary(
        hostname=platform.node(), os=platform.platform(), python=platform.python_version(), gpus=host.gpu_names
    )


def start_run(
    plan: Plan,
    selected: list[Case],
    out: Path,
    host: Host,
    argv: list[str],
    executor: str | None,
    fingerprint: Fingerprint,
    checks: list[Check],
    forced: bool,
    skip_predicted_oom: bool = False,
    image_preparation: list | None = None,
    redact: bool = False,
    slurm: SlurmOptions | None = None,
) -> RunDir:
    if (why := unusable_out(out)) is not None:
        raise RequestError(why)
    run = RunDir(out)
    run.lock()
    if (why := unusable_out(out, locked=True)) is not None:  # filled by another since it was checked
        raise RequestError(why)
    atomic_write_model(run.fingerprint_path, fingerprint)
    info = RunInfo(
        run_id=out.name,
        kit=fingerprint.kit,
        checks=checks,
        forced=forced,
        profile=plan.profile,
        plan=plan,
        selected=[case.id for case in selected],
        executor=executor or "auto",
        host=host_summary(host),
        argv=argv,
        started_at=utc_now(),
        skip_predicted_oom=skip_predicted_oom,
        image_preparation=image_preparation or [],
        redacted=redact,
        slurm=slurm,
    )
    run.write_info(info)
    redact_in_place(run, info)
    return run


def in_run(run: RunDir, raw_samples: str) -> str:
    """A folder of raw samples named by its place in the run directory, where it is in it."""
    raw = Path(raw_samples)
    if raw.is_absolute() and raw.is_relative_to(run.root.resolve()):
        return raw.relative_to(run.root.resolve()).as_posix()
    return raw_samples


def record_calibration(run: RunDir, calibration: Calibration) -> None:
    """What the preflight measured the host to achieve, into the fingerprint before the run (a
    fact of the host every figure of the run was measured on), its raw samples named by their
    place in the run directory."""
    calibration = calibration.model_copy(update={"raw_samples": in_run(run, calibration.raw_samples)})
    fingerprint = read_model(run.fingerprint_path, Fingerprint)
    atomic_write_model(run.fingerprint_path, fingerprint.model_copy(update={"calibration": calibration}))


def record_silent_data_corruption(run: RunDir, corruption: SilentDataCorruption) -> None:
    """The preflight's silent-data-corruption check, into the health section of the fingerprint
    before the run, its raw samples named by their place in the run directory."""
    if corruption.raw_samples is not None:
        corruption = corruption.model_copy(update={"raw_samples": in_run(run, corruption.raw_samples)})
    fingerprint = read_model(run.fingerprint_path, Fingerprint)
    if fingerprint.health is not None:
        health = fingerprint.health.model_copy(update={"silent_data_corruption": corruption})
        atomic_write_model(run.fingerprint_path, fingerprint.model_copy(update={"health": health}))


def redact_in_place(run: RunDir, info: RunInfo) -> None:
    """A redacted run's files, redacted now (before its evidence is first written)."""
    if info.redacted:
        from kit.rundir.redact import Redactor

        nodes = []
        if info.executor == "slurm":  # the node names, which Slurm's outputs and the nodes' files carry
            from kit.execute.slurm import cluster_nodes
            from kit.rundir.redact import recorded_node_names

            nodes = [*cluster_nodes(), *recorded_node_names(run.root, info, run.results())]
        Redactor(run.root, nodes).tree(run.root)


def record_images(info: RunInfo, result: Result) -> bool:
    """Add the images a case ran in to run.json's `images` (reference -> digest); True if new."""
    images = dict(info.images)
    before = dict(images)
    for sample in result.samples:
        if sample.container is not None:
            images[sample.container.image] = (sample.container.repo_digests or [sample.container.image_digest])[0]
    if images == before:
        return False
    info.images = images
    return True


def executor_of(info: RunInfo) -> Executor | None:
    """The executor run.json asks for (None: chosen per case), the Slurm executor with its options."""
    if info.executor == "slurm":
        from kit.execute.slurm import configured

        return configured(info.slurm, info.redacted)
    return None if info.executor == "auto" else named(info.executor)


def execute(run: RunDir, host: Host, progress: Progress | None = None) -> list[Result]:
    """Every selected case without a result, in plan order; then the evidence manifest."""
    progress = progress or Progress()
    info = run.read_info()
    requested = executor_of(info)
    cases = {case.id: case for case in info.plan.cases}
    pending = [cases[cid] for cid in info.selected if not run.is_finished(cid)]
    total = len(info.selected)
    done = total - len(pending)
    preflight_failed = info.preflight.failed_images() if info.preflight else {}
    repetition = info.plan.repetition
    budget = (
        RepetitionBudget(repetition, info.repetition_spent_s, sum(repeats(case, info.plan) for case in pending))
        if repetition is not None
        else None
    )
    try:
        for case in pending:
            done += 1
            progress.case_started(case, done, total)
            repeated = budget if budget is not None and repeats(case, info.plan) else None
            result = execute_case(
                run, case, host, progress, requested, info.skip_predicted_oom, preflight_failed, repeated
            )
            progress.case_finished(result, done, total)
            changed = record_images(info, result)
            if repeated is not None:
                repeated.case_passed()
                info.repetition_spent_s, changed = repeated.spent_s, True
            if changed:
                run.write_info(info)
            seal(run, info)  # the evidence so far: what a resume checks the run directory against
    except BaseException:
        info.status = "interrupted"
        with contextlib.suppress(OSError):  # a full disk may be why: the first error is the one to tell
            run.write_info(info)
            seal(run, info)
        raise
    from kit.execute.slurm import SlurmExecutor

    if isinstance(requested, SlurmExecutor):  # where the numbers were measured: every node a job ran on
        info.node_fingerprints = requested.fingerprint_nodes(
            run.root, [s for r in run.results() for s in r.samples], info.redacted
        )
    after = collect(redact=info.redacted)
    atomic_write_model(run.fingerprint_after_path, after)
    try:
        info.findings = drift(read_model(run.fingerprint_path, Fingerprint), after)
    except UnreadableRun:  # accepted on resume, or lost before the evidence had it: no drift to tell
        info.findings = []
    info.status, info.finished_at = "finished", utc_now()
    run.write_info(info)
    seal(run, info)
    return run.results()


def seal(run: RunDir, info: RunInfo) -> None:
    """SHA256SUMS over the run directory as it is now; a redacted run is redacted first, so that
    the evidence is of what can be shared."""
    redact_in_place(run, info)
    run.write_sums()


# Statuses that say the kit could not measure what the case asked for; anything else (ok, oom,
# unavailable, skipped, each with its reason) is an answer.
FAILED_STATUSES = ("error", "timeout")


def status_counts(results: list[Result]) -> dict[str, int]:
    """How many cases ended in each status, most telling first."""
    order = ("ok", "oom", "unavailable", "skipped", *FAILED_STATUSES)
    counts = {status: sum(1 for r in results if r.status == status) for status in order}
    return {status: count for status, count in counts.items() if count}


def resume(path: Path, accept_changes: bool = False) -> RunDir:
    """The run directory, held, checked against its evidence (a tampered run is refused unless
    the changes are accepted, which run.json records), its cases without evidence discarded to
    be run again, and marked running again. A finished run with every case finished is left as
    it is (its accepted changes recorded and sealed): there is nothing to run, and its
    fingerprint after the run and its end are those of the run."""
    run = RunDir(path)
    if not run.info_path.is_file():
        raise FileNotFoundError(f"{path} is not a run directory (no run.json)")
    run.lock()
    # A write the kill cut short left its temporary file (kit.files.atomic): the file it was
    # writing is whole or absent, and the temporary, in no evidence, is litter.
    for leftover in run.stray_temporaries():
        (run.root / leftover).unlink()
    info = run.read_info()
    sums = run.root / SUMS_FILE
    if not_a_file(sums):  # the seal could not replace it
        raise UnreadableRun(f"{sums}: not a file; a run's evidence is the file the kit writes")
    changed = changes_since_evidence(run, info)
    if changed and not accept_changes:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise EvidenceChanged(
            f"{path} differs from its {SUMS_FILE} ({shown}); inspect it, or resume with "
            "--accept-changes (recorded in run.json)"
        )
    if changed:
        info.accepted_changes.append(AcceptedChanges(at=utc_now(), files=changed))
    for case_id in unsealed_cases(run, info):
        shutil.rmtree(run.case_dir(case_id))
    if is_complete(run, info):
        if changed:
            run.write_info(info)
            seal(run, info)
        return run
    info.resumed_at.append(utc_now())
    info.status = "running"
    run.write_info(info)
    return run


def is_complete(run: RunDir, info: RunInfo) -> bool:
    """A run that finished, with a result for each of its cases: a resume has nothing to do."""
    return info.status == "finished" and all(run.is_finished(case_id) for case_id in info.selected)


def current_argv() -> list[str]:
    return [Path(sys.argv[0]).name, *sys.argv[1:]]


class RequestError(ValueError):
    """A run asked for in a way that cannot be done: one line, the user's to fix (exit 2)."""


class RefusedToStart(RuntimeError):
    """The run did not start, or stopped before its cases, for a reason the host must fix (exit 1)."""


class RunInterrupted(Exception):
    """Ctrl-C or `kit` stopped during the cases: the run directory to resume."""

    def __init__(self, run_dir: Path):
        super().__init__(f"interrupted: finish it with `kit run --resume {run_dir}`")
        self.run_dir = run_dir


class RunRequest(BaseModel):
    """What `kit run` was asked: which cases, where their run directory goes (or which run to
    resume), and how they run."""

    model_config = ConfigDict(frozen=True)

    run_all: bool = False
    stages: tuple[str, ...] = ()
    case_ids: tuple[str, ...] = ()
    profile: str | None = None
    out: Path | None = None
    resume: Path | None = None
    dry_run: bool = False
    force: bool = False
    dcgm_level: int | None = None  # `dcgmi diag -r LEVEL` in the health gate before the run
    executor: Literal["docker", "local", "slurm"] | None = None
    slurm: SlurmOptions | None = None  # with the Slurm executor: its options
    skip_predicted_oom: bool = False
    soak_minutes: float | None = None
    no_preflight: bool = False
    redact: bool = False
    accept_changes: bool = False
    sign_key: Path | None = None
    runs: int | None = None  # --runs N: every case at least N independent runs (kit.plan.protocol.with_runs)
    runs_for: Path | None = (
        None  # --runs-for SPEC: the spec's min_runs, and its repetition (kit.plan.protocol.Repetition)
    )
    per_node: bool = False  # Slurm: the same run on every node of the allocation, each into OUT/<node>/

    @classmethod
    def of_options(cls, options: dict) -> RunRequest:
        """The request `kit run`'s options make; RequestError for Slurm's options without its executor."""
        slurm = {name: options.pop(name) for name in SLURM_OPTIONS}
        if any(slurm.values()) and options.get("executor") != "slurm":
            raise RequestError(
                "--partition, --account, --nodes, --gpus-per-node, --time-limit, --sbatch-arg, --container-mode, "
                "--nodelist and --per-node go with --executor slurm"
            )
        per_node = slurm.pop("per_node")
        slurm = {
            **slurm,
            "sbatch_args": list(slurm["sbatch_args"]),
            "container_mode": slurm["container_mode"] or "none",
        }
        given = options["executor"] == "slurm" and not options.get("resume")
        return cls(**options, per_node=per_node, slurm=SlurmOptions(**slurm) if given else None)

    def refused(self) -> str | None:
        """Why these options cannot go together, or None."""
        if self.per_node and (self.resume or self.slurm and (self.slurm.nodes or self.slurm.nodelist)):
            return (
                "--per-node runs each case on one node of its own: it sets --nodes and --nodelist, and each node's run is "
                "resumed alone (kit run --resume OUT/<node>)"
            )
        if self.accept_changes and not self.resume:
            return "--accept-changes goes with --resume RUN_DIR"
        if self.sign_key and shutil.which("ssh-keygen") is None:  # said before the run, not after it
            from kit.rundir.signing import INSTALL_HINT

            return f"--sign signs with ssh-keygen, which is not on PATH: {INSTALL_HINT}"
        if self.resume:
            new_run = (
                self.run_all,
                self.stages,
                self.case_ids,
                self.profile,
                self.out,
                self.force,
                self.skip_predicted_oom,
                self.soak_minutes,
                self.no_preflight,
                self.redact,
                self.runs,
                self.runs_for,
            )
            return "--resume takes the run directory alone: the run keeps its own plan" if any(new_run) else None
        if (
            self.run_all
            and (self.stages or self.case_ids)
            or not (self.run_all or self.stages or self.case_ids or self.soak_minutes)
        ):
            return "say what to run: --all, or --stage/--case, and/or --soak MINUTES (or --resume RUN_DIR)"
        return None


class RunUi(Protocol):
    """What a run tells the person who started it."""

    def say(self, line: str) -> None:
        """What the run is doing (a log line)."""

    def warn(self, line: str) -> None:
        """What a person must see even when the log is quiet."""

    def show_checks(self, checks: list[Check]) -> None:
        """The host's checks, when some fail."""

    def show_preflight(self, checked: Preflight) -> None:
        """The preflight's lines, once it ran."""

    def progress(
        self, total: int, finished: set[str], estimates: dict[str, Estimate]
    ) -> AbstractContextManager[Progress]:
        """What watches the cases as they run."""


class RunOutcome(NamedTuple):
    run_dir: RunDir | None
    results: list[Result] = []
    plan_text: str | None = None  # a dry run's plan
    finished_before: str | None = None  # a resume with nothing left to run: what to do instead

    @property
    def summary(self) -> str:
        """How many cases ended in each status, most telling first: the run's last line."""
        counts = status_counts(self.results)
        cases = f"{len(self.results)} case" + ("" if len(self.results) == 1 else "s")
        return f"{cases}: " + ", ".join(f"{n} {status}" for status, n in counts.items())

    @property
    def failed(self) -> bool:
        """A case the kit could not measure (error, timeout): the run exits 1."""
        return any(result.status in FAILED_STATUSES for result in self.results)


class Planned(NamedTuple):
    """A run's cases before it starts: the plan, the cases it runs, those finished already."""

    plan: Plan
    cases: list[Case]
    finished: set[str]
    title: str
    executor: str | None
    slurm: SlurmOptions | None
    redact: bool


def run(request: RunRequest, ui: RunUi) -> RunOutcome:
    """A run request end to end: the plan (or the run to resume), the host checked, images and
    engines prepared and checked (preflight), every case run into the run directory, sealed and,
    where asked, signed."""
    if (why := request.refused()) is not None:
        raise RequestError(why)
    host = this_host()
    planned = _resumed(request, ui) if request.resume else _planned(request, host, ui)
    if isinstance(planned, RunOutcome):
        return planned
    if request.dry_run:
        pending = [case for case in planned.cases if case.id not in planned.finished]
        attempted = attempted_cases(pending, host, request.skip_predicted_oom, cluster=planned.executor == "slurm")
        predicted = estimates(attempted, RUNS_ROOT, host.gpu_names, host.smallest_gpu_memory)
        known = [estimate.seconds for estimate in predicted.values() if estimate.seconds is not None]
        work = first_run_work(attempted, planned.plan.device, host.resources.docker_engine, cache_dir())
        title = planned.title + (f"; estimated {duration_text(sum(known))}" if known else "; no estimate")
        title += first_run_text(work)
        if planned.plan.repetition is not None:
            title += f" + {planned.plan.repetition.text}"
        return RunOutcome(None, plan_text=plan_text(title, planned.cases, planned.finished, estimates=predicted))
    from kit.execute.leftovers import remove_leftovers

    remove_leftovers(ui.say)
    if planned.redact:
        from kit.rundir.redact import use_machine_salt

        use_machine_salt()  # the same tokens in the fingerprints before and after, and on resume
    if planned.executor == "docker":  # asked for by name: without an engine nothing could run
        from kit import images

        images.engine()
    executor = planned.executor
    pending = [case for case in planned.cases if case.id not in planned.finished]
    if request.resume:
        run_dir = RunDir(request.resume)
        chosen = _executor_named(executor, planned.slurm, planned.redact)
        _require_frameworks(pending, chosen)
        ui.say(describe_choice(pending, chosen))
        if isinstance(chosen, SlurmExecutor):  # the nodes a resumed run's jobs land on may not be those of its start
            check_shared_run_dir(run_dir, pending, chosen, ui, request.force)
    else:
        out = request.out or default_run_dir(planned.plan.profile)
        if (why := unusable_out(out)) is not None:
            raise RequestError(why)
        ui.say("checking the environment (kit doctor)...")
        fingerprint, checks = check_host(
            planned.plan, redact=planned.redact, executor=executor, dcgm_level=request.dcgm_level
        )
        failed = failing(checks)
        if failed and not request.force:
            ui.show_checks(checks)
            raise RefusedToStart(
                f"refusing to start: {len(failed)} environment check(s) fail "
                f"({'; '.join(f'{check.name}: {check.observed}' for check in failed)}); fix them, or run with --force"
            )
        prepared: list[ImagePreparation] = []
        if planned.plan.device == "cuda" and executor not in ("local", "slurm"):
            prepared, executor = prepare_images(pending, ui), "docker"
        chosen = _executor_named(executor, planned.slurm, planned.redact)
        _require_frameworks(pending, chosen)
        ui.say(describe_choice(pending, chosen))
        run_dir = start_run(
            planned.plan,
            planned.cases,
            out,
            host,
            current_argv(),
            executor=executor,
            fingerprint=fingerprint,
            checks=checks,
            forced=bool(failed),
            skip_predicted_oom=request.skip_predicted_oom,
            image_preparation=prepared,
            redact=planned.redact,
            slurm=planned.slurm,
        )
        if failed:
            ui.warn(
                f"--force: starting despite failing checks ({', '.join(c.name for c in failed)}); recorded in run.json"
            )
        if isinstance(chosen, SlurmExecutor):
            check_shared_run_dir(run_dir, pending, chosen, ui, request.force)
        before_the_cases(run_dir, planned.cases, host, chosen, checks, request, ui)
    ui.say(f"run directory: {run_dir.root}")
    try:
        with ui.progress(len(planned.cases), planned.finished, run_dir.read_info().estimates) as progress:
            results = execute(run_dir, host, progress)
    except KeyboardInterrupt:
        raise RunInterrupted(run_dir.root) from None
    return RunOutcome(run_dir, results)


def _planned(request: RunRequest, host: Host, ui: RunUi) -> Planned:
    """A new run's plan: the profile fitted to this host, the cases asked for, and the soak's."""
    spec = None
    if request.runs_for is not None:  # a spec that cannot be read is said before anything else
        from kit.reference.acceptance import load_spec, reads

        spec = load_spec(request.runs_for).spec
    if request.profile is None and not host.gpu_names:
        ui.warn(SMOKE_NOTICE)
    plan = plan_for(host, request.profile)
    if request.runs is not None:
        plan = with_runs(plan, request.runs)
    if spec is not None:
        plan = with_runs(plan, spec.min_runs)
        if spec.repeat is not None:
            repeated = [case.id for case in plan.cases if reads(spec, case)]
            plan = plan.model_copy(update={"repetition": spec.repeat, "repeated": repeated})
    soaking: list[Case] = []
    if request.soak_minutes:
        from kit.plan.soak import with_soak

        plan, soaking = with_soak(plan, host, request.soak_minutes)
        if not soaking:
            raise RequestError(f"--soak: the {plan.profile} profile has no training or serving case this host can run")
    asked = request.run_all or request.stages or request.case_ids
    try:
        chosen = select(plan, request.stages, request.case_ids) if asked else []
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    alone = any(case in chosen for case in soaking) and not request.run_all  # --case soak.<...>: that soak alone
    cases = chosen if alone else [*chosen, *(case for case in soaking if case not in chosen)]
    return Planned(
        plan,
        cases,
        set(),
        f"profile {plan.profile}: {len(cases)} cases",
        request.executor,
        request.slurm,
        request.redact,
    )


def _resumed(request: RunRequest, ui: RunUi) -> Planned | RunOutcome:
    """A run to resume: its own plan and executor, held and checked against its evidence (unless
    a dry run); a run with nothing left to run says so and is signed where asked."""
    assert request.resume is not None
    run_dir = RunDir(request.resume)
    if not run_dir.info_path.is_file():
        raise RequestError(f"{request.resume} is not a run directory (no run.json)")
    info = run_dir.read_info()
    if request.executor is not None and request.executor != info.executor:
        raise RequestError(
            f"{request.resume} runs its cases with the executor its run.json records ({info.executor}); "
            f"a resume goes on the same way: leave out --executor {request.executor}"
        )
    cases = [c for c in info.plan.cases if c.id in set(info.selected)]
    for case in cases:  # a finished case that cannot be read is refused here, never run again over it
        if run_dir.is_finished(case.id):
            run_dir.read_result(case.id)
    if not request.dry_run:  # held from here on, and checked against its evidence before anything is said or done
        try:
            run_dir = resume(request.resume, request.accept_changes)
        except EvidenceChanged as exc:
            raise RequestError(str(exc)) from None
        resumed = run_dir.read_info()
        complete = is_complete(run_dir, resumed)
        if not complete or len(resumed.accepted_changes) > len(info.accepted_changes):  # its evidence is sealed anew
            from kit.rundir.signing import remove_signature

            unsigned = remove_signature(run_dir)
            if unsigned and not request.sign_key:
                ui.warn(
                    f"removed {', '.join(unsigned)}: they signed the evidence before this resume; sign the run again "
                    f"with `kit sign {request.resume} --key KEY`"
                )
        if complete:
            return RunOutcome(
                run_dir,
                finished_before=f"{request.resume}: every case is finished; nothing to resume "
                f"(kit report {request.resume})",
            )
    ui.say(f"executor: {info.executor}, as {request.resume / 'run.json'} records")
    finished = {c.id for c in cases if run_dir.is_finished(c.id)}  # without those the evidence did not list
    return Planned(
        info.plan,
        cases,
        finished,
        f"resume {request.resume}: {len(finished)} of {len(cases)} cases done",
        None if info.executor == "auto" else info.executor,
        info.slurm,
        info.redacted,
    )


def _executor_named(name: str | None, slurm: SlurmOptions | None, redact: bool) -> Executor | None:
    if name == "slurm":
        return configured(slurm, redact)
    return named(name) if name else None


def _require_frameworks(cases: list[Case], executor: Executor | None) -> None:
    if needs_local_frameworks(cases, executor) and importlib.util.find_spec("torch") is None:
        raise RequestError("the local executor runs the frameworks in this Python: pip install -e '.[local]'")


def before_the_cases(
    run_dir: RunDir,
    cases: list[Case],
    host: Host,
    executor: Executor | None,
    checks: list[Check],
    request: RunRequest,
    ui: RunUi,
) -> None:
    """What a new run records before its first case: each case's estimate, and the preflight (its
    lines in run.json, what it measured of the host in the fingerprint)."""
    info = run_dir.read_info()  # with the node fingerprints a Slurm check recorded
    cluster = executor is not None and executor.on_cluster
    runnable = attempted_cases(cases, host, request.skip_predicted_oom, cluster)
    failing = {} if cluster else {case.id: found.text for case in runnable if (found := predicted_failure(case, host))}
    info.estimates = estimates(runnable, RUNS_ROOT, host.gpu_names, host.smallest_gpu_memory, failing)
    if request.no_preflight:
        info.no_preflight = True
    else:
        ui.say("preflight: each image checked with a miniature of its stages (kit preflight)")
        try:
            checked = run_preflight(
                runnable, executor, checks, run_dir.root / "preflight", say=ui.say, host_gpu_names=host.gpu_names
            )
        except BaseException:  # Ctrl-C or kit being stopped: the run says so, as during its cases
            info.status = "interrupted"
            run_dir.write_info(info)
            raise
        ui.show_preflight(checked)
        info.preflight = checked.model_copy(
            update={"calibration": None, "silent_data_corruption": None}  # kept in fingerprint.json
        )
        if checked.calibration is not None:
            record_calibration(run_dir, checked.calibration)
        corruption = checked.silent_data_corruption
        if corruption is not None:
            record_silent_data_corruption(run_dir, corruption)
        if corruption is not None and corruption.status == "fail" and not request.force:
            info.status = "interrupted"
            run_dir.write_info(info)
            raise RefusedToStart(
                f"refusing to start: silent_data_corruption: {corruption.summary}; "
                "have the device checked, or run with --force"
            )
    run_dir.write_info(info)
    redact_in_place(run_dir, info)


def attempted_cases(cases: list[Case], host: Host, skip_predicted_oom: bool, cluster: bool) -> list[Case]:
    """The cases the host can attempt: the others take no time, so the ETA and run.json estimate
    these (each with its runs, --runs N counted)."""
    return [case for case in cases if skip_reason(case, host, skip_predicted_oom, cluster=cluster) is None]


def prepare_images(cases: list[Case], ui: RunUi) -> list[ImagePreparation]:
    """A GPU run's images, present, built or pulled before its first case (with the time each
    took); without an engine the run does not start (--executor local runs in this Python)."""
    from kit import images

    names = sorted({case.image for case in cases})
    ui.say(f"preparing the {len(names)} image(s) the plan runs in: {', '.join(names)}")
    prepared = images.prepare(names, say=lambda line: ui.say(f"  {line}"))
    total = sum(step.seconds for step in prepared)
    failed = [step.name for step in prepared if step.action == "failed"]
    ui.say(
        f"images ready in {total:.0f} s"
        + (f"; not available: {', '.join(failed)} (their cases will fail)" if failed else "")
    )
    return prepared


def check_shared_run_dir(
    run_dir: RunDir, cases: list[Case], executor: SlurmExecutor, ui: RunUi, force: bool = False
) -> None:
    """Before the first Slurm job: do the compute nodes see the run directory? If not, no result
    could come back, and the run stops here (resumable once the directory is shared). The nodes
    fingerprint themselves there, their GPUs' health with it: an unhealthy node stops the run
    too, unless forced."""
    from kit.execute import slurm
    from kit.execute.node_fingerprint import fingerprinted

    nodes = slurm.nodes_needed(cases, executor.options)
    ui.say(f"checking that {nodes} compute node(s) see the run directory (one tiny Slurm job)")
    info = run_dir.read_info()
    try:
        seen = slurm.check_shared_run_dir(
            run_dir.root, nodes, executor.options, say=lambda line: ui.say(f"  {line}"), redact=info.redacted
        )
    except (slurm.RunDirNotShared, slurm.SlurmUnavailable) as exc:
        info.status = "interrupted"
        run_dir.write_info(info)
        raise RefusedToStart(str(exc)) from None
    info.node_fingerprints = fingerprinted(run_dir.root)
    run_dir.write_info(info)
    ui.say(
        f"the run directory is shared with {', '.join(seen)}; fingerprinted there: "
        f"{', '.join(info.node_fingerprints) or 'none (see the check job output)'}"
    )
    sick = unhealthy_nodes(run_dir.root, info.node_fingerprints)
    if sick and not force:
        info.status = "interrupted"
        run_dir.write_info(info)
        raise RefusedToStart(f"refusing to start: {'; '.join(sick)}; fix them, or run with --force")
    if sick:
        ui.warn(f"--force: starting despite unhealthy nodes ({'; '.join(sick)})")


def unhealthy_nodes(run_root: Path, node_fingerprints: dict[str, str]) -> list[str]:
    """ "node n1 unhealthy: remapped_rows_pending on GPU1 (...): yes" for each node whose own
    fingerprint's health section says it is unhealthy."""
    from kit.host.fingerprint import Fingerprint
    from kit.rundir.directory import read_model

    sick = []
    for node, relative in node_fingerprints.items():
        health = read_model(run_root / relative, Fingerprint).health
        if health is not None and health.verdict == "unhealthy":
            sick.append(f"node {node} unhealthy: {health.unhealthy_because}")
    return sick


def run_per_node(arguments: list[str], request: RunRequest, say: Callable[[str], None]) -> dict[str, tuple[Path, int]]:
    """This run on each node of the allocation at once, into OUT/<node>/ (with --redact,
    OUT/<the node's token>/): each node's run directory and exit status. ValueError where no node
    is up."""
    from kit.execute.node_fingerprint import node_token
    from kit.execute.per_node import fleet_nodes, run_on_each_node

    if (why := request.refused()) is not None:
        raise RequestError(why)
    out = request.out or default_run_dir(plan_for(this_host(), request.profile).profile)
    partition = request.slurm.partition if request.slurm else None
    folder_of: Callable[[str], str] = str
    if request.redact:
        from kit.rundir.redact import use_machine_salt

        use_machine_salt()
        folder_of = node_token
    nodes = fleet_nodes(partition)
    if not nodes:
        raise RequestError(
            "--per-node found no Slurm node up (sinfo)" + (f" in partition {partition}" if partition else "")
        )
    say(f"one run per node, at once: {', '.join(nodes)}, into {out}/<node>/")
    codes = run_on_each_node(arguments, nodes, out, say=say, folder_of=folder_of)
    return {node: (out / folder_of(node), code) for node, code in codes.items()}
