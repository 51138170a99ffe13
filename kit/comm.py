"""Collective communication, host side: bus bandwidth, the size sweep, nccl-tests output as rows,
and the link rate a bus bandwidth cannot exceed (the comm stage's figures: kit/stages/comm.py).

Bus bandwidth follows nccl-tests (doc/PERFORMANCE.md of NVIDIA/nccl-tests, "Bus bandwidth" and
its summary of correction factors; the same factors are in the `*GetBw` functions of its
src/*.cu): busbw = algbw x factor(n), algbw = S / t, where S is the size of the whole
collective in bytes as nccl-tests prints it (for AllGather the gathered output, for
ReduceScatter the scattered input, for AlltoAll one rank's whole buffer) and n the number of
ranks. The factor turns algbw into the traffic one rank's link carries, so busbw can be held
against the link rate whatever the number of ranks.

No torch here: the in-process measurement lives in kit/workloads/comm.py and returns a
`CommSweep`; this module reads it, and nccl-tests' text output, into the same typed rows.
"""

from __future__ import annotations

import math
import re
import statistics
import subprocess
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from kit.hardware import GpuSpec, HardwareTable, load_hardware

if TYPE_CHECKING:
    from kit.fingerprint import NetworkInfo

NCCL_TESTS_PERFORMANCE_DOC = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"
GB = 1e9  # nccl-tests reports GB/s in 10^9 bytes per second, as link datasheets do


# ---------------------------------------------------------------------------------------------
# Collectives and their bus-bandwidth factors
# ---------------------------------------------------------------------------------------------


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
        Collective(name="all_reduce", label="AllReduce", nccl_tests_binary="all_reduce_perf",
                   factor="2(n-1)/n", split_over_ranks=False, torch_placement="in-place"),
        Collective(name="all_gather", label="AllGather", nccl_tests_binary="all_gather_perf",
                   factor="(n-1)/n", split_over_ranks=True, torch_placement="out-of-place"),
        Collective(name="reduce_scatter", label="ReduceScatter", nccl_tests_binary="reduce_scatter_perf",
                   factor="(n-1)/n", split_over_ranks=True, torch_placement="out-of-place"),
        Collective(name="reduce", label="Reduce", nccl_tests_binary="reduce_perf",
                   factor="1", split_over_ranks=False, torch_placement="in-place"),
        Collective(name="broadcast", label="Broadcast", nccl_tests_binary="broadcast_perf",
                   factor="1", split_over_ranks=False, torch_placement="in-place"),
        Collective(name="alltoall", label="AlltoAll", nccl_tests_binary="alltoall_perf",
                   factor="(n-1)/n", split_over_ranks=True, torch_placement="out-of-place"),
    )
}  # fmt: skip


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


# ---------------------------------------------------------------------------------------------
# The message-size sweep
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Measured rows
# ---------------------------------------------------------------------------------------------


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

    interconnect: str | None = None  # kit.fingerprint.TopologyClass.interconnect
    gpu_count: int | None = None
    label: str | None = None
    # Max PCIe generation and width the GPUs can train at in this host (nvidia-smi
    # pcie.link.gen.max / pcie.link.width.max), the slowest GPU's.
    pcie_generation: int | None = None
    pcie_lanes: int | None = None
    unavailable: str | None = None


class CommSweep(BaseModel):
    """The details of one rank sample of a comm case: the rows and how they were measured."""

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


# ---------------------------------------------------------------------------------------------
# nccl-tests output
# ---------------------------------------------------------------------------------------------


class NcclTestsOutput(BaseModel):
    """One run of a `*_perf` binary, read from its text output."""

    rows: list[CommRow]
    columns: list[str] | None = None  # the header as printed; None if no header line was seen
    ranks: list[int] = []  # from the "# Rank N ... on HOST device ..." lines
    rank_hosts: list[str] = []  # the host each of those ranks ran on, as it printed it ("" where it did not)
    devices: list[str] = []
    settings: str | None = None  # the "# nThread ... nGpus ..." line
    out_of_bounds: int | None = None
    out_of_bounds_failed: bool = False
    avg_busbw_gbps: float | None = None
    unparsed: list[str] = []  # lines that look like rows (or parts of one) but could not be read

    @property
    def failure(self) -> str | None:
        return data_failure(self.rows, self.out_of_bounds, self.out_of_bounds_failed)


