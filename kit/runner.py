"""Running a plan into a run directory: case after case, resumable, never losing a result.

The runner decides what happens to each case (skip it, run it N times, stop at the first failed
run), turns the runs into a Result with its metrics, and writes it atomically before moving on.
A failing case is a recorded result; only an interruption (Ctrl-C, kill) stops the run, and
`--resume` continues it.
"""

from __future__ import annotations

import contextlib
import platform
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

from kit.execute.base import Executor
from kit.execute.choice import choose as choose_executor
from kit.execute.choice import named
from kit.host.collection import collect
from kit.host.environment import Check, drift, evaluate, load_expectations
from kit.host.fingerprint import Calibration, Fingerprint
from kit.host.probe_cache import probe_this_python
from kit.host.this_host import Host
from kit.measure import effective, maxbatch
from kit.measure.registry import measure, unit_of
from kit.measure.unit import first_failure
from kit.plan.estimate import RUNS_ROOT
from kit.plan.fit import skip_reason
from kit.plan.protocol import Case, Plan, unavailable_by_design
from kit.rundir.directory import (
    ATOMIC_TEMP,
    SUMS_FILE,
    RunDir,
    UnreadableRun,
    atomic_write_model,
    not_a_file,
    read_model,
)
from kit.rundir.schema import (
    AcceptedChanges,
    HostSummary,
    SlurmOptions,
    Result,
    RunInfo,
    RunSample,
    utc_now,
)


class Progress:
    """Callbacks the CLI uses to show progress; the default shows nothing."""

    def case_started(self, case: Case, position: int, total: int) -> None: ...

    def run_started(self, case: Case, index: int, runs: int) -> None: ...

    def case_finished(self, result: Result, position: int, total: int) -> None: ...


def default_run_dir(profile: str, root: Path = RUNS_ROOT) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return root / f"{stamp}-{profile}"


def host_summary(host: Host) -> HostSummary:
    return HostSummary(hostname=platform.node(), os=platform.platform(), python=platform.python_version(),
                       gpus=host.gpu_names)  # fmt: skip


def expected_gpus(plan: Plan) -> int | None:
    """The GPU count a GPU profile's largest case is written for (before the plan was fitted to
    this host); None for a CPU profile."""
    counts = [case.fitted_from or case.gpus for case in plan.cases if case.device == "cuda"]
    return max(counts) if counts else None


def preflight(plan: Plan, redact: bool = False, executor: str | None = None) -> tuple[Fingerprint, list[Check]]:
    """Fingerprint this host (with the frameworks of this Python, and the CUDA of the images the
    plan runs in unless it runs here) and check it for the plan."""
    from kit.images import images_cuda

    names = [] if executor == "local" else sorted({case.image for case in plan.cases})
    fingerprint = collect(redact=redact, image_probe=probe_this_python(), images_cuda=images_cuda(names))
    return fingerprint, evaluate(fingerprint, load_expectations(), expected_gpus(plan))


def failing(checks: list[Check]) -> list[Check]:
    return [check for check in checks if check.status == "fail"]


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
    run = RunDir(out)
    run.lock()
    if run.info_path.exists():
        raise FileExistsError(f"{out} already holds a run; use --resume {out} or another --out")
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


def record_calibration(run: RunDir, calibration: Calibration) -> None:
    """What the preflight measured the host to achieve, into the fingerprint before the run (a
    fact of the host every figure of the run was measured on), its raw samples named by their
    place in the run directory."""
    raw = Path(calibration.raw_samples)
    if raw.is_absolute() and raw.is_relative_to(run.root.resolve()):
        calibration = calibration.model_copy(update={"raw_samples": raw.relative_to(run.root.resolve()).as_posix()})
    fingerprint = read_model(run.fingerprint_path, Fingerprint)
    atomic_write_model(run.fingerprint_path, fingerprint.model_copy(update={"calibration": calibration}))


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


def result_of(case: Case, runs: list[RunSample], executor: str, started_at: str) -> Result:
    """Status and metrics of a case from its runs, as its stage's unit judges and measures them;
    metrics only when the case is ok and every option it asked for was in effect."""
    unit = unit_of(case)
    judgement = (unit.judge if unit else first_failure)(case, runs)
    status, reason, case_metrics, notes = judgement.status, judgement.reason, {}, list(judgement.notes)
    options, not_in_effect = effective.merge(case, judgement.evidence)
    if status == "ok" and not_in_effect is not None:
        status, reason = "error", not_in_effect
    elif status == "ok" and unit is not None and unit.case_metrics is not None:
        case_metrics, notes = measure(case, runs)
    if case.variant is not None:
        notes = [f"variant {case.variant}: {case.interpretation['variant']}", *notes]
    if case.fitted:
        notes = [f"{case.fitted}: {case.interpretation['fitted']}", *notes]
    return Result(
        case_id=case.id,
        stage=case.stage,
        status=status,
        reason=reason,
        case=case,
        metrics=case_metrics,
        effective=options,
        notes=notes,
        samples=runs,
        executor=executor,
        started_at=started_at,
        finished_at=utc_now(),
    )


