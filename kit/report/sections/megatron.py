"""Megatron-LM beside DeepSpeed (paper Table II, claim C9): each Megatron case of the pre-training
and max-batch stages beside DeepSpeed's naive configuration with the same model, sequence, dtype
and batch. The cases are training cases of those stages, measured as such; this is their table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.plan.protocol import Case, Protocol
from kit.report.cells import has_metrics, metric_cell, status_cell
from kit.report.model import Cell, Row, Section, Table
from kit.report.sections.common import unmeasured_line
from kit.report.sections.comparison import Comparison

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun


def megatron_case(case: Case) -> bool:
    return case.train is not None and case.train.framework == "megatron" and case.variant is None


def framework_section(comparison: Comparison, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """Table II: Megatron-LM's engine beside DeepSpeed's naive configuration, model by model, at
    micro-batch 1 (pre-training) and at each one's largest micro-batch (the max-batch search)."""
    megatron = [case for case in run.info.plan.cases if comparison.cases(case)]
    by_key = {(c.stage, c.model, c.method, c.gpus): c for c in run.info.plan.cases if c.variant is None}
    rows, members = [], []
    for case in megatron:
        twin = by_key.get((case.stage, case.model, "naive", case.gpus))
        when = "largest micro-batch" if case.stage == "maxbatch" else f"micro-batch {case.micro_batch}"
        for engine, member in (("Megatron-LM", case), ("DeepSpeed (naive)", twin)):
            cells = [
                Cell(text=f"{case.model}, {case.gpus} {'GPUs' if case.device == 'cuda' else 'processes'}"),
                Cell(text=when),
                Cell(text=engine, tone="strong"),
            ]
            result = run.results.get(member.id) if member else None
            members += [result] if member else []
            if member is None:
                cells.append(Cell(text="not in the protocol", tone="muted", colspan=4))
            elif has_metrics(result, "tokens_per_s"):
                batch = result.metrics.get("max_micro_batch")
                cells += [
                    Cell(text=f"{batch.mean:.0f}" if batch else str(member.micro_batch)),
                    metric_cell(result, "tokens_per_s", "10^3 tokens/s"),
                    metric_cell(result, "step_time_s"),
                    metric_cell(result, "peak_memory_gib"),
                ]
            else:
                cells.append(status_cell(result, member.id in run.info.selected, colspan=4))
            rows.append(Row(cells=cells))
    section = Section(anchor=comparison.name, title=comparison.title)
    caption = "Table II: Megatron-LM's engine and DeepSpeed's naive configuration, same model, sequence and dtype"
    collapsed = unmeasured_line(caption, members)
    if collapsed:
        section.paragraphs.append(collapsed)
        return section
    section.tables.append(
        Table(
            caption=caption,
            header=["Model", "Batch", "Engine", "micro-batch", "10^3 tokens/s", "step time (s)", "peak memory (GiB)"],
            widths=[18, 16, 16, 10, 14, 12, 14],
            rows=rows,
            notes=[
                "DeepSpeed naive: data parallel without ZeRO. Megatron-LM: megatron-core's data parallelism with "
                "its distributed optimizer (and tensor parallelism where the method says tp2). At the largest "
                "micro-batch each engine runs its own, found by the max-batch search."
            ],
        )
    )
    return section


MEGATRON = Comparison(
    name="framework", title="Megatron-LM beside DeepSpeed", cases=megatron_case, section=framework_section
)
