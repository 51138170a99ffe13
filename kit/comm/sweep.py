"""A comm case's sweep as a rank records it: one row per collective and size, with its timing,
and the GPU links it crossed. The in-process measurement (kit/workloads/collective_sweep.py) and nccl-tests'
output (kit.comm.nccl_tests_output) both give these rows; the comm stage reads them
(kit/measure/comm.py). No torch here.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel


class Timing(BaseModel):
    """One placement (out-of-place or in-place) of one size."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    # Elements outside the tolerance: nccl-tests' "#wrong", or the kit's own check.
    wrong: int | None = None
    # nccl-tests before August 2022 printed "error" instead: the largest deviation from the
    # expected value, where float rounding is normal (NVIDIA/nccl-tests#52); not a count.
    max_error: float | None = None
    # The spread over the timed iterations (in-process measurement only).
    time_us_min: float | None = None
    time_us_p25: float | None = None
    time_us_p75: float | None = None
    time_us_max: float | None = None


class CommRow(BaseModel):
    """One message size of a sweep."""

    size_bytes: int
    count: int
    dtype: str
    redop: str | None = None
    root: int | None = None
    out_of_place: Timing | None = None
    in_place: Timing | None = None

    @property
    def timing(self) -> Timing:
        """The placement a figure is taken from: out-of-place where measured (nccl-tests prints
        it first; torch's AllGather, ReduceScatter and AlltoAll), else in-place."""
        found = self.out_of_place or self.in_place
        if found is None:
            raise ValueError(f"row of {self.size_bytes} B has no timing")
        return found

    @property
    def wrong(self) -> int:
        return sum(t.wrong or 0 for t in (self.out_of_place, self.in_place) if t is not None)


class TopologyFacts(BaseModel):
    """What the workload saw of the GPU links where it ran (GPU runs only)."""

    interconnect: str | None = None  # kit.host.fingerprint.TopologyClass.interconnect
    gpu_count: int | None = None
    label: str | None = None
    # Max PCIe generation and width the GPUs can train at in this host (nvidia-smi
    # pcie.link.gen.max / pcie.link.width.max), the slowest GPU's.
    pcie_generation: int | None = None
    pcie_lanes: int | None = None
    unavailable: str | None = None


class CommSweep(BaseModel):
    """The details of one rank sample of a comm case: the rows and how they were measured."""

    kind: Literal["comm"] = "comm"

    collective: str
    backend: Literal["torch-gloo", "torch-nccl", "nccl-tests"]
    ranks: int
    dtype: str
    warmup_iters: int
    iters: int
    time_statistic: str  # what `time_us` of a row is, in words
    rows: list[CommRow]
    device_names: list[str] = []
    topology: TopologyFacts | None = None
    rank_nodes: list[str] = []  # the node each rank ran on, as the rank itself said (rank order)
    out_of_bounds: int | None = None  # nccl-tests' summary line
    out_of_bounds_failed: bool = False
    avg_busbw_gbps: float | None = None  # nccl-tests' summary line
    command: list[str] = []
    raw_output_file: str | None = None  # beside the rank sample
    unparsed: list[str] = []

    @property
    def failure(self) -> str | None:
        """Why the data of this sweep cannot be trusted, or None."""
        return data_failure(self.rows, self.out_of_bounds, self.out_of_bounds_failed)

    @property
    def span(self) -> Literal["intra-node", "inter-node"] | None:
        """Whether the ranks ran on one node or across nodes; None where they did not say."""
        if not self.rank_nodes:
            return None
        return "inter-node" if len(set(self.rank_nodes)) > 1 else "intra-node"


def data_failure(rows: Sequence[CommRow], out_of_bounds: int | None, out_of_bounds_failed: bool) -> str | None:
    """A run whose check found wrong elements, or whose summary says "Out of bounds values: N
    FAILED", measured something other than a working collective: its case is an error."""
    wrong = [row for row in rows if row.wrong]
    parts = []
    if out_of_bounds_failed:
        parts.append(f"Out of bounds values: {out_of_bounds} FAILED")
    if wrong:
        sizes = ", ".join(f"{row.size_bytes} B ({row.wrong})" for row in wrong[:5])
        parts.append(f"wrong elements at {len(wrong)} size(s): {sizes}" + (" ..." if len(wrong) > 5 else ""))
    return "; ".join(parts) or None


def spread(values: Iterable[float]) -> dict[str, float]:
    """Median and spread of per-iteration times (quantiles by the exclusive method, as
    statistics.quantiles computes them; with fewer than 2 values min = max = median)."""
    values = sorted(values)
    if not values:
        raise ValueError("no timed iteration")
    median = statistics.median(values)
    if len(values) < 2:
        p25 = p75 = median
    else:
        p25, _, p75 = statistics.quantiles(values, n=4)
    return {"median": median, "min": values[0], "p25": p25, "p75": p75, "max": values[-1]}
