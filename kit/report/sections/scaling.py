"""The data-parallel scaling section (paper Figure 4): each series' efficiency from one device up, and
its curve (figures: kit.measure.scaling)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.measure.unit import StageUnit
from kit.plan.protocol import Case, Protocol
from kit.report import charts
from kit.report.cells import mean_std, method_label, metric_cell, metric_of, percent, status_cell
from kit.report.model import Cell, Chart, Row, Section, Table
from kit.report.sections.common import bars_note, runs_note, stage_cases
from kit.rundir.schema import Metric

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun
from kit.measure.scaling import THROUGHPUT, scaling_rows


def scaling_section(stage: StageUnit, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """Scaling efficiency 1 -> N from the scaling stage (paper Figure 4), each series' rows as
    `scaling_rows` finds them, the cases without a measurement by their status."""
    section = Section(anchor=stage.name, title=stage.title)
    cases = stage_cases(run, stage.name)
    results = [run.results[case.id] for case in cases if case.id in run.results]
    measured = {row.case_id: row for row in scaling_rows(results, stage.name)}
    device_word, devices_word = ("GPU", "GPUs") if run.info.plan.device == "cuda" else ("process", "processes")
    series_of: dict[tuple, list[Case]] = {}
    for case in cases:
        series_of.setdefault((case.model, case.method, case.micro_batch), []).append(case)
    lines = []
    for (model, method, batch), members in series_of.items():
        members.sort(key=lambda case: case.gpus)
        points, rows = [], []
        for case in members:
            row = measured.get(case.id)
            if row is None or row.throughput is None:
                cell = status_cell(run.results.get(case.id), case.id in run.info.selected, colspan=4)
                rows.append(Row(cells=[Cell(text=str(case.gpus)), cell]))
                continue
            result, throughput, efficiency = run.results[case.id], row.throughput, row.efficiency
            points.append(
                charts.ScalingPoint(
                    gpus=case.gpus,
                    throughput=throughput.mean / 1e3,
                    error=(throughput.std or 0) / 1e3,
                    efficiency=efficiency,
                )
            )
            per_device = Metric(
                mean=throughput.mean / case.gpus,
                std=None if throughput.std is None else throughput.std / case.gpus,
                n=throughput.n,
                unit=throughput.unit,
                per_run=[v / case.gpus for v in throughput.per_run],
            )
            efficiency_text = (
                "no 1-" + device_word + " baseline"
                if efficiency is None
                else percent(efficiency) + (" (baseline)" if case.gpus == 1 else "")
            )
            rows.append(
                Row(
                    cells=[
                        Cell(text=str(case.gpus)),
                        Cell(text=mean_std(throughput, "10^3 tokens/s")),
                        Cell(text=mean_std(per_device, "10^3 tokens/s")),
                        Cell(text=efficiency_text),
                        metric_cell(result, "peak_memory_gib"),
                    ]
                )
            )
        label = f"{model} {method_label(method)}, micro-batch {batch}"
        lines.append(charts.ScalingSeries(label=label, points=points))
        section.tables.append(
            Table(
                caption=f"Scaling of {label}",
                header=[devices_word, "10^3 tokens/s", f"per {device_word}", "efficiency vs 1", "peak memory (GiB)"],
                rows=rows,
                notes=[
                    runs_note(run.results[c.id] for c in members if c.id in run.results),
                    "Scaling efficiency = T(N) / (N × T(1)) from the mean throughputs (paper, Figure 4).",
                ],
            )
        )
    if run.info.plan.device == "cpu":
        section.paragraphs.append(
            "This run is on CPU: each of a case's N \"GPUs\" is a process sharing the host's cores, so the "
            "efficiency below describes this host's CPU, not any GPU or interconnect."
        )
    curves = [line for line in lines if len(line.points) > 1]
    if curves:
        runs = [
            metric_of(run.results[point_case], THROUGHPUT).n for point_case, row in measured.items() if row.throughput
        ]
        section.charts.append(
            Chart(
                title="Scaling 1 → N",
                svg=charts.scaling_chart("scaling", curves, device_word, devices_word),
                caption="Left: measured throughput and the ideal N × T(1). Right: scaling efficiency; 100 % is linear "
                f"scaling. {bars_note(runs, 'point')}",
            )
        )
    elif any(line.points for line in lines):
        section.paragraphs.append(
            f"One {device_word} count measured in each series: no curve to draw, and no efficiency "
            "but the baseline's; the table gives its figures."
        )
    return section
