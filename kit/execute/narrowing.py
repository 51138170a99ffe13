"""More runs of a case than planned, until its headline figure's 95 % interval is narrow enough to
decide an acceptance line (kit.plan.protocol.Repetition, `kit run --runs-for SPEC`).

After a case's planned runs, the runs its spread says are needed (kit.measure.interval) are made
in launches like its own (all in one launch where the case shares one, else one at a time, the
spread read again after each), until the interval is within the width, the case has its most runs,
or its share of the run's time cap is spent. The time left is shared among the cases left, so that
what one case leaves unspent goes to those after it. A case's note says which of the three ended
its runs, with the width reached: a reviewer reads how its interval came to be.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from kit.measure.interval import relative_halfwidth, runs_to_narrow
from kit.measure.registry import measure, unit_of
from kit.plan.protocol import Case, Plan, Repetition
from kit.rundir.schema import RunSample

Launch = Callable[[list[int]], list[RunSample]]


def repeats(case: Case, plan: Plan) -> bool:
    """Whether the plan repeats the case: one its spec reads, whose figure is of noise over
    independent runs (not a max-batch search's trials, not a soak's one long run), with a headline
    to watch."""
    unit = unit_of(case)
    return (
        plan.repetition is not None
        and case.id in plan.repeated
        and case.max_batch_search is None
        and case.soak is None
        and unit is not None
        and unit.headline is not None
    )


def headline_values(case: Case, runs: list[RunSample]) -> list[float] | None:
    """Each run's headline figure, as the case's unit measures it; None where a run failed."""
    unit = unit_of(case)
    if unit is None or unit.headline is None or unit.judge(case, runs).status != "ok":
        return None
    metric = measure(case, runs)[0].get(unit.headline)
    return list(metric.per_run) if metric is not None else None


class RepetitionBudget:
    """The time a run's repetition may still spend, shared among the cases that can use it."""

    def __init__(self, repetition: Repetition, spent_s: float, cases_left: int):
        self.repetition, self.spent_s, self.cases_left = repetition, spent_s, cases_left

    def allowance_s(self) -> float:
        """This case's share: the time left over the cases left, itself included."""
        left = self.repetition.time_cap_minutes * 60 - self.spent_s
        return max(0.0, left) / max(1, self.cases_left)

    def spend(self, seconds: float) -> None:
        self.spent_s += seconds

    def case_passed(self) -> None:
        """A case that could use a share has run (narrowed or not, skipped or failed)."""
        self.cases_left = max(0, self.cases_left - 1)


def narrowed(
    case: Case, runs: list[RunSample], budget: RepetitionBudget, launch: Launch
) -> tuple[list[RunSample], str]:
    """The case's runs with as many more as narrow it within its allowance, and the note that says
    how they ended."""
    repetition, planned, allowance = budget.repetition, len(runs), budget.allowance_s()
    started = time.monotonic()
    ended = ""
    while not ended:
        values = headline_values(case, runs)
        if values is None:
            ended = "a run failed"
            break
        width = relative_halfwidth(values)
        if width is not None and width <= repetition.halfwidth:
            ended = "narrow"
            break
        if len(runs) >= repetition.max_runs:
            ended = "most runs"
            break
        wanted = max(1, runs_to_narrow(values, repetition.halfwidth, repetition.max_runs) - len(runs))
        per_run = statistics.fmean(run.wall_s for run in runs)
        left = allowance - (time.monotonic() - started)
        count = min(wanted if case.shares_launch else 1, int(left // per_run) if per_run > 0 else wanted)
        if count < 1:
            ended = "time"
            break
        runs = [*runs, *launch(list(range(len(runs) + 1, len(runs) + count + 1)))]
    budget.spend(time.monotonic() - started)
    return runs, _note(repetition, planned, runs, headline_values(case, runs), ended, allowance)


def _note(
    repetition: Repetition,
    planned: int,
    runs: list[RunSample],
    values: list[float] | None,
    ended: str,
    allowance: float,
) -> str:
    counted = f"{len(runs)} run{'s' if len(runs) != 1 else ''} ({planned} planned)"
    width = relative_halfwidth(values) if values else None
    reached = f"± {width * 100:.1f} %" if width is not None else "no interval"
    wanted = f"± {repetition.halfwidth * 100:g} %"
    if ended == "narrow" and len(runs) == planned:
        return f"not repeated: its {counted} gave a 95 % interval of {reached}, within {wanted}"
    if ended == "narrow":
        return f"repeated until its 95 % interval was within {wanted}: {counted}, {reached}"
    if ended == "most runs":
        return f"repeated to the spec's most runs: {counted}; its 95 % interval is {reached}, wider than {wanted}"
    if ended == "time":
        return (
            f"repeated within its share of the spec's time cap ({allowance:.0f} s): {counted}; "
            f"its 95 % interval is {reached}, wider than {wanted}"
        )
    return f"not repeated further: {ended} ({counted})"
