"""The communication section: each collective's bus bandwidth beside the bound of the links it crossed,
within a node and across nodes apart, and its sweep over message sizes (figures: kit.measure.comm)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from kit.comm.collectives import COLLECTIVES
from kit.comm.link_bounds import BusBandwidthBound, internode_bound, sweep_bound
from kit.measure.unit import StageUnit
from kit.plan.protocol import Case, Protocol
from kit.report import charts
from kit.report.cells import metric_cell, status_cell
from kit.report.model import Cell, Chart, Row, Section, Table
from kit.report.sections.common import runs_note, stage_cases
from kit.rundir.schema import Result
from kit.theory.hardware import HardwareTable

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun
from kit.measure.comm import sweep_of


def runs_at_a_size(results) -> str:
    """What one point of a sweep's chart is: one run, or the mean of several at that size."""
    counts = sorted({len(result.samples) for result in results if result.status == "ok"})
    return "one run" if counts == [1] else f"the mean of {' or '.join(map(str, counts))} runs at that size"


def _mean_sweep(result: Result) -> charts.Sweep:
    """The mean over a comm case's runs at each message size (rank 0's rows, as `sweep_of` reads them)."""
    by_size: dict[int, list[tuple[float, float]]] = {}
    for sample in result.samples:
        for row in sweep_of(sample).rows:
            by_size.setdefault(row.size_bytes, []).append((row.timing.busbw_gbps, row.timing.time_us))
    return charts.Sweep(
        label=_collective_label(result.case.method),
        points=[
            charts.SizePoint(
                size_bytes=size,
                bus_bandwidth_gb_s=statistics.fmean(b for b, _ in values),
                time_us=statistics.fmean(t for _, t in values),
            )
            for size, values in sorted(by_size.items())
        ],
    )


def _collective_label(method: str) -> str:
    known = COLLECTIVES.get(method)
    return known.label if known else method


SPANS = {
    "intra-node": "Within a node: ranks on one node, bound by its GPU links (NVLink or PCIe)",
    "inter-node": "Across nodes: ranks on several nodes, bound by the network between them",
    None: "Not measured, or a sweep that did not say on which nodes its ranks ran",
}


def case_span(result: Result | None, executor: str) -> str | None:
    """intra-node or inter-node, as the ranks of the case's first run said where they ran; on one
    host (any executor but Slurm) a sweep is intra-node; None where it is not known."""
    if result is None or result.status != "ok" or not result.samples:
        return None
    try:
        span = sweep_of(result.samples[0]).span
    except ValueError:
        return None
    return span or (None if executor == "slurm" else "intra-node")


def case_bound(
    case: Case, result: Result, span: str | None, run: LoadedRun, hardware: HardwareTable | None
) -> BusBandwidthBound:
    """The bound a case's busbw is held against: its GPU links within a node, the network (from
    the fingerprint of each node its ranks ran on) across nodes."""
    sweep = sweep_of(result.samples[0])
    if span != "inter-node":
        return sweep_bound(sweep, case.device, hardware)
    networks = {}
    for node in dict.fromkeys(sweep.rank_nodes):
        loaded = run.nodes.get(node)
        networks[node] = loaded.fingerprint.network if loaded is not None and loaded.fingerprint is not None else None
    return internode_bound(case.device, networks)


def _bound_cell(bound: BusBandwidthBound) -> Cell:
    if bound.known:
        return Cell(text=f"{bound.gbps:.1f}", detail=bound.link)
    return Cell(text="not known", detail=bound.reason, tone="muted")


def comm_section(stage: StageUnit, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """Each collective's bus bandwidth (nccl-tests' definition, kit.comm.collectives) beside the bound of the
    links it crossed, within a node and across nodes apart, and its sweep over sizes."""
    section = Section(anchor=stage.name, title=stage.title)
    cases = stage_cases(run, stage.name)
    rows: dict[str | None, list[Row]] = {}
    sweeps, unreadable = [], []
    for case in cases:
        result = run.results.get(case.id)
        span = case_span(result, run.info.executor)
        label = Cell(text=_collective_label(case.method), detail=case.id, tone="strong")
        if span is None or result is None:  # a case without a result has no span either
            rows.setdefault(span, []).append(
                Row(
                    cells=[
                        label,
                        Cell(text=str(case.gpus)),
                        status_cell(result, case.id in run.info.selected, colspan=5),
                    ]
                )
            )
            continue
        rows.setdefault(span, []).append(
            Row(
                cells=[
                    label,
                    Cell(text=str(case.gpus)),
                    metric_cell(result, "bus_bandwidth_gb_s"),
                    metric_cell(result, "bus_bandwidth_at_largest_gb_s"),
                    _bound_cell(case_bound(case, result, span, run, None)),
                    metric_cell(result, "algorithm_bandwidth_gb_s"),
                    metric_cell(result, "time_at_smallest_us"),
                ]
            )
        )
        try:
            sweeps.append(_mean_sweep(result))
        except ValueError as exc:
            unreadable.append(f"{case.id}: {str(exc).splitlines()[0]}")
    device = "GPUs" if run.info.plan.device == "cuda" else "processes on CPU"
    for span, caption in SPANS.items():
        if span not in rows:
            continue
        section.tables.append(
            Table(
                caption=caption,
                header=[
                    "Collective",
                    device,
                    "peak busbw (GB/s)",
                    "busbw, largest (GB/s)",
                    "bound (GB/s)",
                    "peak algbw (GB/s)",
                    "time, smallest (µs)",
                ],
                widths=[20, 9, 14, 14, 15, 14, 14],
                rows=rows[span],
                notes=[
                    runs_note(run.results[c.id] for c in cases if c.id in run.results),
                    "Bus bandwidth as nccl-tests defines it: algorithm bandwidth × the collective's factor, comparable "
                    "with the link rate whatever the number of ranks; the bound is the per-direction rate of the links "
                    "it crossed (its source in the cell's detail), or says why it is not known.",
                ]
                + ([f"Sweeps that could not be read: {'; '.join(unreadable)}."] if unreadable else []),
            )
        )
    if run.info.plan.device == "cpu":
        section.paragraphs.append(
            "This run is on CPU: the processes exchange data through host memory, or TCP between nodes (gloo), so "
            "these bandwidths say nothing about NVLink, PCIe or the cluster's fabric."
        )
    if sweeps:
        section.charts.append(
            Chart(
                title="Bus bandwidth and time over message sizes",
                svg=charts.sweep_chart("comm", sweeps),
                caption="Small messages are bound by latency (time flat), large ones by bandwidth (bus bandwidth "
                f"flat). Each point is {runs_at_a_size(run.results[c.id] for c in cases if c.id in run.results)}.",
            )
        )
    return section
