"""The largest micro-batch section (paper Table IV): each method's largest micro-batch found by trials,
and its throughput and memory there (figures: kit.measure.maxbatch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.measure.unit import StageUnit
from kit.plan.protocol import Protocol
from kit.report.cells import has_metrics, method_label, metric_cell, metric_of, status_cell
from kit.report.model import Cell, Row, Section, Table
from kit.report.sections.common import stage_cases

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun
from kit.measure.maxbatch import search_cap


def maxbatch_section(stage: StageUnit, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """Table IV: per method, the largest micro-batch that ran its warm-up and measured steps,
    with that trial's throughput and memory, and every trial of the search."""
    section = Section(anchor=stage.name, title=stage.title)
    cases = stage_cases(run, stage.name)
    rows = []
    for case in cases:
        result = run.results.get(case.id)
        cells = [
            Cell(text=case.model or "-"),
            Cell(text=method_label(case.method), tone="strong"),
            Cell(text=str(case.gpus), detail=case.fitted),
        ]
        if has_metrics(result, "max_micro_batch", "tokens_per_s"):
            cap = search_cap(case, result.samples)
            largest = f"{metric_of(result, 'max_micro_batch').mean:.0f}"
            cells += [
                Cell(text=f"≥ {largest}", detail=cap) if cap else Cell(text=largest),
                metric_cell(result, "tokens_per_s", "10^3 tokens/s"),
                metric_cell(result, "peak_memory_gib"),
            ]
        else:
            cells.append(status_cell(result, case.id in run.info.selected, colspan=3))
        trials = result.samples if result else []
        cells.append(Cell(text=", ".join(f"{t.micro_batch} {t.status}" for t in trials) or "-", tone="muted"))
        rows.append(Row(cells=cells))
    device = "GPUs" if run.info.plan.device == "cuda" else "processes"
    section.tables.append(
        Table(
            caption="Table IV: the largest micro-batch per method, its throughput and peak memory",
            header=[
                "Model",
                "Method",
                device,
                "largest micro-batch",
                "10^3 tokens/s",
                "peak memory (GiB)",
                "trials (micro-batch: status, in order)",
            ],
            widths=[11, 12, 7, 10, 13, 12, 35],
            rows=rows,
            notes=[
                "Each trial is a fresh launch at one micro-batch through the case's warm-up and measured steps: from "
                "the start (the memory model's prediction on a GPU) doubling until one runs out of memory, then "
                "bisecting. The figures are those of the trial at the largest micro-batch that ran; ≥ where the "
                "search reached its cap before a micro-batch one larger ran out of memory.",
                *(
                    [
                        f"On CPU each process holds at most {case.train.memory_cap_gib:g} GiB of data (RLIMIT_DATA), "
                        "standing in for a GPU's memory."
                        for case in cases[:1]
                        if case.train and case.train.memory_cap_gib
                    ]
                ),
            ],
        )
    )
    return section
