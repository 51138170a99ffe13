"""Data-parallel scaling across the scaling stage's cases of a run (paper, Figure 4): each case
is a training case, measured as one; the stage's own figure is its efficiency.

The efficiency itself is defined once, in kit.theory.analytic.scaling_efficiency
(throughput(N) / (N x throughput(1))); this module only finds, for every case of the stage, the
one-device case of the same series to hold it against, from the Results.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import BaseModel

from kit.measure.training import train_case_metrics
from kit.measure.unit import StageUnit
from kit.rundir.schema import Metric, Result
from kit.theory.analytic import scaling_efficiency

if TYPE_CHECKING:
    pass

THROUGHPUT = "tokens_per_s"


class ScalingRow(BaseModel):
    """One device count of one series (model, method, micro-batch)."""

    series: str  # "tiny-llama q, micro-batch 2"
    model: str | None
    method: str
    micro_batch: int | None
    devices: int
    case_id: str
    status: str
    throughput: Metric | None = None  # tokens/s over the independent runs
    per_device: float | None = None  # mean tokens/s / devices
    efficiency: float | None = None  # fraction; 1.0 is linear scaling
    baseline_case_id: str | None = None
    reason: str | None = None  # why there is no efficiency


def scaling_rows(results: Iterable[Result], stage: str = "scaling") -> list[ScalingRow]:
    """Per series, one row per device count in increasing order, each with its efficiency
    against the same series on one device, from the mean throughputs of the runs.
    Rows without an efficiency say why (case not ok, no one-device case, ...)."""
    series: dict[tuple, list[Result]] = {}
    for result in results:
        if result.stage != stage:
            continue
        case = result.case
        key = (case.model, case.method, case.micro_batch)
        series.setdefault(key, []).append(result)
    rows: list[ScalingRow] = []
    for (model, method, micro_batch), members in series.items():
        members.sort(key=lambda result: result.case.gpus)
        label = f"{model or '-'} {method}" + (f", micro-batch {micro_batch}" if micro_batch else "")
        base = next((r for r in members if r.case.gpus == 1), None)
        base_throughput = _throughput(base)
        for result in members:
            throughput = _throughput(result)
            row = ScalingRow(
                series=label,
                model=model,
                method=method,
                micro_batch=micro_batch,
                devices=result.case.gpus,
                case_id=result.case_id,
                status=result.status,
                throughput=throughput,
                per_device=throughput.mean / result.case.gpus if throughput else None,
            )
            if throughput is None:
                row.reason = f"case {result.status}" + (f": {result.reason}" if result.reason else "")
            elif base is None:
                row.reason = "no one-device case in this run"
            elif base_throughput is None:
                row.reason = f"the one-device case {base.case_id} is {base.status}"
            else:
                row.efficiency = scaling_efficiency(throughput.mean, base_throughput.mean, result.case.gpus)
                row.baseline_case_id = base.case_id
            rows.append(row)
    return rows


def _throughput(result: Result | None) -> Metric | None:
    if result is None or result.status != "ok":
        return None
    return result.metrics.get(THROUGHPUT)


SCALING = StageUnit(
    name="scaling", title="Data-parallel scaling", case_metrics=train_case_metrics, headline="tokens_per_s"
)
