"""`nvidia-smi topo -m` read into a matrix of links between GPUs (NVLink bonds, the PCIe path
between them) and NICs, and the class of interconnect it makes (all NVLink, PCIe through a
switch or a CPU, across sockets). Pure: recorded outputs of real machines test it.
"""

from __future__ import annotations

import re

from kit.host.fingerprint import GPU_COLUMN, TopologyClass, TopologyMatrix

PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
# Drivers from before NODE existed printed the cross-socket path as SOC.
LEGACY_LINK_NAMES = {"SOC": "SYS"}
PCIE_PATH_WORDING = {
    "SYS": "cross-socket pairs",
    "NODE": "pairs across host bridges of one NUMA node",
    "PHB": "pairs through a CPU host bridge",
    "PXB": "pairs across PCIe switches",
    "PIX": "pairs on one PCIe switch",
}
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
NVLINK_BOND = re.compile(r"^NV(\d+)$")
NIC_LEGEND_LINE = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")


# Select Graphic Rendition sequences (ESC [ ... m): underline, bold and reset around the header.
TERMINAL_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class TopologyParseError(ValueError):
    """`nvidia-smi topo -m` output that does not have the expected matrix shape."""


def _topology_row(line: str, columns: int) -> tuple[str, list[str], list[str]]:
    """A row's device, its link cells and its affinity cells.

    nvidia-smi separates cells with tabs, so an empty cell is still a cell: a GPU whose CPU
    affinity is empty (seen on real machines) must not shift its NUMA affinity into that
    column. Link cells are never empty; the CPU-affinity cell follows the last link after one
    tab; after it nvidia-smi pads with extra tabs ("0\t\tN/A"), so the later affinity cells are
    the non-empty ones, in order. A matrix pasted with its tabs turned into spaces cannot show an
    empty cell, and is split on whitespace.
    """
    if "\t" not in line:
        tokens = line.split()
        return tokens[0], tokens[1 : columns + 1], tokens[columns + 1 :]
    cells = [cell.strip() for cell in line.split("\t")]
    row, links, rest = cells[0], cells[1 : columns + 1], cells[columns + 1 :]
    if not rest:
        return row, links, []
    return row, links, [rest[0], *(cell for cell in rest[1:] if cell)]


def parse_topology_matrix(text: str) -> TopologyMatrix:
    """Parse `nvidia-smi topo -m`, tab- or space-separated, with or without a NIC legend.

    Columns are GPUs and NICs (named NIC# with a legend in newer drivers, mlx5_# in older
    ones), then the affinity columns the driver prints (CPU Affinity, NUMA Affinity, GPU NUMA ID).
    Drivers of the 580 series underline the header with terminal escapes, also into a file.
    """
    lines = TERMINAL_ESCAPE.sub("", text).splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if header_at is None:
        raise TopologyParseError("no header line starting with GPU0")
    header = lines[header_at]
    devices: list[str] = []
    for token in header.split():
        if token in ("CPU", "NUMA") or token == "GPU":
            break
        devices.append(token)
    affinity_columns = sorted((column for column in AFFINITY_COLUMNS if column in header), key=header.index)

    links: dict[str, dict[str, str]] = {}
    cpu_affinity: dict[str, str] = {}
    numa_affinity: dict[str, str] = {}
    for line in lines[header_at + 1 :]:
        if not line.split():
            if links:
                break
            continue
        row, cells, extra = _topology_row(line, len(devices))
        if row not in devices:
            break
        if len(cells) < len(devices):
            raise TopologyParseError(f"row {row} has {len(cells)} cells for {len(devices)} columns")
        links[row] = dict(zip(devices, cells))
        affinities = dict(zip(affinity_columns, extra))
        if "CPU Affinity" in affinities:
            cpu_affinity[row] = affinities["CPU Affinity"]
        if "NUMA Affinity" in affinities:
            numa_affinity[row] = affinities["NUMA Affinity"]

    missing = [device for device in devices if device not in links]
    if missing:
        raise TopologyParseError(f"no row for {', '.join(missing)}")
    for device in devices:
        if links[device][device] != "X":
            raise TopologyParseError(f"{device} is not 'X' on the diagonal")

    legend = {match[1]: match[2] for line in lines if (match := NIC_LEGEND_LINE.match(line))}
    nics = [device for device in devices if not GPU_COLUMN.match(device)]
    return TopologyMatrix(
        devices=devices,
        links=links,
        cpu_affinity=cpu_affinity,
        numa_affinity=numa_affinity,
        nic_names={nic: legend.get(nic, nic) for nic in nics},
    )


def classify_topology(matrix: TopologyMatrix) -> TopologyClass:
    """Summarise the GPU pairs: all NVLink, some NVLink, or PCIe only, and how far PCIe goes."""
    gpus = matrix.gpus
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    kinds = [LEGACY_LINK_NAMES.get(matrix.links[a][b], matrix.links[a][b]) for a, b in pairs]
    bonds = [int(match.group(1)) for kind in kinds if (match := NVLINK_BOND.match(kind))]
    pcie = [kind for kind in kinds if kind in PCIE_PATHS]
    unrecognised = sorted({kind for kind in kinds if kind not in PCIE_PATHS and not NVLINK_BOND.match(kind)})
    farthest = max(pcie, key=PCIE_PATHS.index) if pcie else None

    count = len(gpus)
    bond_text = "/".join(f"NV{bond}" for bond in sorted(set(bonds)))
    path_text = f", {PCIE_PATH_WORDING[farthest]}" if farthest else ""
    if count == 1:
        interconnect, label = "single-gpu", "1 GPU"
    elif len(bonds) == len(pairs):
        interconnect, label = "nvlink-all-pairs", f"{count} GPUs, all pairs NVLink ({bond_text})"
    elif bonds:
        interconnect = "nvlink-partial"
        label = f"{count} GPUs, NVLink ({bond_text}) on {len(bonds)} of {len(pairs)} pairs, others PCIe{path_text}"
    else:
        interconnect, label = "pcie-only", f"{count} GPUs, PCIe only{path_text}"
    if unrecognised:
        label += f" (unrecognised link kinds: {', '.join(unrecognised)})"
    return TopologyClass(
        gpu_count=count,
        interconnect=interconnect,
        nvlink_bonds=sorted(set(bonds)),
        farthest_pcie_path=farthest,
        unrecognised_links=unrecognised,
        label=label,
    )
