"""Beside each headline figure of page one, its workload in one short phrase (its shape and precision:
the row's name says what ran, kit.plan.workload_phrase.workload_shape) and its value per GPU beside
the host's total, as vendors and clouds quote (tokens/s/GPU): a buyer compares figures of one
workload, per GPU. Applied to the headline table page_one.py builds, so
that which figures are headlines stays that module's business."""

from __future__ import annotations

from kit.plan.workload_phrase import workload_shape
from kit.report.loaded_run import LoadedRun
from kit.report.model import Row, Table
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
    """The row with its case's workload after the folder of its raw samples, and its per-GPU value
    after the host's total; a heading, or a row of no one case, as it is."""
    label = row.cells[0]
    folder = label.detail or ""
    if row.heading or not folder.startswith(CASE_FOLDER) or len(row.cells) < 2:
        return row
    result = run.results.get(folder.removeprefix(CASE_FOLDER).rstrip("/"))
    if result is None:
        return row
    if result.stage in PER_GPU_METRICS and result.stage != "serve":
        cells = list(row.cells)  # a training figure's workload is said by its ranking (kit.report.ranking)
    else:
        cells = [label.model_copy(update={"detail": f"{folder}; {workload_shape(result.case)}"}), *row.cells[1:]]
    per_gpu = per_gpu_text(run, result.case_id)
    if per_gpu is not None and cells[1].colspan == 1:
        cells[1] = cells[1].model_copy(update={"text": f"{cells[1].text}; {per_gpu}"})
    return row.model_copy(update={"cells": cells})


def with_workloads(table: Table, run: LoadedRun) -> Table:
    """The headline table with each figure's workload under its name and its per-GPU value under the total."""
    return table.model_copy(update={"rows": [_described(row, run) for row in table.rows]})
