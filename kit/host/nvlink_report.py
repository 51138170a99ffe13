"""`nvidia-smi nvlink -s` (each link's speed, or <inactive>) and `nvidia-smi nvlink -e` (each
link's replay, recovery and CRC error counters) read into each GPU's links. Pure: recorded
outputs of real machines test it (tests/fixtures/health).

Both list GPUs as "GPU <index>: <name> (UUID: ...)" (newer drivers may leave out the UUID), each
followed by its links, indented with spaces or a tab. A GPU all of whose links are down is
printed with NVML's "Unable to retrieve NVLink information as all links are inActive" instead
of links (leptonai/gpud issue 1085, on a B200).
"""

from __future__ import annotations

import re

from kit.host.health import NvLinkLink

GPU_LINE = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?\s*$")
STATUS_LINE = re.compile(r"^\s+Link (\d+): (?:(<inactive>)|(\d+(?:\.\d+)?) GB/s)\s*$")
COUNTER_LINE = re.compile(r"^\s+Link (\d+): (Replay|Recovery|CRC) Errors: (\d+)\s*$")
ALL_INACTIVE = "all links are inactive"
COUNTER_FIELDS = {"Replay": "replay_errors", "Recovery": "recovery_errors", "CRC": "crc_errors"}


def _by_gpu(text: str) -> dict[int, list[str]]:
    """Each GPU's lines, by its index."""
    found: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = GPU_LINE.match(line)
        if header:
            current = found.setdefault(int(header.group(1)), [])
        elif current is not None and line.strip():
            current.append(line)
    return found


def parse_link_status(text: str) -> dict[int, list[NvLinkLink]]:
    """GPU index -> its links, active or not. A GPU that NVML says has every link down is listed
    with no link and said so by `all_inactive_gpus`."""
    links: dict[int, list[NvLinkLink]] = {}
    for gpu, lines in _by_gpu(text).items():
        found = []
        for line in lines:
            match = STATUS_LINE.match(line)
            if match:
                speed = match.group(3)
                found.append(
                    NvLinkLink(
                        link=int(match.group(1)),
                        active=match.group(2) is None,
                        speed_gb_s=float(speed) if speed else None,
                    )
                )
        links[gpu] = found
    return links


def all_inactive_gpus(text: str) -> list[int]:
    """The GPUs for which NVML answered that all their links are inactive."""
    return [gpu for gpu, lines in _by_gpu(text).items() if any(ALL_INACTIVE in line.lower() for line in lines)]


def add_error_counters(links: dict[int, list[NvLinkLink]], text: str) -> dict[int, list[NvLinkLink]]:
    """The links of `parse_link_status` with the counters of `nvidia-smi nvlink -e` added; a
    link the status did not list (none was read) is added as active, since only an active link
    reports counters."""
    merged = {gpu: {link.link: link.model_copy() for link in found} for gpu, found in links.items()}
    for gpu, lines in _by_gpu(text).items():
        for line in lines:
            match = COUNTER_LINE.match(line)
            if not match:
                continue
            number = int(match.group(1))
            link = merged.setdefault(gpu, {}).setdefault(number, NvLinkLink(link=number, active=True))
            setattr(link, COUNTER_FIELDS[match.group(2)], int(match.group(3)))
    return {gpu: [found[number] for number in sorted(found)] for gpu, found in merged.items()}