# Launchers that tag each line with its rank: Open MPI --tag-output "[1,0]<stdout>:",
# MPICH/Intel MPI -prepend-rank "[0] " (also inside a line, at each write of the program),
# Slurm srun --label " 0: ", pdsh-style "host: ".
_LAUNCHER_TAG = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\[\d+\]|\d+:(?=\s)|[\w.\-]+:(?=\s))\s?")
_EMBEDDED_RANK = re.compile(r"\[\d+\]")
# NCCL's debug lines: "host:pid:tid [dev] NCCL INFO ..." or "host:pid:tid [dev] file.cc:123 NCCL WARN".
_NCCL_LOG = re.compile(r"(?:\S+:\d+:\d+\s+)?\[\d+\]\s+(?:\S+:\d+\s+)?NCCL (?:INFO|WARN|TRACE|ERROR)")
_NCCL_NOISE = re.compile(r"^\s*NCCL version\b")
_HEADER = re.compile(r"^#?\s*size\s+count\s+type\b")
_OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
_AVG_BUSBW = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\b.*?(?:\bon\s+(?P<host>\S+)\s+)?\bdevice\s+\d+\s+\[[^\]]*\]\s+(?P<device>.+?)\s*$")
_SETTINGS = re.compile(r"^#?\s*nThread\s+\d+\s+nGpus\b")
_DTYPE = re.compile(r"^[A-Za-z][\w]*$")
_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$|^-?nan$|^-?inf$|^N/A$", re.IGNORECASE)
_GROUP_START = ("time", "cputime")
_GROUP_COLUMNS = ("algbw", "busbw", "#wrong", "error", "i_min", "i_max", "i_p99", "i_cv%")


class _Layout(BaseModel):
    """Where the fields of a row are: the leading columns, then one or two groups of timings."""

    prefix: list[str]
    group: list[str]  # column names of one group, starting with time/cputime
    groups: int
    wrong_is_count: bool

    @property
    def width(self) -> int:
        return len(self.prefix) + self.groups * len(self.group)


def _layout_from_header(columns: list[str]) -> _Layout | None:
    starts = [i for i, column in enumerate(columns) if column in _GROUP_START]
    if not starts:
        return None
    first = starts[0]
    if len(starts) > 1:
        group = columns[first:starts[1]]
    else:
        group = [columns[first]]
        for column in columns[first + 1:]:
            if column not in _GROUP_COLUMNS:
                break
            group.append(column)
    if not {"algbw", "busbw"} <= set(group):
        return None
    return _Layout(prefix=columns[:first], group=group, groups=min(len(starts), 2), wrong_is_count="error" not in group)


def _inferred_layout(tokens: list[str]) -> _Layout | None:
    """A whole row without a header: size, count, type, [redop], [root], then out-of-place and
    in-place (time, algbw, busbw, wrong) each. nccl-tests since August 2022 prints both redop
    and root, with "#wrong" counts; older builds left out one or both (AllGather had neither)
    and printed the "error" deviation instead."""
    prefix = ["size", "count", "type"]
    rest = tokens[3:]
    if rest and not _NUMBER.match(rest[0]):
        prefix.append("redop")
        rest = rest[1:]
    if len(rest) == 9 and re.fullmatch(r"-?\d+", rest[0]):
        prefix.append("root")
        rest = rest[1:]
    if len(rest) != 8:
        return None
    new_format = "redop" in prefix and "root" in prefix
    wrong = "#wrong" if new_format else "error"
    return _Layout(prefix=prefix, group=["time", "algbw", "busbw", wrong], groups=2, wrong_is_count=new_format)


def _timing(names: list[str], values: list[str], wrong_is_count: bool) -> Timing | None:
    fields = dict(zip(names, values))
    time_key = "time" if "time" in fields else "cputime"
    try:
        time_us, algbw, busbw = (float(fields[key]) for key in (time_key, "algbw", "busbw"))
    except (KeyError, ValueError):
        return None
    if not all(math.isfinite(v) for v in (time_us, algbw, busbw)):
        return None
    wrong_text = fields.get("#wrong", fields.get("error"))
    timing = Timing(time_us=time_us, algbw_gbps=algbw, busbw_gbps=busbw)
    if wrong_text is None or wrong_text.upper() == "N/A":
        return timing
    value = float(wrong_text)
    if wrong_is_count:
        timing.wrong = int(value)  # "%6g": large counts come out as 1.04858e+06
    else:
        timing.max_error = value
    return timing


