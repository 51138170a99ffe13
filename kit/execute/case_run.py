"""One case of a run, start to end: skipped where the host cannot attempt it, else its runs through
its executor (each a fresh launch, or one launch for all where the case shares it, or a max-batch
search's trials), stopping at the first failed run, then more runs where the run repeats cases
until their intervals are narrow (kit.execute.narrowing), then judged and measured by its stage's
unit into a Result, written atomically before the next case starts."""

from __future__ import annotations

from pathlib import Path

from kit.execute.base import Executor
from kit.execute.choice import choose as choose_executor
from kit.execute.narrowing import RepetitionBudget, narrowed
from kit.files.atomic import appending
from kit.host.this_host import Host
from kit.measure import effective, maxbatch
from kit.measure.registry import measure, unit_of
from kit.measure.unit import first_failure
from kit.plan.fit import skip_reason
from kit.plan.protocol import Case, unavailable_by_design
from kit.rundir.directory import (
    RunDir,
    atomic_write_model,
)
from kit.rundir.schema import (
    Metric,
    Result,
    RunSample,
    utc_now,
)


class Progress:
    """What a run tells whoever watches it, case by case; the default shows nothing."""

    def case_started(self, case: Case, position: int, total: int) -> None: ...

    def run_started(self, case: Case, index: int, runs: int) -> None: ...

    def case_finished(self, result: Result, position: int, total: int) -> None: ...


def result_of(case: Case, runs: list[RunSample], executor: str, started_at: str) -> Result:
    """Status and metrics of a case from its runs, as its stage's unit judges and measures them;
    metrics only when the case is ok and every option it asked for was in effect."""
    unit = unit_of(case)
    judgement = (unit.judge if unit else first_failure)(case, runs)
    status, reason, notes = judgement.status, judgement.reason, list(judgement.notes)
    case_metrics: dict[str, Metric | None] = {}
    options, not_in_effect = effective.merge(case, list(judgement.evidence))
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
    run: RunDir,
    case: Case,
    host: Host,
    progress: Progress,
    requested: Executor | None,
    skip_predicted_oom: bool = False,
    preflight_failed: dict[str, str] | None = None,
    budget: RepetitionBudget | None = None,  # where the run repeats this case until its interval is narrow
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
            case_id=case.id,
            stage=case.stage,
            status=status,
            reason=reason,
            case=case,
            executor="none",
            started_at=started,
            finished_at=utc_now(),
        )
        run.write_result(result)
        return result
    executor = choose_executor(case, requested)
    note = None
    with appending(case_dir / "log.txt") as log:

        def launch(indices: list[int]) -> list[RunSample]:
            """The runs `indices` of the case, stopping at the first that failed."""
            done: list[RunSample] = []
            total = max(case.params.runs, indices[-1])
            if case.shares_launch:
                progress.run_started(case, indices[0], total)
                for sample in executor.run_launch(case, case_dir, indices, log):
                    done.append(effective.judged(case, sample))
                    if done[-1].status != "ok":
                        break
                return done
            for index in indices:
                progress.run_started(case, index, total)
                done.append(effective.judged(case, executor.run_once(case, case_dir, index, log)))
                if done[-1].status != "ok":
                    break  # a configuration that failed once (OOM, unavailable, option off) fails every time
            return done

        if case.max_batch_search is not None:
            runs = search_max_batch(case, case_dir, executor, log, progress, host)
        else:
            runs = launch(list(range(1, case.params.runs + 1)))
        if budget is not None and runs and runs[-1].status == "ok":  # a failed case is not narrowed, nor noted
            runs, note = narrowed(case, runs, budget, launch)
    result = result_of(case, runs, executor.name, started)
    if note is not None:
        result = result.model_copy(update={"notes": [*result.notes, note]})
    run.write_result(result)
    return result


def search_max_batch(
    case: Case, case_dir: Path, executor: Executor, log, progress: Progress, host: Host
) -> list[RunSample]:
    """The trials of a max-batch case (kit.measure.maxbatch), each a run of the executor; the case's
    case.json holds a trial's case while it runs (the executors launch what it says), each
    trial's own copy stays in its run folder, and the search's case is put back at the end."""

    search = case.max_batch_search
    assert search is not None, "a max-batch case has its search"

    def run_trial(trial: Case, index: int) -> RunSample:
        progress.run_started(case, index, search.max_trials)
        log.write(f"\n=== trial {index}: micro-batch {trial.micro_batch}\n")
        atomic_write_model(case_dir / "case.json", trial)
        sample = effective.judged(trial, executor.run_once(trial, case_dir, index, log))
        atomic_write_model(case_dir / "runs" / str(index) / "case.json", trial)
        return sample

    memory = host.gpu_memory_bytes[: case.gpus] if case.device == "cuda" else []
    try:
        return maxbatch.search(case, run_trial, min(memory) if memory else None)
    finally:
        atomic_write_model(case_dir / "case.json", case)
