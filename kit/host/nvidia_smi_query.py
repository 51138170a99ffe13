"""`nvidia-smi -q` (and `-q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`, the same layout with fewer
sections) read into each GPU's health readings. Pure: recorded outputs of real machines test it
(tests/fixtures/health).

The output is an indented tree, four spaces a level: `Key : value` lines, and headers whose
children follow one level deeper. Its words changed over driver releases, and every variant
seen on a real machine is read: "Clocks Throttle Reasons" (R535 renamed it "Clocks Event
Reasons"), "Ecc Mode" / "ECC Mode", "Power Readings" with "Power Limit" / "Enforced Power Limit"
(before R535) and "GPU Power Readings" with "Current Power Limit" (after), absolute "GPU Slowdown
Temp" (before) and the headroom "GPU T.Limit Temp" (after), SRAM uncorrectable errors split into
"Parity" and "SEC-DED" (Hopper drivers), and the per-location "Single Bit" / "Double Bit" ECC
tables of GPUs before Ampere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kit.host.health import GpuHealth

LINE = re.compile(r"^(?P<indent> *)(?P<key>\S.*?)(?:\s+: (?P<value>.*?))?\s*$")
GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")
NOT_A_VALUE = {"N/A", "[N/A]", "Unknown Error", "[Unknown Error]", "Not Supported", "[Not Supported]"}
# nvidia-smi's words for clock event reasons, in kit.host.clock_events' names.
CLOCK_EVENT_WORDS = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "Display Clock Setting": "display_clock_setting",
}


class QueryParseError(ValueError):
    """Text that is not `nvidia-smi -q` output."""


@dataclass
class Node:
    """One header of the tree: its `Key : value` lines and its sub-headers (the first of each name)."""

    values: dict[str, str] = field(default_factory=dict)
    children: dict[str, Node] = field(default_factory=dict)

    def child(self, *names: str) -> Node | None:
        """The first of `names` that is a sub-header."""
        return next((self.children[name] for name in names if name in self.children), None)

    def value(self, *names: str) -> str | None:
        """The first of `names` that has a value other than N/A."""
        for name in names:
            found = self.values.get(name)
            if found is not None and found not in NOT_A_VALUE:
                return found
        return None


@dataclass
class QueryOutput:
    """The log's header values and one tree per GPU, by its PCI address."""

    header: dict[str, str]
    gpus: list[tuple[str, Node]]


def parse_tree(text: str) -> QueryOutput:
    """Split the log into its header values and each GPU's tree."""
    header: dict[str, str] = {}
    gpus: list[tuple[str, Node]] = []
    stack: list[tuple[int, Node]] = []
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        match = LINE.match(raw)
        if match is None:
            continue
        indent, key, value = len(match["indent"]), match["key"], match["value"]
        gpu = GPU_HEADER.match(key) if indent == 0 else None
        if gpu is not None:
            root = Node()
            gpus.append((gpu.group(1), root))
            stack = [(0, root)]
            continue
        if indent == 0 or not stack:
            if value is not None:
                header[key] = value
            stack = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:
            continue
        parent = stack[-1][1]
        if value is None:
            node = Node()
            parent.children.setdefault(key, node)
            stack.append((indent, node))
        else:
            parent.values.setdefault(key, value)
    if not gpus and "Driver Version" not in header:
        raise QueryParseError("no 'Driver Version' and no 'GPU <bus id>' section: not nvidia-smi -q output")
    return QueryOutput(header=header, gpus=gpus)


def _number(text: str | None) -> float | None:
    """ "450.00 W" -> 450.0, "16x" -> 16, "41 C" -> 41; None for N/A."""
    if text is None:
        return None
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None


def _count(text: str | None) -> int | None:
    found = _number(text)
    return None if found is None else int(found)


def _flag(text: str | None, yes: tuple[str, ...] = ("Yes", "Enabled", "Active")) -> bool | None:
    if text is None:
        return None
    return text.strip() in yes


def _sum(counts: list[int | None]) -> int | None:
    """The total of the counts the GPU reported; None where it reported none."""
    known = [count for count in counts if count is not None]
    return sum(known) if known else None


def _ecc_counts(timescale: Node | None) -> tuple[int | None, int | None]:
    """(correctable, uncorrectable) of one timescale (Volatile or Aggregate), SRAM and DRAM
    together; GPUs before Ampere list per location under "Single Bit" and "Double Bit", whose
    "Total" counts them all."""
    if timescale is None:
        return None, None
    single, double = timescale.child("Single Bit"), timescale.child("Double Bit")
    if single is not None or double is not None:
        return (
            _count(single.value("Total")) if single else None,
            _count(double.value("Total")) if double else None,
        )
    correctable = [_count(v) for k, v in timescale.values.items() if "Correctable" in k and "Uncorrectable" not in k]
    uncorrectable = [_count(v) for k, v in timescale.values.items() if "Uncorrectable" in k]
    return _sum(correctable), _sum(uncorrectable)


