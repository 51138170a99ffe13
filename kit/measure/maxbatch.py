"""The largest micro-batch a training configuration holds (the paper's Table IV), found by trials.

A max-batch case is a training case with `max_batch_search` set. Its runs are trials, each the
case at one micro-batch in a fresh launch (a CUDA out-of-memory leaves the allocator unusable):
from the start (the memory model's prediction on a GPU), doubling until a trial runs out of
memory, then bisecting between the largest that ran and the smallest that did not. Every trial
is kept as a run sample with its micro-batch; the result is the largest that completed its
warm-up and measured steps, with that trial's throughput and memory. The stage's section is the
paper's Table IV: per method, that micro-batch and every trial of its search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kit.measure.metrics import summarize
from kit.measure.training import train_case_metrics
from kit.measure.unit import Judgement, StageUnit
from kit.plan.predictions import predicted_training_memory
from kit.plan.protocol import Case, MaxBatchSearch, TrainParams
from kit.rundir.schema import Metric, RunSample
from kit.theory.hardware import HardwareTable

if TYPE_CHECKING:
    pass


def trial_case(case: Case, micro_batch: int) -> Case:
    """The case one trial runs: the configuration at `micro_batch`, one run, no search."""
    params = case.params.model_copy(
        update={"micro_batch": micro_batch, "runs": 1, "launch": "per_run", "max_batch_search": None}
    )
    return case.model_copy(update={"params": params})


def search_settings(case: Case) -> MaxBatchSearch:
    """A max-batch case's search (TypeError for a case that searches nothing)."""
    if case.max_batch_search is None:
        raise TypeError(f"case {case.id} is not a max-batch search")
    return case.max_batch_search


def trial_batch(trial: RunSample) -> int:
    """The micro-batch a trial ran (`search` records it on every trial)."""
    if trial.micro_batch is None:
        raise ValueError(f"trial {trial.index} records no micro-batch")
    return trial.micro_batch


def predicted_start(case: Case, device_bytes: float | None) -> int:
    """The largest micro-batch the memory model says fits `device_bytes` (1 without a device or
    a prediction): where the search starts, so that a GPU needs few trials."""
    search = search_settings(case)
    if search.start is not None:
        return search.start
    if device_bytes is None:
        return 1
    fits = 1
    while fits * 2 <= search.largest:
        memory = predicted_training_memory(trial_case(case, fits * 2)).memory
        if memory is None or memory.total > device_bytes:
            break
        fits *= 2
    return fits


def next_trial(trials: Sequence[tuple[int, str]], start: int, largest: int) -> int | None:
    """The next micro-batch to try after `trials` (micro-batch, status), or None when the search
    is over: the boundary found, nothing fits, `largest` reached, or a trial that neither ran
    nor ran out of memory (an error or a timeout says nothing about memory)."""
    if not trials:
        return start
    if any(status not in ("ok", "oom") for _, status in trials):
        return None
    ran = max((batch for batch, status in trials if status == "ok"), default=0)
    failed = min((batch for batch, status in trials if status == "oom"), default=None)
    if failed is None:
        return None if ran >= largest else min(ran * 2, largest)
    if failed - ran <= 1:
        return None
    return (ran + failed) // 2


def search(case: Case, run_trial: Callable[[Case, int], RunSample], device_bytes: float | None) -> list[RunSample]:
    """The trials of a max-batch case, in order; `run_trial(trial case, index)` runs one."""
    settings = search_settings(case)
    start = min(predicted_start(case, device_bytes), settings.largest)
    samples: list[RunSample] = []
    trials: list[tuple[int, str]] = []  # (micro-batch, status) of each sample
    while len(samples) < settings.max_trials:
        batch = next_trial(trials, start, settings.largest)
        if batch is None:
            break
        sample = run_trial(trial_case(case, batch), len(samples) + 1)
        samples.append(sample.model_copy(update={"micro_batch": batch}))
        trials.append((batch, sample.status))
    return samples


def search_cap(case: Case, trials: Sequence[RunSample]) -> str | None:
    """Why the largest micro-batch that ran is only a lower bound of what the configuration holds:
    the search reached its largest micro-batch, or ran out of trials before the micro-batch above
    it ran out of memory; None where it found that boundary (or nothing ran)."""
    settings = search_settings(case)
    ran = [trial_batch(t) for t in trials if t.status == "ok"]
    failed = [trial_batch(t) for t in trials if t.status == "oom"]
    if not ran or (failed and min(failed) == max(ran) + 1):
        return None
    if max(ran) >= settings.largest:
        return f"search cap: micro-batch {settings.largest}, the largest it tries"
    above = f"; {min(failed)} ran out of memory" if failed else "; none ran out of memory"
    return f"search cap: {len(trials)} trials (max_trials){above}"


def outcome(case: Case, trials: Sequence[RunSample]) -> tuple[str, str | None]:
    """The case's status and reason from its trials: ok once a micro-batch ran (at its search's
    cap the figure is a lower bound, `search_cap`), else why not."""
    ran = [t.micro_batch for t in trials if t.status == "ok"]
    stopped = next((t for t in trials if t.status not in ("ok", "oom")), None)
    if stopped is not None:
        return (
            stopped.status,
            f"trial {stopped.index} (micro-batch {stopped.micro_batch}) ended {stopped.status}: {stopped.reason}",
        )
    if not ran:
        first = trials[0] if trials else None
        return (
            "oom",
            f"micro-batch {first.micro_batch if first else '?'} already runs out of memory: {first.reason if first else ''}",
        )
    return "ok", None


def trials_note(trials: Sequence[RunSample]) -> str:
    return f"{len(trials)} trials (micro-batch: status): " + ", ".join(f"{t.micro_batch}: {t.status}" for t in trials)


def judge(case: Case, trials: Sequence[RunSample]) -> Judgement:
    """Out-of-memory trials are how the search finds its boundary, so the case is judged by where
    its search ended (`outcome`); the options in effect are those of the trials that ran."""
    status, reason = outcome(case, trials)
    notes = [trials_note(trials)] if status != "ok" else []
    return Judgement(status, reason, [trial for trial in trials if trial.status == "ok"], notes)


def maxbatch_case_metrics(
    case: Case, trials: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """The largest micro-batch that ran, and the training figures of that trial; its micro-batch
    checked against the tokens its ranks processed."""
    best = max((t for t in trials if t.status == "ok"), key=trial_batch)
    batch = trial_batch(best)
    tokens = {rank.tokens_per_step for rank in best.ranks} - {0}  # 0: a tensor-parallel peer (Megatron)
    if tokens != {batch * case.params_as(TrainParams).seq_len}:
        raise ValueError(
            f"trial {best.index} is recorded at micro-batch {best.micro_batch}, its ranks processed {sorted(tokens)} tokens per step"
        )
    found, notes = train_case_metrics(trial_case(case, batch), [best], hardware)
    found = {"max_micro_batch": summarize([batch], "sequences"), **found}
    cap = search_cap(case, trials)
    capped = [f"micro-batch {best.micro_batch} is a lower bound of the largest that fits: {cap}"] if cap else []
    return found, [trials_note(trials), f"figures of trial {best.index}, at the largest micro-batch", *capped, *notes]


MAXBATCH = StageUnit(
    name="maxbatch",
    title="The largest micro-batch each method holds",
    case_metrics=maxbatch_case_metrics,
    headline="tokens_per_s",
    judge=judge,
)