def _row(tokens: list[str], layout: _Layout) -> CommRow | None:
    if len(tokens) < layout.width:
        return None
    lead = dict(zip(layout.prefix, tokens))
    try:
        size, count = int(lead["size"]), int(lead["count"])
        root = int(lead["root"]) if "root" in lead else None
    except (KeyError, ValueError):
        return None
    start = len(layout.prefix)
    width = len(layout.group)
    timings = []
    for index in range(layout.groups):
        values = tokens[start + index * width:start + (index + 1) * width]
        timing = _timing(layout.group, values, layout.wrong_is_count)
        if timing is None:
            return None
        timings.append(timing)
    redop = lead.get("redop")
    return CommRow(
        size_bytes=size,
        count=count,
        dtype=lead["type"],
        redop=None if redop in (None, "none", "-") else redop,
        root=None if root is None or root < 0 else root,
        out_of_place=timings[0],
        in_place=timings[1] if len(timings) > 1 else None,
    )


def _clean(line: str) -> str | None:
    """The nccl-tests part of a line: launcher tags and NCCL debug output removed; None if
    nothing of nccl-tests is left."""
    text = line.rstrip("\n")
    while True:
        stripped = _LAUNCHER_TAG.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    log = _NCCL_LOG.search(text)
    if log:
        text = text[:log.start()]
    if _NCCL_NOISE.match(text):
        return None
    if not text.lstrip().startswith("#"):
        text = _EMBEDDED_RANK.sub(" ", text)
    return text if text.strip() else None


def _looks_like_row_start(tokens: list[str]) -> bool:
    return (len(tokens) >= 3 and tokens[0].isdigit() and tokens[1].isdigit() and bool(_DTYPE.match(tokens[2]))
            and not _NUMBER.match(tokens[2]))  # fmt: skip


# A run begins with its settings line, preceded in nccl-tests >= 2.14 by "Collective test starting".
_RUN_START = re.compile(r"^#?\s*(?:Collective test starting\b|nThread\s+\d+\s+nGpus\b)")


def split_runs(text: str) -> list[str]:
    """The runs of a log that holds several one after another (a script looping over the
    binaries, a repeated run), each as its own text; what precedes a run's settings line (its
    command line) stays with the run before."""
    runs: list[list[str]] = [[]]
    settings_seen = False
    for line in text.splitlines():
        cleaned = (_clean(line) or "").strip()
        if _RUN_START.match(cleaned):
            if settings_seen:
                runs.append([])
                settings_seen = False
            settings_seen = settings_seen or bool(_SETTINGS.match(cleaned))
        runs[-1].append(line)
    return ["\n".join(lines) + "\n" for lines in runs if any(line.strip() for line in lines)]


def parse_nccl_tests_runs(text: str) -> list[NcclTestsOutput]:
    """Each run of a log, read on its own (parse_nccl_tests reads a log as one whole)."""
    return [parse_nccl_tests(run) for run in split_runs(text)]