def _clock_event_reasons(node: Node | None) -> list[str] | None:
    """The active reasons. The nested ones (HW Thermal Slowdown, printed under HW Slowdown, which
    has a value of its own) read as lines of the same header."""
    if node is None:
        return None
    return [
        CLOCK_EVENT_WORDS.get(words, words.lower().replace(" ", "_"))
        for words, state in node.values.items()
        if state == "Active"
    ]


def _temperatures(node: Node | None) -> tuple[int | None, int | None]:
    """The GPU's temperature and its headroom below the temperature where it slows down: the
    driver's own "GPU T.Limit Temp" where it prints one, else the absolute slowdown temperature
    less the current one."""
    if node is None:
        return None, None
    current = _count(node.value("GPU Current Temp"))
    headroom = _count(node.value("GPU T.Limit Temp"))
    if headroom is None:
        slowdown = _count(node.value("GPU Slowdown Temp"))
        headroom = slowdown - current if slowdown is not None and current is not None else None
    return current, headroom


def _gpu_health(index: int, bus_id: str, gpu: Node) -> GpuHealth:
    errors = gpu.child("ECC Errors")
    volatile = _ecc_counts(errors.child("Volatile") if errors else None)
    aggregate = _ecc_counts(errors.child("Aggregate") if errors else None)
    pages = gpu.child("Retired Pages")
    rows = gpu.child("Remapped Rows")
    link = gpu.child("PCI")
    link_info = link.child("GPU Link Info") if link else None
    generation = link_info.child("PCIe Generation") if link_info else None
    width = link_info.child("Link Width") if link_info else None
    power = gpu.child("GPU Power Readings", "Power Readings")
    ecc_mode = gpu.child("ECC Mode", "Ecc Mode")
    temperature, headroom = _temperatures(gpu.child("Temperature"))
    pending_pages = pages.value("Pending Page Blacklist", "Pending Page Retirement", "Pending") if pages else None
    return GpuHealth(
        index=index,
        pci_bus_id=bus_id,
        name=gpu.value("Product Name"),
        uuid=gpu.value("GPU UUID"),
        ecc_mode=_flag(ecc_mode.value("Current")) if ecc_mode else None,
        ecc_correctable_volatile=volatile[0],
        ecc_uncorrectable_volatile=volatile[1],
        ecc_correctable_aggregate=aggregate[0],
        ecc_uncorrectable_aggregate=aggregate[1],
        retired_pages_single_bit=_count(pages.value("Single Bit ECC")) if pages else None,
        retired_pages_double_bit=_count(pages.value("Double Bit ECC")) if pages else None,
        retired_pages_pending=_flag(pending_pages),
        remapped_rows_correctable=_count(rows.value("Correctable Error")) if rows else None,
        remapped_rows_uncorrectable=_count(rows.value("Uncorrectable Error")) if rows else None,
        remapped_rows_pending=_flag(rows.value("Pending")) if rows else None,
        remapped_rows_failure=_flag(rows.value("Remapping Failure Occurred")) if rows else None,
        pcie_gen_current=_count(generation.value("Current", "Device Current")) if generation else None,
        pcie_gen_max=_count(generation.value("Max")) if generation else None,
        pcie_gen_device_max=_count(generation.value("Device Max")) if generation else None,
        pcie_width_current=_count(width.value("Current")) if width else None,
        pcie_width_max=_count(width.value("Max")) if width else None,
        pcie_replays=_count(link.value("Replays Since Reset")) if link else None,
        clock_event_reasons=_clock_event_reasons(gpu.child("Clocks Event Reasons", "Clocks Throttle Reasons")),
        power_limit_w=_number(power.value("Current Power Limit", "Enforced Power Limit", "Power Limit"))
        if power
        else None,
        default_power_limit_w=_number(power.value("Default Power Limit")) if power else None,
        persistence_mode=_flag(gpu.value("Persistence Mode")),
        temperature_c=temperature,
        temperature_headroom_c=headroom,
    )


def parse_query(text: str) -> tuple[str | None, list[GpuHealth]]:
    """The driver version and each GPU's readings from `nvidia-smi -q` output."""
    output = parse_tree(text)
    gpus = [_gpu_health(index, bus_id, gpu) for index, (bus_id, gpu) in enumerate(output.gpus)]
    return output.header.get("Driver Version"), gpus
