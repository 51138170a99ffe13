"""nccl-tests' text output (a `*_perf` binary's, through any launcher) read into the comm stage's
rows (kit.comm.sweep): the header says which columns a row has, a launcher's tags and NCCL's
own log lines are left aside, and a run that printed no row or wrong values says so.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel

from kit.comm.sweep import CommRow, Timing, data_failure


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
_RANK_LINE = re.compile(
    r"^#\s*Rank\s+(\d+)\b.*?(?:\bon\s+(?P<host>\S+)\s+)?\bdevice\s+\d+\s+\[[^\]]*\]\s+(?P<device>.+?)\s*$"
)
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
        group = columns[first : starts[1]]
    else:
        group = [columns[first]]
        for column in columns[first + 1 :]:
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
        values = tokens[start + index * width : start + (index + 1) * width]
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
        text = text[: log.start()]
    if _NCCL_NOISE.match(text):
        return None
    if not text.lstrip().startswith("#"):
        text = _EMBEDDED_RANK.sub(" ", text)
    return text if text.strip() else None


def _looks_like_row_start(tokens: list[str]) -> bool:
    return (
        len(tokens) >= 3
        and tokens[0].isdigit()
        and tokens[1].isdigit()
        and bool(_DTYPE.match(tokens[2]))
        and not _NUMBER.match(tokens[2])
    )


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
