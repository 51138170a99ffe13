"""Collecting the health section of the fingerprint on this host: `nvidia-smi -q`, `nvidia-smi
nvlink -s` and `-e`, the kernel log's Xids, and `dcgmi diag` at the level asked for. Thin: the
commands run here, what their outputs say is read by the pure parsers and judged against the
catalog (kit.host.health_checks). It never raises: a command that cannot answer says why.
"""

from __future__ import annotations

from kit.host.dcgm_diag import DiagParseError, parse_diag
from kit.host.health import DcgmDiag, GpuHealth, HostHealth, XidLog
from kit.host.health_checks import judged
from kit.host.nvidia_smi_query import QueryParseError, parse_query
from kit.host.nvlink_report import add_error_counters, all_inactive_gpus, parse_link_status
from kit.host.this_host import run_command
from kit.host.xid_events import parse_xid_lines

QUERY_TIMEOUT_S = 120
# dcgmi diag's levels last about 1 min, 2 min, 15 min and an hour or more (DCGM's user guide).
DCGM_TIMEOUT_S = {1: 600, 2: 1200, 3: 3600, 4: 3 * 3600}
KERNEL_LOGS = (["dmesg", "-T"], ["journalctl", "-k", "-b", "--no-pager"])


def _with_nvlink(gpus: list[GpuHealth], commands: dict[str, str]) -> list[GpuHealth]:
    """Each GPU with its NVLink links (status and error counters), by nvidia-smi's index."""
    status, problem = run_command(["nvidia-smi", "nvlink", "-s"], QUERY_TIMEOUT_S)
    commands["nvidia-smi nvlink -s"] = problem or "ok"
    if problem:
        return gpus
    links = parse_link_status(status)
    down = set(all_inactive_gpus(status))
    counters, problem = run_command(["nvidia-smi", "nvlink", "-e"], QUERY_TIMEOUT_S)
    commands["nvidia-smi nvlink -e"] = problem or "ok"
    if not problem:
        links = add_error_counters(links, counters)
    return [
        gpu.model_copy(update={"nvlink": links.get(gpu.index) or None, "nvlink_all_inactive": gpu.index in down})
        for gpu in gpus
    ]


def read_kernel_log(commands: dict[str, str]) -> XidLog:
    """The Xids since boot from the first kernel log this user may read (dmesg may be
    restricted to root: kernel.dmesg_restrict; the journal to its groups)."""
    problems = []
    for argv in KERNEL_LOGS:
        text, problem = run_command(argv, QUERY_TIMEOUT_S)
        commands[" ".join(argv)] = problem or "ok"
        if problem is None:
            return XidLog(source=" ".join(argv), events=parse_xid_lines(text))
        problems.append(problem)
    return XidLog(unreadable="; ".join(problems))


def run_dcgm_diag(level: int, commands: dict[str, str]) -> DcgmDiag:
    """`dcgmi diag -r LEVEL -j`, or why it gave no result (DCGM not installed, no host engine).
    dcgmi exits non-zero when a test fails, with the document on its standard output."""
    argv = ["dcgmi", "diag", "-r", str(level), "-j"]
    text, problem = run_command(argv, DCGM_TIMEOUT_S.get(level, DCGM_TIMEOUT_S[4]))
    commands[" ".join(argv)] = problem or "ok"
    if problem and not text.strip():
        if "not found on PATH" in problem:
            problem = "dcgmi not found on PATH: DCGM is not installed (datacenter-gpu-manager)"
        return DcgmDiag(level=level, unavailable=problem)
    try:
        return parse_diag(text, level)
    except DiagParseError as exc:
        return DcgmDiag(level=level, unavailable=f"{exc} ({problem or 'exit 0'})")


def collect_health(dcgm_level: int | None = None) -> HostHealth:
    """This host's health section, judged against manifests/health.yaml."""
    commands: dict[str, str] = {}
    text, problem = run_command(["nvidia-smi", "-q"], QUERY_TIMEOUT_S)
    commands["nvidia-smi -q"] = problem or "ok"
    if problem:
        return judged(HostHealth(catalog="", not_applicable=f"no NVIDIA GPU to check ({problem})", commands=commands))
    try:
        driver, gpus = parse_query(text)
    except QueryParseError as exc:
        return judged(HostHealth(catalog="", not_applicable=f"nvidia-smi -q: {exc}", commands=commands))
    if not gpus:
        return judged(HostHealth(catalog="", driver_version=driver, not_applicable="nvidia-smi -q lists no GPU"))
    health = HostHealth(
        catalog="",
        driver_version=driver,
        gpus=_with_nvlink(gpus, commands),
        xid=read_kernel_log(commands),
        dcgm=run_dcgm_diag(dcgm_level, commands) if dcgm_level else None,
        commands=commands,
    )
    return judged(health)