def parse_nccl_tests(text: str) -> NcclTestsOutput:
    """Read the table of an nccl-tests (or rccl-tests) run, whatever launcher wrapped it.

    Robust to: NCCL INFO/WARN lines between or inside rows, rank tags of MPI and Slurm
    launchers (also repeated inside a row), the header of every nccl-tests version (with or
    without redop/root, "#wrong" or the old "error" column, "cputime", per-iteration columns,
    a timestamp column), and output with no header line at all. A row split over several lines
    by debug output is joined; anything that looks like a row but cannot be read is kept in
    `unparsed`, never silently dropped.
    """
    rows: list[CommRow] = []
    unparsed: list[str] = []
    layout: _Layout | None = None
    columns: list[str] | None = None
    ranks: list[int] = []
    devices: list[str] = []
    hosts: list[str] = []
    settings = None
    out_of_bounds, failed, avg_busbw = None, False, None
    pending: list[str] = []

    def flush_pending() -> None:
        if pending:
            unparsed.append(" ".join(pending))
            pending.clear()

    for line in text.splitlines():
        cleaned = _clean(line)
        if cleaned is None:
            continue
        stripped = cleaned.strip()
        if match := _OUT_OF_BOUNDS.search(stripped):
            flush_pending()
            # Several runs in one log each end with a summary: the counts add up, and one
            # FAILED fails the whole (a later "0 OK" never hides it).
            out_of_bounds = (out_of_bounds or 0) + int(match.group(1))
            failed = failed or match.group(2) == "FAILED"
            continue
        if match := _AVG_BUSBW.search(stripped):
            try:
                avg_busbw = float(match.group(1))
            except ValueError:
                avg_busbw = None
            continue
        if _HEADER.match(stripped):
            flush_pending()
            columns = stripped.lstrip("#").split()
            layout = _layout_from_header(columns)
            continue
        if match := _RANK_LINE.match(stripped):
            ranks.append(int(match.group(1)))
            devices.append(match.group("device"))
            hosts.append(match.group("host") or "")
            continue
        if _SETTINGS.match(stripped):
            settings = stripped.lstrip("# ")
            continue
        if stripped.startswith("#"):
            continue
        tokens = stripped.split()
        if _looks_like_row_start(tokens):
            flush_pending()
            pending.extend(tokens)
        elif pending and all(_NUMBER.match(token) for token in tokens):
            pending.extend(tokens)  # the rest of a row that debug output interrupted
        elif tokens and all(_NUMBER.match(token) for token in tokens):
            unparsed.append(stripped)  # a fragment whose row started elsewhere
            continue
        else:
            continue
        row_layout = layout or _inferred_layout(pending)
        if row_layout is None:
            if layout is None and len(pending) >= 13:
                flush_pending()
            continue
        if len(pending) >= row_layout.width:
            row = _row(pending, row_layout)
            if row is None:
                unparsed.append(" ".join(pending))
            else:
                rows.append(row)
            pending.clear()
    flush_pending()
    return NcclTestsOutput(
        rows=rows,
        columns=columns,
        ranks=sorted(set(ranks)),
        rank_hosts=[host for _, host in sorted(dict(zip(ranks, hosts)).items())],
        devices=devices,
        settings=settings,
        out_of_bounds=out_of_bounds,
        out_of_bounds_failed=failed,
        avg_busbw_gbps=avg_busbw,
        unparsed=unparsed,
    )


# ---------------------------------------------------------------------------------------------
# The link rate a bus bandwidth cannot exceed
# ---------------------------------------------------------------------------------------------

# PCI Express per lane and direction: transfer rate x encoding / 8 bits. Gen1-2: 2.5 and 5 GT/s,
# 8b/10b; Gen3-5: 8, 16, 32 GT/s, 128b/130b (the PCI-SIG base specifications' rates, as tabled
# e.g. at https://hpc-notes.pages.dev/reference/pcie). Gen6 (PAM4, FLIT mode) is not tabled.
PCIE_GB_PER_S_PER_LANE = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
}
# NVLink SHARP (NVLS, NVLink 4 and later behind NVSwitch) reduces and multicasts inside the
# switch; busbw then is no wire bandwidth: 8 x H100 reach ~480 GB/s AllReduce busbw against a
# 450 GB/s per-direction line rate (NVIDIA/nccl-tests#212, a maintainer's answer; #272 on H200).
NVLS_MIN_GENERATION = 4
NVLS_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


class BusBandwidthBound(BaseModel):
    """The most a GPU's link carries per direction; busbw above it is impossible."""

    gbps: float | None
    link: str | None = None  # which link bounds it, and from where its rate comes
    reason: str | None = None  # why there is no bound

    @property
    def known(self) -> bool:
        return self.gbps is not None


def _no_bound(reason: str) -> BusBandwidthBound:
    return BusBandwidthBound(gbps=None, reason=reason)


