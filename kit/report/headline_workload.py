"""Beside each headline figure of page one, its workload in one short phrase (kit.plan.workload_phrase)
and its value per GPU beside the host's total, as vendors and clouds quote (tokens/s/GPU): a buyer
compares figures of one workload, per GPU. Applied to the headline table page_one.py builds, so
that which figures are headlines stays that module's business."""

from __future__ import annotations

from kit.plan.workload_phrase import workload_phrase
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Table
from kit.units import format_value

CASE_FOLDER = "cases/"
PER_GPU_METRICS = {
    "pretrain": "tokens_per_s",
    "finetune": "tokens_per_s",
    "scaling": "tokens_per_s",
    "profile": "tokens_per_s",
    "serve": "output_throughput",
}
UNITS = {"tokens_per_s": "tokens/s", "output_throughput": "tokens/s"}


def per_gpu_text(run: LoadedRun, case_id: str) -> str | None:
    """ "2,180 tokens/s per GPU" (per process on CPU) of a case's throughput; None for a figure not
    counted per GPU (bus bandwidth is one GPU's already) or one not measured."""
    result = run.results.get(case_id)
    if result is None:
        return None
    name = PER_GPU_METRICS.get(result.stage)
    metric = result.metrics.get(name) if name else None
    if name is None or metric is None:
        return None
    each = "GPU" if result.case.device == "cuda" else "process"
    return f"{format_value(metric.mean / result.case.gpus)} {UNITS[name]} per {each}"


def _described(row: Row, run: LoadedRun) -> Row:
    label = row.cells[0]
    if row.heading or not (label.detail or "").startswith(CASE_FOLDER) or len(row.cells) < 2:
        return row
    case_id = (label.detail or "").removeprefix(CASE_FOLDER).rstrip("/")
    result = run.results.get(case_id)
    if result is None:
        return row
    cells = [label.model_copy(update={"detail": f"{workload_phrase(result.case)}; {label.detail}"}), *row.cells[1:]]
    per_gpu = per_gpu_text(run, case_id)
    if per_gpu is not None and cells[1].colspan == 1:
        measured: Cell = cells[1]
        detail = "; ".join(filter(None, [per_gpu, measured.detail]))
        cells[1] = measured.model_copy(update={"detail": detail})
    return row.model_copy(update={"cells": cells})


def with_workloads(table: Table, run: LoadedRun) -> Table:
    """The headline table with each figure's workload under its name and its per-GPU value under the total."""
    return table.model_copy(update={"rows": [_described(row, run) for row in table.rows]})