def execute_case(
    run: RunDir, case: Case, host: Host, progress: Progress, requested: Executor | None, skip_predicted_oom: bool = False,
    preflight_failed: dict[str, str] | None = None,
) -> Result:
    started = utc_now()
    case_dir = run.prepare_case(case)
    reason = skip_reason(case, host, skip_predicted_oom, cluster=requested is not None and requested.on_cluster)
    status = "skipped"
    if reason is None and (reason := unavailable_by_design(case)) is not None:
        status = "unavailable"  # said without starting a process that could only say the same
    if reason is None and (reason := (preflight_failed or {}).get(case.image)) is not None:
        status = "error"
    if reason is not None:
        result = Result(
            case_id=case.id, stage=case.stage, status=status, reason=reason,
            case=case, executor="none", started_at=started, finished_at=utc_now(),
        )  # fmt: skip
        run.write_result(result)
        return result
    executor = choose_executor(case, requested)
    runs: list[RunSample] = []
    indices = list(range(1, case.params.runs + 1))
    with (case_dir / "log.txt").open("a", encoding="utf-8") as log:
        if case.max_batch_search is not None:
            runs = search_max_batch(case, case_dir, executor, log, progress, host)
        elif case.shares_launch:
            progress.run_started(case, 1, case.params.runs)
            for sample in executor.run_launch(case, case_dir, indices, log):
                runs.append(effective.judged(case, sample))
                if runs[-1].status != "ok":
                    break
        else:
            for index in indices:
                progress.run_started(case, index, case.params.runs)
                runs.append(effective.judged(case, executor.run_once(case, case_dir, index, log)))
                if runs[-1].status != "ok":
                    break  # a configuration that failed once (OOM, unavailable, option off) fails every time
    result = result_of(case, runs, executor.name, started)
    run.write_result(result)
    return result


def search_max_batch(case: Case, case_dir: Path, executor: Executor, log, progress: Progress, host: Host) -> list[RunSample]:
    """The trials of a max-batch case (kit.measure.maxbatch), each a run of the executor; the case's
    case.json holds a trial's case while it runs (the executors launch what it says), each
    trial's own copy stays in its run folder, and the search's case is put back at the end."""
    def run_trial(trial: Case, index: int) -> RunSample:
        progress.run_started(case, index, case.params.max_batch_search.max_trials)
        log.write(f"\n=== trial {index}: micro-batch {trial.params.micro_batch}\n")
        atomic_write_model(case_dir / "case.json", trial)
        sample = effective.judged(trial, executor.run_once(trial, case_dir, index, log))
        atomic_write_model(case_dir / "runs" / str(index) / "case.json", trial)
        return sample

    memory = host.gpu_memory_bytes[: case.gpus] if case.device == "cuda" else []
    try:
        return maxbatch.search(case, run_trial, min(memory) if memory else None)
    finally:
        atomic_write_model(case_dir / "case.json", case)


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
    try:
        for case in pending:
            done += 1
            progress.case_started(case, done, total)
            result = execute_case(run, case, host, progress, requested, info.skip_predicted_oom, preflight_failed)
            progress.case_finished(result, done, total)
            if record_images(info, result):
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
        info.node_fingerprints = requested.fingerprint_nodes(run.root, [s for r in run.results() for s in r.samples],
                                                             info.redacted)  # fmt: skip
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


class EvidenceChanged(ValueError):
    """Files of a run directory that differ from the evidence the run wrote (SHA256SUMS)."""


def listed_in_evidence(run: RunDir) -> set[str] | None:
    """The paths SHA256SUMS lists; None where the run wrote none; ValueError where it is not a
    sums file."""
    if not (run.root / SUMS_FILE).exists():
        return None
    from kit.rundir.evidence import read_sums

    return {entry.path for entry in read_sums(run.root)}


def unsealed_cases(run: RunDir, info: RunInfo) -> list[str]:
    """Cases with a result.json that SHA256SUMS does not list: killed between a case's result and
    the evidence after it, or taken out of SHA256SUMS by hand. Nothing vouches for them, so a
    resume runs them again instead of keeping them."""
    try:
        listed = listed_in_evidence(run)
    except (ValueError, OSError):
        return []  # unreadable evidence: a change the resume was told to accept, and keeps
    if listed is None:
        return []
    return [cid for cid in info.selected if run.is_finished(cid) and f"cases/{cid}/result.json" not in listed]


def changes_since_evidence(run: RunDir, info: RunInfo) -> list[str]:
    """What differs from SHA256SUMS, leaving out the folders of cases the evidence does not show
    finished (a resume discards and redoes those). Without SHA256SUMS a run that has finished
    cases lost its evidence: that is a change too (only a run killed in its first case, before
    any evidence, has none to check)."""
    try:
        listed = listed_in_evidence(run)
    except (ValueError, OSError) as exc:  # cut short, binary, not a sums file: nothing can be trusted
        return [f"unreadable: {SUMS_FILE} ({str(exc)[:200]})"]
    if listed is None:
        finished = [cid for cid in info.selected if run.is_finished(cid)]
        return [f"missing: {SUMS_FILE} ({len(finished)} finished cases without evidence)"] if finished else []
    from kit.rundir.evidence import differences

    redone = tuple(f"cases/{cid}/" for cid in info.selected if f"cases/{cid}/result.json" not in listed)
    return [f"{kind}: {path}" for kind, path in differences(run) if not path.startswith(redone)]


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
    for leftover in run.root.rglob(".*.tmp"):
        if ATOMIC_TEMP.fullmatch(leftover.name) and leftover.is_file() and not leftover.is_symlink():
            leftover.unlink()
    info = run.read_info()
    sums = run.root / SUMS_FILE
    if not_a_file(sums):  # the seal could not replace it
        raise UnreadableRun(f"{sums}: not a file; a run's evidence is the file the kit writes")
    changed = changes_since_evidence(run, info)
    if changed and not accept_changes:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise EvidenceChanged(f"{path} differs from its {SUMS_FILE} ({shown}); inspect it, or resume with "
                              "--accept-changes (recorded in run.json)")  # fmt: skip
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