def busbw_bound(
    collective_name: str,
    ranks: int,
    interconnect: str | None,
    host_gpus: int | None,
    spec: GpuSpec | None,
    pcie_generation: int | None = None,
    pcie_lanes: int | None = None,
) -> BusBandwidthBound:
    """The per-direction line rate of the link that carries the traffic between a host's GPUs.

    `interconnect` is the fingerprint's topology class (nvlink-all-pairs, nvlink-partial,
    pcie-only, single-gpu); `spec` the GPU's entry in hardware.yaml; the PCIe generation and
    lanes measured on the host (nvidia-smi's maximum link) take precedence over hardware.yaml's.
    With NVLink the bound is NVLink's rate (assuming NCCL routes GPU-to-GPU traffic over NVLink
    where there is NVLink, not over PCIe as well); with PCIe only, the GPU's own PCIe link.
    Unknown inputs give no bound, and the bound says why.
    """
    collective(collective_name)
    if ranks <= 1:
        return _no_bound("one rank: no data crosses a link")
    if interconnect is None:
        return _no_bound("the topology of the GPUs was not recorded")
    if interconnect == "single-gpu":
        return _no_bound("one GPU in the host: no GPU-to-GPU link")
    if host_gpus is not None and ranks > host_gpus:
        return _no_bound(f"{ranks} ranks on a host of {host_gpus} GPUs: the network bounds it, which the kit does not model")
    if spec is None:
        return _no_bound("the GPU is not in manifests/hardware.yaml")
    if interconnect in ("nvlink-all-pairs", "nvlink-partial"):
        rate = spec.interconnect_bidirectional_gb_per_s.value
        generation = spec.interconnect_generation.value
        if rate is None:
            return _no_bound(f"no NVLink rate for {spec.model} in hardware.yaml ({spec.interconnect_bidirectional_gb_per_s.note})")
        if (interconnect == "nvlink-all-pairs" and generation is not None and generation >= NVLS_MIN_GENERATION
                and collective_name in NVLS_COLLECTIVES):  # fmt: skip
            return _no_bound(
                f"NVLink {generation}: NCCL can use NVLink SHARP (in-switch reduction and multicast) for "
                f"{collective_name}, with which busbw is not a wire bandwidth and can exceed the line rate "
                "(NVIDIA/nccl-tests#212)"
            )
        partial = " (some GPU pairs only; rings that cross PCIe are slower)" if interconnect == "nvlink-partial" else ""
        return BusBandwidthBound(
            gbps=rate / 2,
            link=f"NVLink{f' {generation}' if generation else ''}{partial}: {rate:g} GB/s per GPU both directions, "
                 f"{rate / 2:g} GB/s each way ({spec.model}, hardware.yaml)",
        )  # fmt: skip
    if interconnect == "pcie-only":
        source = "measured on the host (nvidia-smi, maximum link)"
        generation, lanes = pcie_generation, pcie_lanes
        if generation is None or lanes is None:
            generation = generation or spec.pcie_generation.value
            lanes = lanes or spec.pcie_lanes.value
            source = "hardware.yaml"
        if generation is None or lanes is None:
            return _no_bound(f"the PCIe generation or width of {spec.model} is known neither from the host nor from hardware.yaml")
        if generation not in PCIE_GB_PER_S_PER_LANE:
            return _no_bound(f"PCIe generation {generation} has no tabled rate in kit/comm.py")
        gbps = PCIE_GB_PER_S_PER_LANE[generation] * lanes
        return BusBandwidthBound(gbps=gbps, link=f"PCIe Gen{generation} x{lanes}: {gbps:.1f} GB/s each way ({source})")
    return _no_bound(f"unrecognised interconnect {interconnect!r}")


def sweep_bound(sweep: CommSweep, device: str, hardware: HardwareTable | None = None) -> BusBandwidthBound:
    """The bound for a recorded sweep, from what its workload saw of the host."""
    if device != "cuda":
        return _no_bound("CPU processes exchange data through host memory (gloo): no GPU link applies")
    if sweep.topology is None or sweep.topology.interconnect is None:
        reason = sweep.topology.unavailable if sweep.topology else None
        return _no_bound("the topology of the GPUs was not recorded" + (f" ({reason})" if reason else ""))
    names = sorted(set(sweep.device_names))
    if len(names) != 1:
        return _no_bound(f"GPU model not recorded or mixed ({', '.join(names) or 'none'})")
    spec = (hardware or load_hardware()).lookup(names[0])
    return busbw_bound(
        sweep.collective, sweep.ranks, sweep.topology.interconnect, sweep.topology.gpu_count, spec,
        sweep.topology.pcie_generation, sweep.topology.pcie_lanes,
    )  # fmt: skip


