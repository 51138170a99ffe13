"""What the stage sections share: why a stage has nothing to show, the notes on runs and memory
under a table, and the section of a stage without a layout of its own (every metric of every case)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kit.protocol import Case, Protocol
from kit.reference import metric_label
from kit.report.cells import mean_std, status_cell
from kit.report.model import Cell, Row, Section, Table
from kit.results import Result

if TYPE_CHECKING:
    from kit.report.load import LoadedRun
    from kit.stages.unit import Stage


def stage_cases(run: LoadedRun, stage: str) -> list[Case]:
    """The planned cases of a stage, in plan order."""
    return [case for case in run.info.plan.cases if case.stage == stage]


def stage_not_run(stage: str, purpose: str | None, run: LoadedRun, protocol: Protocol) -> str | None:
    """Why a stage has nothing to show, or None when it has results."""
    info = run.info
    planned = stage_cases(run, stage)
    shows = f" Once run, this section shows {purpose}." if purpose else ""
    if not planned:
        where = (
            f"the {info.profile} profile has no {stage} stage"
            if stage in protocol.stages
            else f"the protocol has no {stage} stage"
        )
        return f"Not run: {where}.{shows}"
    selected = [case for case in planned if case.id in info.selected]
    if not selected:
        which = f"the {stage} case" if len(planned) == 1 else f"none of the {len(planned)} {stage} cases"
        verb = "was not" if len(planned) == 1 else "was"
        return f"Not run: {which} of the profile {verb} selected for this run.{shows}"
    results = [run.results[case.id] for case in selected if case.id in run.results]
    if not results:
        return f"No result: the run ended before any {stage} case finished.{shows}"
    if all(result.status != "ok" for result in results):
        reasons = Counter(f"{result.status}: {result.reason or 'no reason recorded'}" for result in results)
        listed = "; ".join(f"{reason} ({count} cases)" if count > 1 else reason for reason, count in reasons.items())
        return f"No measurement: every {stage} case ended without one ({listed}).{shows}"
    return None


def memory_source(results: Iterable[Result]) -> str:
    kinds = set()
    for result in results:
        for sample in result.samples:
            for rank in sample.ranks:
                if rank.peak_memory is not None:
                    kinds.add("device" if rank.peak_memory.device_allocated_bytes is not None else "host")
    if kinds == {"host"}:
        return (
            "Peak memory is the host's peak resident set size of the largest process: this run had "
            "no device allocator (CPU), so it is not GPU memory."
        )
    if kinds == {"device"}:
        return "Peak memory is the GPU allocator's peak (max allocated), the largest over the processes of a run."
    return "Peak memory is the GPU allocator's peak where a GPU was used, else the host's peak resident set size."


def runs_note(results: Iterable[Result]) -> str:
    counts = sorted({len(result.samples) for result in results if result.status == "ok"})
    if counts == [1]:
        return "One run per case: the value of that run, without a standard deviation."
    runs = " or ".join(str(count) for count in counts) or "the"
    return f"Mean ± sample standard deviation over {runs} independent runs."


def generic_stage(stage: Stage, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """Every metric of every case: the whole of a stage without a dedicated layout, the rest of one with.
    Each case is a heading row over its metrics, each metric one row of its name and its value with
    the unit: two cells a metric keep a long listing quick to print."""
    section = Section(anchor=stage.name, title=stage.title)
    rows = []
    for case in stage_cases(run, stage.name):
        result = run.results.get(case.id)
        if result is None or result.status != "ok":
            rows.append(Row(cells=[Cell(text=case.id, tone="mono"), status_cell(result, case.id in run.info.selected)]))
            continue
        rows.append(Row(cells=[Cell(text=case.id, tone="mono", colspan=2)], heading=True))
        recorded = {name: metric for name, metric in result.metrics.items() if metric is not None}
        if not recorded:
            rows.append(
                Row(
                    cells=[
                        Cell(
                            text="ok, with no metric in result.json: its measurements are in the raw samples (see the "
                            "raw-data index)",
                            tone="muted",
                            colspan=2,
                        ),
                    ]
                )
            )
        for name, metric in recorded.items():
            rows.append(Row(cells=[Cell(text=metric_label(name)), Cell(text=f"{mean_std(metric)} {metric.unit}")]))
    section.tables.append(
        Table(
            caption=f"{section.title}: every measured metric",
            header=["Case, then each metric", "Mean ± std, unit"],
            widths=[55, 45],
            print_as_listing=True,
            rows=rows,
        )
    )
    return section
