"""Beside each headline figure of page one, its workload in one short phrase (its shape and precision:
the row's name says what ran, kit.plan.workload_phrase.workload_shape) and its value per GPU beside
the host's total, as vendors and clouds quote (tokens/s/GPU): a buyer compares figures of one
workload, per GPU. Applied to the headline table page_one.py builds, so
that which figures are headlines stays that module's business."""

from __future__ import annotations

from kit.plan.workload_phrase import workload_shape
from kit.report.loaded_run import LoadedRun
from kit.report.model import Row, Table
from kit.rundir.schema import Result
from kit.units import format_value

CASE_FOLDER = "cases/"
PER_GPU_METRICS = {
    "pretrain": "tokens_per_s",
    "finetune": "tokens_per_s",
    "scaling": "tokens_per_s",
    "profile": "tokens_per_s",
    "serve": "output_throughput",
}
TRAINING_STAGES = ("pretrain", "finetune", "scaling", "profile")


def per_gpu_text(run: LoadedRun, case_id: str) -> str | None:
    """ "2180 per GPU" (per process on CPU), in the total's unit, of a case's throughput; None for a figure not
    counted per GPU (bus bandwidth is one GPU's already) or one not measured."""
    result = run.results.get(case_id)
    if result is None:
        return None
    name = PER_GPU_METRICS.get(result.stage)
    metric = result.metrics.get(name) if name else None
    if name is None or metric is None:
        return None
    each = "GPU" if result.case.device == "cuda" else "process"
    return f"{format_value(metric.mean / result.case.gpus)} per {each}"


def _case_of(row: Row, run: LoadedRun) -> Result | None:
    """The result a row of one case shows (its label's detail is the folder of its raw samples)."""
    folder = row.cells[0].detail or ""
    if row.heading or not folder.startswith(CASE_FOLDER) or len(row.cells) < 2:
        return None
    return run.results.get(folder.removeprefix(CASE_FOLDER).rstrip("/"))


def _described(row: Row, run: LoadedRun, shape_said: bool) -> Row:
    """The row with its case's workload after the folder of its raw samples (unless its group's
    heading says it, or its ranking does: a training figure's, kit.report.ranking), and its per-GPU
    value under the host's total; a heading, or a row of no one case, as it is."""
    result = _case_of(row, run)
    if result is None:
        return row
    cells = list(row.cells)
    if not shape_said and result.stage not in TRAINING_STAGES:
        cells[0] = cells[0].model_copy(update={"detail": f"{cells[0].detail}; {workload_shape(result.case)}"})
    per_gpu = per_gpu_text(run, result.case_id)
    if per_gpu is not None and cells[1].colspan == 1:
        measured = cells[1]  # the per-GPU value under the total, on a line the row has to spare
        cells[1] = measured.model_copy(update={"detail": "; ".join(filter(None, [per_gpu, measured.detail]))})
    return row.model_copy(update={"cells": cells})


def with_workloads(table: Table, run: LoadedRun) -> Table:
    """The headline table with each figure's workload under its name (once in its group's heading
    where the group's figures share one) and its per-GPU value under the total."""
    groups: list[list[Row]] = [[]]
    for row in table.rows:
        if row.heading:
            groups.append([])
        groups[-1].append(row)
    rows: list[Row] = []
    for group in groups:
        shapes = {
            workload_shape(result.case)
            for row in group
            if (result := _case_of(row, run)) is not None and result.stage not in TRAINING_STAGES
        }
        shared = len(shapes) == 1 and group[0].heading and len(group) > 2
        if shared:
            heading = group[0].cells[0]
            group = [
                group[0].model_copy(
                    update={
                        "cells": [
                            heading.model_copy(update={"text": f"{heading.text}; each {shapes.pop()}"}),
                            *group[0].cells[1:],
                        ]
                    }
                ),
                *group[1:],
            ]
        rows += [_described(row, run, bool(shared)) for row in group]
    return table.model_copy(update={"rows": rows})
