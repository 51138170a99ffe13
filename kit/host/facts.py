"""The host's own words as typed facts: /proc/cpuinfo and /proc/meminfo, /etc/os-release, an
InfiniBand port's rate, docker's runtimes, the container toolkit's version, CUDA's encoded
version. Pure: recorded outputs of real machines test them.
"""

from __future__ import annotations

import re

from kit.host.fingerprint import CpuInfo


def cuda_version_text(encoded: int) -> str:
    """NVML encodes the CUDA driver version as 1000 * major + 10 * minor (12040 -> "12.4")."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def parse_cpuinfo(text: str) -> CpuInfo:
    """Model, sockets and physical cores from /proc/cpuinfo (one block per logical CPU)."""
    blocks = [block for block in text.strip().split("\n\n") if block.strip()]
    models, sockets, cores = set(), set(), set()
    for block in blocks:
        fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in block.splitlines())}
        if "model name" in fields:
            models.add(fields["model name"])
        if "physical id" in fields:
            sockets.add(fields["physical id"])
            if "core id" in fields:
                cores.add((fields["physical id"], fields["core id"]))
    return CpuInfo(
        model=" / ".join(sorted(models)) or None,
        sockets=len(sockets) or None,
        physical_cores=len(cores) or None,
        logical_cpus=len(blocks) or None,
    )


def parse_meminfo_total(text: str) -> int:
    """MemTotal from /proc/meminfo, in bytes."""
    match = re.search(r"^MemTotal:\s+(\d+)\s+kB", text, re.MULTILINE)
    if not match:
        raise ValueError("no MemTotal line")
    return int(match.group(1)) * 1024


def parse_os_release(text: str) -> str:
    """PRETTY_NAME from /etc/os-release."""
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.MULTILINE)
    if not match:
        raise ValueError("no PRETTY_NAME line")
    return match.group(1)


def parse_ib_rate(text: str) -> float:
    """Gb/s from a sysfs port rate such as "400 Gb/sec (4X NDR)" or "2.5 Gb/sec (1X SDR)"."""
    match = re.match(r"^\s*([\d.]+)\s*Gb/sec", text)
    if not match:
        raise ValueError(f"unrecognised rate {text.strip()!r}")
    return float(match.group(1))


def docker_runtimes(info: dict) -> tuple[list[str], str | None]:
    """Registered runtimes and the default one from the engine's /info (the SDK's `info()`)."""
    return sorted(info.get("Runtimes") or {}), info.get("DefaultRuntime")


def parse_toolkit_version(text: str) -> str:
    """The version from `nvidia-ctk --version` or `nvidia-container-cli --version`."""
    match = re.search(r"(\d+\.\d+\.\d+)", text)
    if not match:
        raise ValueError(f"no version in {text.strip()[:80]!r}")
    return match.group(1)