def internode_bound(device: str, node_networks: dict[str, NetworkInfo | None]) -> BusBandwidthBound:
    """The bound of a sweep whose ranks span nodes: the network between them, from each node's
    fingerprint (`None`: the node has none). A ring's bus bandwidth is the traffic each node
    sends out per direction, spread over its NICs, so the bound is the slowest node's active
    RDMA ports together, each way (Gb/s / 8). It assumes no reduction in the network (SHARP):
    with it, NCCL's busbw is no wire bandwidth. Ethernet NICs are not read, and a CPU sweep
    (gloo, over TCP) uses no RDMA port: both have no known bound, never an invented one."""
    if device != "cuda":
        return _no_bound("CPU processes exchange data over TCP (gloo) on whatever network joins the nodes; "
                         "the kit does not read its rate")  # fmt: skip
    per_node = {}
    for node, network in node_networks.items():
        if network is None:
            return _no_bound(f"node {node} has no fingerprint")
        active = [port for port in network.rdma_ports if port.state == "ACTIVE" and port.rate_gbps]
        if not active:
            return _no_bound(f"no active RDMA port in {node}'s fingerprint ({network.unavailable or 'none up'}); "
                             "Ethernet rates are not read")  # fmt: skip
        per_node[node] = active
    if not per_node:
        return _no_bound("the nodes the ranks ran on are not recorded")
    node, ports = min(per_node.items(), key=lambda item: sum(port.rate_gbps for port in item[1]))
    total = sum(port.rate_gbps for port in ports)
    return BusBandwidthBound(
        gbps=total / 8,
        link=f"the network: {node}'s {len(ports)} active RDMA port(s), {total:g} Gb/s together, {total / 8:g} GB/s each "
             "way (the slowest node, from its fingerprint; without in-network reduction)",
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# GPU links, as nvidia-smi shows them where the case runs
# ---------------------------------------------------------------------------------------------


def _nvidia_smi(*args: str) -> str:
    done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip()[:300] or f"exit code {done.returncode}")
    return done.stdout


def topology_facts(ranks: int) -> TopologyFacts:
    """The topology class of the host (kit.fingerprint's reading of `nvidia-smi topo -m`) and
    the slowest maximum PCIe link of its first `ranks` GPUs; what cannot be read is said."""
    from kit.fingerprint import classify_topology, parse_topology_matrix

    facts = TopologyFacts()
    try:
        topology = classify_topology(parse_topology_matrix(_nvidia_smi("topo", "-m")))
        facts.interconnect, facts.gpu_count, facts.label = topology.interconnect, topology.gpu_count, topology.label
    except Exception as exc:  # noqa: BLE001 - recorded, the bound then says it is unknown
        facts.unavailable = f"nvidia-smi topo -m: {type(exc).__name__}: {exc}"
        return facts
    try:
        query = "--query-gpu=pcie.link.gen.max,pcie.link.width.max"
        links = [line.split(",") for line in _nvidia_smi(query, "--format=csv,noheader,nounits").splitlines() if line.strip()]
        links = [(int(gen), int(width)) for gen, width in links[:ranks]]
        facts.pcie_generation = min(gen for gen, _ in links)
        facts.pcie_lanes = min(width for _, width in links)
    except Exception as exc:  # noqa: BLE001
        facts.unavailable = f"PCIe link query: {type(exc).__name__}: {exc}"
    return facts


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


__all__ = [
    "COLLECTIVES", "BufferLayout", "BusBandwidthBound", "CommRow", "CommSweep", "NcclTestsOutput", "Timing",
    "TopologyFacts", "algorithm_bandwidth_gbps", "buffer_layout", "bus_bandwidth_factor", "bus_bandwidth_gbps",
    "busbw_bound", "data_failure", "internode_bound", "message_sizes", "parse_nccl_tests", "parse_nccl_tests_runs", "split_runs",
    "spread", "sweep_bound", "topology_facts",
]  # fmt: skip

