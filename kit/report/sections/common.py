"""What the stage sections share: why a stage has nothing to show, the notes on runs and memory
under a table, and the section of a stage without a layout of its own (every metric of every case)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from kit.plan.predictions import GIB, device_memory_bytes
from kit.plan.protocol import Case, Protocol
from kit.report.cells import mean_std, method_label, metric_of, one_line_cause, status_cell
from kit.report.charts import Bar, Limit
from kit.report.model import Cell, Row, Section, Table
from kit.rundir.schema import Result
from kit.rundir.serving import ServeDetails
from kit.theory.hardware import load_hardware
from kit.units import metric_label

if TYPE_CHECKING:
    from kit.measure.unit import StageUnit
    from kit.report.loaded_run import LoadedRun


RANK_PREFIX = re.compile(r"^(rank \d+|ranks \[[\d, ]+\]): ")  # a reason's first words, naming the rank that failed


def first_clause(reason: str | None) -> str:
    """A reason without the rank that gave it, to its first semicolon: what happened, in brief."""
    return RANK_PREFIX.sub("", reason or "no reason recorded").split(";")[0]


def why_unmeasured(results: Sequence[Result | None], most: int | None = None, brief: bool = False) -> str:
    """Why cases ended without a measurement: each status and reason once, most first, counted;
    `brief`, each reason's first clause and no counts."""
    reasons = Counter(
        "no result: the run ended before it finished"
        if result is None
        else f"{result.status}: {first_clause(result.reason) if brief else one_line_cause(RANK_PREFIX.sub('', result.reason or 'no reason recorded'))}"
        for result in results
    )
    return "; ".join(
        f"{reason} ({count} cases)" if count > 1 and not brief else reason
        for reason, count in reasons.most_common(most)
    )


def unmeasured_line(caption: str, results: Sequence[Result | None]) -> str | None:
    """One line in the place of a table none of whose cases measured anything: how many, and
    why (a page of rows saying "skipped" tells no more); None where one did."""
    if any(result is not None and result.status == "ok" for result in results):
        return None
    return f"{caption}: none of its {len(results)} cases measured ({why_unmeasured(results, 3)})."


def served_runs(run: LoadedRun) -> Iterator[tuple[Case, int, ServeDetails]]:
    """Each run of every serve case that ended ok, in plan order, with what its driver (rank 0) recorded."""
    for case in run.info.plan.cases:
        result = run.results.get(case.id)
        if case.workload != "serve" or result is None or result.status != "ok":
            continue
        for sample in result.samples:
            driver = next((rank for rank in sample.ranks if rank.rank == 0), None)
            details = driver.details_as(ServeDetails) if driver else None
            if details is not None:
                yield case, sample.index, details


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
        return f"No measurement: every {stage} case ended without one ({why_unmeasured(results)}).{shows}"
    return None


def gpu_capacity(run: LoadedRun) -> Limit | None:
    """The memory of the run's smallest GPU as NVML gave it (else its datasheet's), the line a
    peak-memory chart draws; None on a CPU."""
    fingerprint = run.before.fingerprint
    sizes = [gpu.memory_bytes for gpu in fingerprint.gpus.gpus if gpu.memory_bytes] if fingerprint else []
    if sizes:
        return Limit(value=min(sizes) / GIB, label=f"GPU memory {min(sizes) / GIB:.1f} GiB (NVML)")
    specs = [spec for name in run.measured.gpu_names if (spec := load_hardware().lookup(name))]
    datasheet = [size for spec in specs if (size := device_memory_bytes(spec))]
    return (
        Limit(value=min(datasheet) / GIB, label=f"GPU memory {min(datasheet) / GIB:.1f} GiB (datasheet)")
        if datasheet
        else None
    )


def case_bar(run: LoadedRun, case: Case, metric: str, scale: float = 1.0, label: str | None = None) -> Bar | None:
    """A case's bar in a chart of one figure per method (or engine) and model: its mean and spread,
    hatched where invalid (kit.measure.validity), or its status in its place; None for a case not run."""
    result = run.results.get(case.id)
    label, group = label or method_label(case.method), case.model or ""
    if result is None or (result.status == "ok" and not result.metrics.get(metric)):
        return None
    if result.status != "ok":
        return Bar(label=label, group=group, mark="OOM" if result.status == "oom" else result.status)
    figure = metric_of(result, metric)
    return Bar(
        label=label,
        group=group,
        value=figure.mean * scale,
        error=(figure.std or 0) * scale,
        runs=figure.n,
        mark="invalid" if run.invalid.get(case.id) else None,
    )


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


def bars_note(runs: Iterable[int], what: str = "bar") -> str:
    """How many runs each bar (or point) of a chart holds, as its caption says it."""
    counts = sorted(set(runs))
    if counts == [1]:
        return f"Each {what} is one run: no spread to show."
    if len(counts) == 1:
        return f"Each {what} is the mean of {counts[0]} runs, its error bar one standard deviation."
    return f"Each {what} is the mean of {counts[0]} to {counts[-1]} runs, its error bar one standard deviation where there are several."


def generic_stage(stage: StageUnit, run: LoadedRun, protocol: Protocol | None = None) -> Section:
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
        invalid = run.invalid.get(case.id)
        rows.append(
            Row(
                cells=[
                    Cell(
                        text=case.id + (f" (invalid: {invalid[0]})" if invalid else ""),
                        tone="bad" if invalid else "mono",
                        colspan=2,
                    )
                ],
                heading=True,
            )
        )
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
