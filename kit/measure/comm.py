"""The communication stage (paper Sec. VI): each NCCL collective swept over message sizes, as
nccl-tests measures it (kit.comm.nccl_tests_output reads its output, kit.comm.link_bounds bounds the bus bandwidth by the link);
the figures of a run come from rank 0's sweep, the section sets the collectives side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kit.comm.link_bounds import sweep_bound
from kit.comm.sweep import CommSweep
from kit.measure.metrics import summarize
from kit.measure.unit import StageUnit
from kit.plan.protocol import Case
from kit.rundir.schema import Metric, RunSample
from kit.theory.hardware import HardwareTable

if TYPE_CHECKING:
    pass


def sweep_of(run: RunSample) -> CommSweep:
    """Rank 0's sweep of a run (every rank reports the same rows; rank 0's is the record)."""
    ranks = sorted(run.ranks, key=lambda rank: rank.rank)
    if not ranks:
        raise ValueError(f"run {run.index} has no rank sample")
    sweep = ranks[0].details_as(CommSweep)
    if sweep is None:
        raise ValueError(f"run {run.index}'s rank 0 recorded no sweep")
    return sweep


def sweep_figures(sweep: CommSweep) -> dict[str, float]:
    """The headline figures of one sweep; the per-size rows stay in the sample."""
    if not sweep.rows:
        raise ValueError(f"the {sweep.collective} sweep has no rows")
    rows = sorted(sweep.rows, key=lambda row: row.size_bytes)
    return {
        "bus_bandwidth_gb_s": max(row.timing.busbw_gbps for row in rows),
        "bus_bandwidth_at_largest_gb_s": rows[-1].timing.busbw_gbps,
        "algorithm_bandwidth_gb_s": max(row.timing.algbw_gbps for row in rows),
        "time_at_smallest_us": rows[0].timing.time_us,
    }


COMM_UNITS = {
    "bus_bandwidth_gb_s": "GB/s",
    "bus_bandwidth_at_largest_gb_s": "GB/s",
    "algorithm_bandwidth_gb_s": "GB/s",
    "time_at_smallest_us": "us",
}


def comm_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """Peak busbw (bus_bandwidth_gb_s), busbw at the largest size, peak algbw and the time of
    the smallest size, each over the independent runs; busbw against the link's bound where one
    is known, and a note flagging a busbw above it as impossible."""
    sweeps = [sweep_of(run) for run in runs]
    per_run = [sweep_figures(sweep) for sweep in sweeps]
    found: dict[str, Metric | None] = {
        name: summarize([figures[name] for figures in per_run], unit) for name, unit in COMM_UNITS.items()
    }
    first = sweeps[0]
    sizes = sorted(row.size_bytes for row in first.rows)
    notes = [
        f"{first.backend}, {first.ranks} ranks, {first.dtype}: {len(sizes)} sizes from {sizes[0]} B to {sizes[-1]} B; "
        f"time = {first.time_statistic}; per-size rows in each rank sample's details.rows"
    ]
    if first.span is not None:
        notes.append(f"{first.span}: ranks on {', '.join(dict.fromkeys(first.rank_nodes))} (as each rank said)")
    if first.span == "inter-node":
        notes.append(
            "bus bandwidth bound: the network between the nodes, from each node's fingerprint (the report's "
            "communication section), not a GPU link"
        )
        return found, notes
    bound = sweep_bound(first, case.device, hardware)
    if bound.gbps is None:
        notes.append(f"bus bandwidth bound: none ({bound.reason})")
        return found, notes
    notes.append(f"bus bandwidth bound: {bound.gbps:.1f} GB/s, {bound.link}")
    found["bus_bandwidth_fraction_of_bound"] = summarize(
        [figures["bus_bandwidth_gb_s"] / bound.gbps for figures in per_run], "fraction"
    )
    over = [figures["bus_bandwidth_gb_s"] for figures in per_run if figures["bus_bandwidth_gb_s"] > bound.gbps]
    if over:
        notes.append(
            f"bus bandwidth {max(over):.1f} GB/s above the {bound.gbps:.1f} GB/s link bound: impossible, so the "
            "measurement, the topology or the link rate is wrong"
        )
    return found, notes


COMM = StageUnit(
    name="comm", title="Communication bandwidth", case_metrics=comm_case_metrics, headline="bus_bandwidth_gb_s"
)
