"""The collectives the comm stage measures, their bus bandwidth, and the sizes it sweeps.

Bus bandwidth follows nccl-tests (doc/PERFORMANCE.md of NVIDIA/nccl-tests, "Bus bandwidth" and
its summary of correction factors; the same factors are in the `*GetBw` functions of its
src/*.cu): busbw = algbw x factor(n), algbw = S / t, where S is the size of the whole
collective in bytes as nccl-tests prints it (for AllGather the gathered output, for
ReduceScatter the scattered input, for AlltoAll one rank's whole buffer) and n the number of
ranks. The factor turns algbw into the traffic one rank's link carries, so busbw can be held
against the link rate whatever the number of ranks.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

NCCL_TESTS_PERFORMANCE_DOC = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"
GB = 1e9  # nccl-tests reports GB/s in 10^9 bytes per second, as link datasheets do


class Collective(BaseModel):
    """One collective: how nccl-tests names it, and how one rank's link traffic relates to S."""

    model_config = ConfigDict(frozen=True)

    name: str
    label: str
    nccl_tests_binary: str
    # factor(n) = numerator(n) / n; see bus_bandwidth_factor.
    factor: Literal["2(n-1)/n", "(n-1)/n", "1"]
    # S spread over the ranks (count per rank = S / n), or one buffer of S on every rank.
    split_over_ranks: bool
    # The torch.distributed call is in-place (all_reduce, reduce, broadcast) or out-of-place.
    torch_placement: Literal["in-place", "out-of-place"]


COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective(
            name="all_reduce",
            label="AllReduce",
            nccl_tests_binary="all_reduce_perf",
            factor="2(n-1)/n",
            split_over_ranks=False,
            torch_placement="in-place",
        ),
        Collective(
            name="all_gather",
            label="AllGather",
            nccl_tests_binary="all_gather_perf",
            factor="(n-1)/n",
            split_over_ranks=True,
            torch_placement="out-of-place",
        ),
        Collective(
            name="reduce_scatter",
            label="ReduceScatter",
            nccl_tests_binary="reduce_scatter_perf",
            factor="(n-1)/n",
            split_over_ranks=True,
            torch_placement="out-of-place",
        ),
        Collective(
            name="reduce",
            label="Reduce",
            nccl_tests_binary="reduce_perf",
            factor="1",
            split_over_ranks=False,
            torch_placement="in-place",
        ),
        Collective(
            name="broadcast",
            label="Broadcast",
            nccl_tests_binary="broadcast_perf",
            factor="1",
            split_over_ranks=False,
            torch_placement="in-place",
        ),
        Collective(
            name="alltoall",
            label="AlltoAll",
            nccl_tests_binary="alltoall_perf",
            factor="(n-1)/n",
            split_over_ranks=True,
            torch_placement="out-of-place",
        ),
    )
}


def collective(name: str) -> Collective:
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {name!r} (known: {', '.join(COLLECTIVES)})")
    return COLLECTIVES[name]


def bus_bandwidth_factor(name: str, ranks: int) -> float:
    """nccl-tests' correction factor (PERFORMANCE.md, "Summary"): AllReduce 2(n-1)/n;
    ReduceScatter, AllGather and AlltoAll (n-1)/n; Broadcast and Reduce 1."""
    if ranks < 1:
        raise ValueError("a collective needs at least one rank")
    factor = collective(name).factor
    if factor == "2(n-1)/n":
        return 2 * (ranks - 1) / ranks
    if factor == "(n-1)/n":
        return (ranks - 1) / ranks
    return 1.0


def algorithm_bandwidth_gbps(size_bytes: int, seconds: float) -> float:
    """algbw = S / t (PERFORMANCE.md, "Algorithm bandwidth"), in GB/s."""
    if seconds <= 0:
        raise ValueError("a collective takes a positive time")
    return size_bytes / seconds / GB


def bus_bandwidth_gbps(name: str, size_bytes: int, seconds: float, ranks: int) -> float:
    return algorithm_bandwidth_gbps(size_bytes, seconds) * bus_bandwidth_factor(name, ranks)


def message_sizes(min_bytes: int, max_bytes: int, step_factor: int) -> list[int]:
    """min, min x f, min x f^2, ... up to max, as nccl-tests' -b/-e/-f walk them."""
    if min_bytes < 1 or max_bytes < min_bytes or step_factor < 2:
        raise ValueError(f"no sweep from {min_bytes} to {max_bytes} by x{step_factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= step_factor
    return sizes


class BufferLayout(BaseModel):
    """What one size of the sweep means for one collective on n ranks."""

    size_bytes: int  # S, as nccl-tests prints it
    count: int  # elements, per rank where the collective splits S over the ranks (as printed)
    element_bytes: int


def buffer_layout(name: str, requested_bytes: int, ranks: int, element_bytes: int) -> BufferLayout:
    """nccl-tests' element counts (src/*.cu, `*GetCollByteCount`): split collectives get
    S / n elements per rank and S is rounded down to a whole number of them. Unlike nccl-tests,
    the per-rank count is not rounded down to 16 bytes and never drops below one element, so
    every size of the sweep moves data."""
    elements = max(1, requested_bytes // element_bytes)
    if collective(name).split_over_ranks:
        per_rank = max(1, elements // ranks)
        return BufferLayout(size_bytes=per_rank * ranks * element_bytes, count=per_rank, element_bytes=element_bytes)
    return BufferLayout(size_bytes=elements * element_bytes, count=elements, element_bytes=element_bytes)
