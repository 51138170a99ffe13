"""The environment a number was measured in, collected as typed data.

A measurement enters a procurement review only together with the machine, drivers, topology and
software that produced it. `collect()` gathers those facts on the host; it never raises: a probe
that cannot answer (no NVML, no nvidia-smi, no docker daemon, a field the GPU does not support)
records why. Collection is kept thin; everything that interprets text or numbers is a pure
function here, so recorded outputs from real machines test it.

This module must import without torch and without nvidia-ml-py: NVML is imported lazily.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import hmac
import os
import platform
import re
import secrets
import socket
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, Field

from kit import __version__
from kit.clock_events import decode_clock_event_reasons, read_clock_event_mask
from kit.credentials import masked
from kit.host import nvml_text, open_nvml, run_command
from kit.regular_files import MANIFEST_LIMIT, read_regular

T = TypeVar("T")

PACKAGE_DIR = Path(__file__).resolve().parent
WORKLOADS_DIR = PACKAGE_DIR / "workloads"
STAGES_DIR = PACKAGE_DIR / "stages"
REPORT_ONLY = ("report", "reference")  # kit.<these>: what shows figures, never what computes them
INFINIBAND_SYSFS = Path("/sys/class/infiniband")
REDACTION_SALT_ENV = "KIT_REDACTION_SALT"

# `nvidia-smi topo -m` PCIe path kinds, nearest first, as its legend orders them.
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
GPU_COLUMN = re.compile(r"^GPU\d+$")


# ---------------------------------------------------------------------------------------------
# The typed fingerprint
# ---------------------------------------------------------------------------------------------


class CpuInfo(BaseModel):
    """The host CPU: model, how many sockets and cores, and how its clocks are governed."""

    model: str | None = None
    sockets: int | None = None
    physical_cores: int | None = None
    logical_cpus: int | None = None
    frequency_governor: str | None = None


class HostInfo(BaseModel):
    """The machine around the GPUs. Fields that could not be read are named in `unreadable`."""

    hostname: str | None = None
    os: str | None = None
    kernel: str | None = None
    architecture: str | None = None
    cpu: CpuInfo = Field(default_factory=CpuInfo)
    numa_nodes: int | None = None
    memory_bytes: int | None = None
    unreadable: dict[str, str] = Field(default_factory=dict)


class NvLinkState(BaseModel):
    """NVLink as NVML reports it: links that answered a state query, and how many are up."""

    links: int
    active_links: int
    # nvmlDeviceGetNvLinkVersion's raw answer. Newer drivers return the nvmlNvlinkVersion_t
    # enum (4 = NVLink 3.0, 6 = 4.0, 7 = 5.0), older ones a plain number, so it is kept as is.
    version_code: int | None = None


class GpuProcess(BaseModel):
    """A process holding a GPU context when the fingerprint was taken."""

    pid: int
    name: str | None = None
    used_memory_bytes: int | None = None


class GpuClocks(BaseModel):
    """Application (target) clocks and the maximum clocks, in MHz."""

    applications_graphics_mhz: int | None = None
    applications_memory_mhz: int | None = None
    max_graphics_mhz: int | None = None
    max_sm_mhz: int | None = None
    max_memory_mhz: int | None = None


class Gpu(BaseModel):
    """One GPU as NVML sees it. A field NVML refused is None, with the reason in `unreadable`."""

    index: int
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    memory_bytes: int | None = None
    vbios: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    nvlink: NvLinkState | None = None
    persistence_mode: bool | None = None
    ecc_enabled: bool | None = None
    ecc_uncorrected_aggregate: int | None = None
    mig_enabled: bool | None = None
    power_limit_w: float | None = None
    clocks: GpuClocks = Field(default_factory=GpuClocks)
    clock_event_reasons: list[str] | None = None
    processes: list[GpuProcess] | None = None
    unreadable: dict[str, str] = Field(default_factory=dict)


class GpuInventory(BaseModel):
    """The driver and every GPU; `unavailable` says why there is no GPU list at all."""

    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[Gpu] = Field(default_factory=list)
    unavailable: str | None = None
    unreadable: dict[str, str] = Field(default_factory=dict)


class TopologyMatrix(BaseModel):
    """`nvidia-smi topo -m` as data: the link kind between every two devices, and affinities."""

    devices: list[str]
    links: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str] = Field(default_factory=dict)
    numa_affinity: dict[str, str] = Field(default_factory=dict)
    nic_names: dict[str, str] = Field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        return [device for device in self.devices if GPU_COLUMN.match(device)]

    @property
    def nics(self) -> list[str]:
        return [device for device in self.devices if not GPU_COLUMN.match(device)]


class TopologyClass(BaseModel):
    """What the GPU-to-GPU links amount to: runs on different classes measure different things."""

    gpu_count: int
    interconnect: Literal["single-gpu", "nvlink-all-pairs", "nvlink-partial", "pcie-only"]
    nvlink_bonds: list[int] = Field(default_factory=list)
    farthest_pcie_path: str | None = None
    unrecognised_links: list[str] = Field(default_factory=list)
    label: str


class Topology(BaseModel):
    """The parsed topology and its class; `raw` keeps the command output as evidence."""

    matrix: TopologyMatrix | None = None
    topology_class: TopologyClass | None = None
    raw: str | None = None
    unavailable: str | None = None


class RdmaPort(BaseModel):
    """One InfiniBand or RoCE port from /sys/class/infiniband."""

    device: str
    port: int
    state: str | None = None
    physical_state: str | None = None
    rate: str | None = None
    rate_gbps: float | None = None
    link_layer: str | None = None


class NetworkInfo(BaseModel):
    """RDMA-capable ports; `unavailable` says why none could be listed."""

    rdma_ports: list[RdmaPort] = Field(default_factory=list)
    unavailable: str | None = None


class ContainerRuntime(BaseModel):
    """The docker engine and whether the NVIDIA container toolkit is there to give it GPUs."""

    docker_client_version: str | None = None  # the docker SDK's: the kit's only client of the engine
    docker_server_version: str | None = None
    runtimes: list[str] = Field(default_factory=list)
    default_runtime: str | None = None
    nvidia_container_toolkit: str | None = None
    unreadable: dict[str, str] = Field(default_factory=dict)


class ImageProbe(BaseModel):
    """Versions inside one image, as printed by `python -m kit.workloads.probe`.

    `packages` maps a distribution name to its version, None when it is not installed;
    `import_errors` names the installed ones that failed to import (a broken build).
    """

    image: str | None = None
    python: str
    torch: str | None = None
    cuda_runtime: str | None = None
    cudnn: str | None = None
    nccl: str | None = None
    packages: dict[str, str | None] = Field(default_factory=dict)
    import_errors: dict[str, str] = Field(default_factory=dict)


class ImageCuda(BaseModel):
    """The CUDA version a local image was built with, which the host's driver must support."""

    name: str  # the image's name in the lock
    reference: str
    cuda_version: str | None = None  # "13.0.1"
    source: str  # where the version was read, or why it is unknown


class KitInfo(BaseModel):
    """Which kit measured: its version and commit (and whether the checkout had uncommitted
    changes), a hash of the code that measures (the workloads and the metric maths), a hash of
    all of its source, and of each manifest it read."""

    version: str
    git_commit: str | None = None
    dirty: bool | None = None
    workload_sources_sha256: str
    workload_files: list[str] = Field(default_factory=list)
    source_sha256: str | None = None
    manifests_sha256: dict[str, str] = Field(default_factory=dict)
    unreadable: dict[str, str] = Field(default_factory=dict)


class MeasuredFigure(BaseModel):
    """One figure the host's devices achieved, the lowest device's (a synchronous step waits for
    the slowest), each device's beside it, and how it was measured."""

    value: float
    unit: Literal["TFLOPS", "GB/s"]
    per_device: list[float] = Field(default_factory=list)
    how: str


class Calibration(BaseModel):
    """What the host achieved in the preflight's short measurement (kit/calibration.py), the
    denominators MFU and the expectation take where they are below the datasheet's peaks."""

    device: Literal["cuda", "cpu"]
    device_names: list[str]
    matmul_dtype: Literal["bf16", "fp32"]
    matmul: MeasuredFigure
    memory_copy: MeasuredFigure
    host_to_device: MeasuredFigure | None = None  # pinned memory, GPU only
    device_to_host: MeasuredFigure | None = None
    all_reduce_busbw: MeasuredFigure | None = None  # more than one GPU only
    shapes_tflops: dict[str, float] = Field(default_factory=dict)  # "MxKxN" -> the lowest device's best
    raw_samples: str  # the folder of its rank files, in the run directory (or the preflight's folder)
    seconds: float


class Fingerprint(BaseModel):
    """Everything about the environment that a reported number depends on."""

    schema_version: int = 1
    collected_at: datetime
    redacted: bool = False
    host: HostInfo
    gpus: GpuInventory
    topology: Topology
    network: NetworkInfo
    container_runtime: ContainerRuntime
    image: ImageProbe | None = None
    images_cuda: list[ImageCuda] = Field(default_factory=list)  # the images the plan runs in
    kit: KitInfo
    # NCCL_* variables of the kit's own environment: they reach every case the local executor
    # runs (a stray NCCL_P2P_DISABLE=1 would make every case a p2p-off variant); docker cases
    # get only their case's variables. A variant's own variables are in its case's params.env.
    nccl_environment: Annotated[dict[str, str], AfterValidator(masked)] = Field(default_factory=dict)
    # What the host achieved, measured by the preflight before the first case (kit run records it
    # here); None where no preflight measured it (kit doctor, --no-preflight, a failed calibration).
    calibration: Calibration | None = None


# ---------------------------------------------------------------------------------------------
# Pure parsers
# ---------------------------------------------------------------------------------------------


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
        return tokens[0], tokens[1:columns + 1], tokens[columns + 1:]
    cells = [cell.strip() for cell in line.split("\t")]
    row, links, rest = cells[0], cells[1:columns + 1], cells[columns + 1:]
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
    affinity_columns = sorted(
        (column for column in AFFINITY_COLUMNS if column in header), key=header.index
    )

    links: dict[str, dict[str, str]] = {}
    cpu_affinity: dict[str, str] = {}
    numa_affinity: dict[str, str] = {}
    for line in lines[header_at + 1:]:
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

    legend = dict(match.groups() for line in lines if (match := NIC_LEGEND_LINE.match(line)))
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
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    kinds = [LEGACY_LINK_NAMES.get(matrix.links[a][b], matrix.links[a][b]) for a, b in pairs]
    bonds = [int(match.group(1)) for kind in kinds if (match := NVLINK_BOND.match(kind))]
    pcie = [kind for kind in kinds if kind in PCIE_PATHS]
    unrecognised = sorted({kind for kind in kinds
                           if kind not in PCIE_PATHS and not NVLINK_BOND.match(kind)})
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
        label = (f"{count} GPUs, NVLink ({bond_text}) on {len(bonds)} of {len(pairs)} pairs, "
                 f"others PCIe{path_text}")
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


def cuda_version_text(encoded: int) -> str:
    """NVML encodes the CUDA driver version as 1000 * major + 10 * minor (12040 -> "12.4")."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def parse_cpuinfo(text: str) -> CpuInfo:
    """Model, sockets and physical cores from /proc/cpuinfo (one block per logical CPU)."""
    blocks = [block for block in text.strip().split("\n\n") if block.strip()]
    models, sockets, cores = set(), set(), set()
    for block in blocks:
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition(":") for line in block.splitlines())
        )
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


def sources_sha256(root: Path, files) -> str:
    """SHA-256 over files in the order of their names relative to `root`: each name, NUL, bytes, NUL.

    Names are hashed too, so renaming a file changes the hash as editing one does.
    """
    digest = hashlib.sha256()
    for name, path in sorted((path.relative_to(root).as_posix(), path) for path in files):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def measuring_sources() -> list[Path]:
    """The code a measured figure depends on: the workloads, the stages' units (kit/stages/, each
    stating its figures from the samples), the serving aggregates a client computes as a burst
    ends, and every kit module those import, directly or not, found from the imports; not the
    report nor the paper's reference, which the units' sections read and no figure depends on."""
    found: set[Path] = set()
    pending = [*WORKLOADS_DIR.glob("*.py"), *STAGES_DIR.glob("*.py"), PACKAGE_DIR / "serve" / "aggregate.py"]
    while pending:
        path = pending.pop()
        if path in found or not path.is_file():
            continue
        found.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []  # fmt: skip
            for name in names:
                if name.startswith("kit.") and name.split(".")[1] not in REPORT_ONLY:
                    module = PACKAGE_DIR.parent / Path(*name.split("."))
                    pending.append(module / "__init__.py" if module.is_dir() else module.with_suffix(".py"))
    return sorted(found)


def kit_checkout_state() -> tuple[bool | None, str | None]:
    """Whether the kit's checkout has changes git has not committed (None, with why, where unknown)."""
    checkout = PACKAGE_DIR.parent
    if not (checkout / ".git").exists():
        return None, f"not a source checkout (no .git in {checkout})"
    stdout, problem = run_command(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"])
    return (None, problem) if problem else (bool(stdout.strip()), None)


def read_probe_output(stdout: str) -> ImageProbe:
    """The probe's JSON object is its last non-empty stdout line (frameworks may print banners)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the image probe printed nothing")
    return ImageProbe.model_validate_json(lines[-1])


# ---------------------------------------------------------------------------------------------
# Redaction
# ---------------------------------------------------------------------------------------------

_PROCESS_SALT = secrets.token_bytes(16)


def redaction_salt() -> bytes:
    """$KIT_REDACTION_SALT when set (a resumed run keeps its tokens), else one salt per process."""
    configured = os.environ.get(REDACTION_SALT_ENV)
    return configured.encode() if configured else _PROCESS_SALT


def redaction_token(value: str, salt: bytes) -> str:
    """A stable stand-in for an identifier: the same value and salt always give the same token."""
    return "redacted-" + hmac.new(salt, value.encode(), hashlib.sha256).hexdigest()[:16]


def redact_identifiers(fingerprint: Fingerprint, salt: bytes) -> Fingerprint:
    """Replace the hostname, GPU UUIDs and serial numbers with salted tokens."""
    def token(value: str | None) -> str | None:
        return None if value is None else redaction_token(value, salt)

    host = fingerprint.host.model_copy(update={"hostname": token(fingerprint.host.hostname)})
    gpus = [
        gpu.model_copy(update={"uuid": token(gpu.uuid), "serial": token(gpu.serial)})
        for gpu in fingerprint.gpus.gpus
    ]
    return fingerprint.model_copy(update={
        "redacted": True,
        "host": host,
        "gpus": fingerprint.gpus.model_copy(update={"gpus": gpus}),
    })


# ---------------------------------------------------------------------------------------------
# Collection (thin: read, call, run; every failure becomes a recorded reason)
# ---------------------------------------------------------------------------------------------


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _attempt(unreadable: dict[str, str], field: str, read: Callable[[], T]) -> T | None:
    """Run one probe; on failure note why under `field` and return None."""
    try:
        return read()
    except Exception as exc:  # a probe must never take the fingerprint down with it
        unreadable[field] = _reason(exc)
        return None


def _read_governor() -> str:
    governors = {
        path.read_text().strip()
        for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")
    }
    if not governors:
        raise FileNotFoundError("cpufreq not exposed (no cpu*/cpufreq/scaling_governor)")
    return governors.pop() if len(governors) == 1 else "mixed: " + ", ".join(sorted(governors))


def _collect_host() -> HostInfo:
    unreadable: dict[str, str] = {}
    cpu = _attempt(unreadable, "cpu", lambda: parse_cpuinfo(Path("/proc/cpuinfo").read_text()))
    cpu = cpu or CpuInfo(logical_cpus=os.cpu_count())
    cpu.frequency_governor = _attempt(unreadable, "cpu.frequency_governor", _read_governor)
    numa_nodes = len(list(Path("/sys/devices/system/node").glob("node[0-9]*")))
    if not numa_nodes:
        unreadable["numa_nodes"] = "no /sys/devices/system/node/node* entries"
    return HostInfo(
        hostname=_attempt(unreadable, "hostname", socket.gethostname),
        os=_attempt(unreadable, "os",
                    lambda: parse_os_release(Path("/etc/os-release").read_text())),
        kernel=platform.release() or None,
        architecture=platform.machine() or None,
        cpu=cpu,
        numa_nodes=numa_nodes or None,
        memory_bytes=_attempt(unreadable, "memory_bytes",
                              lambda: parse_meminfo_total(Path("/proc/meminfo").read_text())),
        unreadable=unreadable,
    )


def _read_nvlink(nvml, handle, unreadable: dict[str, str]) -> NvLinkState:
    """Query links 0, 1, ... until NVML refuses one: that index is the GPU's link count.

    A PCIe board refuses link 0 (NVMLError_NotSupported), an NVLink board the first index past
    its links; both are normal answers here, not failures.
    """
    states: list[int] = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            states.append(nvml.nvmlDeviceGetNvLinkState(handle, link))
        except nvml.NVMLError as exc:
            if not states:
                unreadable["nvlink"] = _reason(exc)
            break
    active = [link for link, state in enumerate(states) if state == nvml.NVML_FEATURE_ENABLED]
    version = None
    if active:
        version = _attempt(unreadable, "nvlink.version_code",
                           lambda: nvml.nvmlDeviceGetNvLinkVersion(handle, active[0]))
    return NvLinkState(links=len(states), active_links=len(active), version_code=version)


def _read_processes(nvml, handle, unreadable: dict[str, str]) -> list[GpuProcess]:
    processes = {}
    for call in (nvml.nvmlDeviceGetComputeRunningProcesses,
                 nvml.nvmlDeviceGetGraphicsRunningProcesses):
        for process in call(handle):
            processes.setdefault(process.pid, process)
    return [
        GpuProcess(
            pid=pid,
            name=_attempt(unreadable, f"processes.{pid}.name",
                          lambda pid=pid: nvml_text(nvml.nvmlSystemGetProcessName(pid))),
            # pynvml turns NVML_VALUE_NOT_AVAILABLE into None (no permission, or MIG).
            used_memory_bytes=process.usedGpuMemory,
        )
        for pid, process in sorted(processes.items())
    ]


def _read_gpu(nvml, index: int) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    unreadable: dict[str, str] = {}

    def read(field: str, call: Callable[[], T]) -> T | None:
        return _attempt(unreadable, field, call)

    enabled = nvml.NVML_FEATURE_ENABLED
    ecc_mode = read("ecc_enabled", lambda: nvml.nvmlDeviceGetEccMode(handle))
    mig_mode = read("mig_enabled", lambda: nvml.nvmlDeviceGetMigMode(handle))
    power_mw = read("power_limit_w", lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle))
    event_mask = read("clock_event_reasons", lambda: read_clock_event_mask(nvml, handle))
    return Gpu(
        index=index,
        name=read("name", lambda: nvml_text(nvml.nvmlDeviceGetName(handle))),
        uuid=read("uuid", lambda: nvml_text(nvml.nvmlDeviceGetUUID(handle))),
        serial=read("serial", lambda: nvml_text(nvml.nvmlDeviceGetSerial(handle))),
        pci_bus_id=read("pci_bus_id", lambda: nvml_text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
        memory_bytes=read("memory_bytes", lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total),
        vbios=read("vbios", lambda: nvml_text(nvml.nvmlDeviceGetVbiosVersion(handle))),
        pcie_gen_current=read("pcie_gen_current",
                              lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        pcie_gen_max=read("pcie_gen_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        pcie_width_current=read("pcie_width_current",
                                lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        pcie_width_max=read("pcie_width_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        nvlink=read("nvlink", lambda: _read_nvlink(nvml, handle, unreadable)),
        persistence_mode=read("persistence_mode",
                              lambda: nvml.nvmlDeviceGetPersistenceMode(handle) == enabled),
        # Mode queries answer [current, pending]; the current mode is what the run gets.
        ecc_enabled=None if ecc_mode is None else ecc_mode[0] == enabled,
        ecc_uncorrected_aggregate=read("ecc_uncorrected_aggregate", lambda: (
            nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC))),
        mig_enabled=None if mig_mode is None else mig_mode[0] == nvml.NVML_DEVICE_MIG_ENABLE,
        power_limit_w=None if power_mw is None else power_mw / 1000,
        clocks=GpuClocks(
            applications_graphics_mhz=read("clocks.applications_graphics_mhz", lambda: (
                nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_GRAPHICS))),
            applications_memory_mhz=read("clocks.applications_memory_mhz", lambda: (
                nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_MEM))),
            max_graphics_mhz=read("clocks.max_graphics_mhz", lambda: (
                nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_GRAPHICS))),
            max_sm_mhz=read("clocks.max_sm_mhz",
                            lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
            max_memory_mhz=read("clocks.max_memory_mhz", lambda: (
                nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM))),
        ),
        clock_event_reasons=None if event_mask is None else decode_clock_event_reasons(event_mask),
        processes=read("processes", lambda: _read_processes(nvml, handle, unreadable)),
        unreadable=unreadable,
    )


def _collect_gpus() -> GpuInventory:
    try:
        nvml = open_nvml()
    except ImportError as exc:
        return GpuInventory(unavailable=f"NVML not available: {_reason(exc)} "
                                        "(the nvidia-ml-py package provides it)")
    except Exception as exc:  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return GpuInventory(unavailable=f"NVML not available: {_reason(exc)}")
    unreadable: dict[str, str] = {}
    try:
        driver = _attempt(unreadable, "driver_version",
                          lambda: nvml_text(nvml.nvmlSystemGetDriverVersion()))
        cuda = _attempt(unreadable, "cuda_driver_version",
                        lambda: cuda_version_text(nvml.nvmlSystemGetCudaDriverVersion()))
        try:
            gpus = [_read_gpu(nvml, index) for index in range(nvml.nvmlDeviceGetCount())]
        except Exception as exc:  # e.g. a GPU fell off the bus while being listed
            return GpuInventory(driver_version=driver, cuda_driver_version=cuda,
                                unavailable=f"NVML could not list the GPUs: {_reason(exc)}",
                                unreadable=unreadable)
        return GpuInventory(driver_version=driver, cuda_driver_version=cuda, gpus=gpus,
                            unreadable=unreadable)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _collect_topology() -> Topology:
    stdout, problem = run_command(["nvidia-smi", "topo", "-m"])
    if problem:
        return Topology(raw=stdout or None, unavailable=problem)
    try:
        matrix = parse_topology_matrix(stdout)
    except TopologyParseError as exc:
        return Topology(raw=stdout, unavailable=f"could not parse 'nvidia-smi topo -m': {exc}")
    return Topology(matrix=matrix, topology_class=classify_topology(matrix), raw=stdout)


def _without_state_number(text: str | None) -> str | None:
    """sysfs prefixes port states with their number: "4: ACTIVE", "5: LinkUp"."""
    if text is None:
        return None
    return text.partition(": ")[2] or text


def read_rdma_ports(sysfs: Path = INFINIBAND_SYSFS) -> NetworkInfo:
    """InfiniBand / RoCE ports from sysfs: <device>/ports/<n>/{state,phys_state,rate,link_layer}."""
    if not sysfs.is_dir():
        return NetworkInfo(unavailable=f"no RDMA devices ({sysfs} does not exist)")
    ports = []
    for port_dir in sorted(sysfs.glob("*/ports/*")):
        def attribute(name: str) -> str | None:
            path = port_dir / name
            return path.read_text().strip() if path.is_file() else None

        rate = attribute("rate")
        ports.append(RdmaPort(
            device=port_dir.parent.parent.name,
            port=int(port_dir.name),
            state=_without_state_number(attribute("state")),
            physical_state=_without_state_number(attribute("phys_state")),
            rate=rate,
            rate_gbps=parse_ib_rate(rate) if rate else None,
            link_layer=attribute("link_layer"),
        ))
    if not ports:
        return NetworkInfo(unavailable=f"{sysfs} lists no ports")
    return NetworkInfo(rdma_ports=ports)


def _collect_network() -> NetworkInfo:
    try:
        return read_rdma_ports()
    except Exception as exc:  # an unreadable sysfs attribute, or a rate in a new format
        return NetworkInfo(unavailable=f"could not read {INFINIBAND_SYSFS}: {_reason(exc)}")


def _collect_container_runtime() -> ContainerRuntime:
    """The engine as the kit's docker SDK sees it (the executor and `kit images` use the same)."""
    import docker

    unreadable: dict[str, str] = {}
    server = default_runtime = toolkit = None
    runtimes: list[str] = []
    engine = _attempt(unreadable, "docker", lambda: docker.from_env(timeout=30))  # asks the engine's API version
    if engine is not None:
        server = _attempt(unreadable, "docker", lambda: engine.version().get("Version"))
        info = _attempt(unreadable, "runtimes", engine.info)
        runtimes, default_runtime = docker_runtimes(info) if info is not None else ([], None)
        engine.close()
    problems = []
    for tool in ("nvidia-ctk", "nvidia-container-cli"):
        output, problem = run_command([tool, "--version"])
        if problem is None:
            toolkit = _attempt(unreadable, "nvidia_container_toolkit",
                               lambda output=output: parse_toolkit_version(output))
            break
        problems.append(problem)
    else:
        unreadable["nvidia_container_toolkit"] = "; ".join(problems)
    return ContainerRuntime(
        docker_client_version=docker.__version__,
        docker_server_version=server,
        runtimes=runtimes,
        default_runtime=default_runtime,
        nvidia_container_toolkit=toolkit,
        unreadable=unreadable,
    )


def kit_info() -> KitInfo:
    """The kit that measures: version, commit of its checkout (and whether it was clean), the
    hashes of its measuring code and all its source, and each manifest's SHA-256."""
    from kit.manifest import manifests_dir

    unreadable: dict[str, str] = {}
    commit = None
    checkout = PACKAGE_DIR.parent
    if not (checkout / ".git").exists():
        unreadable["git_commit"] = f"not a source checkout (no .git in {checkout})"
    else:
        stdout, problem = run_command(["git", "-C", str(checkout), "rev-parse", "HEAD"])
        if problem:
            unreadable["git_commit"] = problem
        else:
            commit = stdout.strip()
    dirty, why = kit_checkout_state()
    if why:
        unreadable["dirty"] = why
    measuring = measuring_sources()
    manifests = manifests_dir()
    hashed = {}
    for path in sorted(manifests.rglob("*.yaml")):
        name = path.relative_to(manifests).as_posix()
        try:  # a FIFO or a link to /dev/zero among them is named, not read
            hashed[name] = sha256_bytes(read_regular(path, MANIFEST_LIMIT))
        except OSError as exc:
            unreadable[f"manifest {name}"] = exc.strerror or str(exc)
    return KitInfo(
        version=__version__,
        git_commit=commit,
        dirty=dirty,
        workload_sources_sha256=sources_sha256(PACKAGE_DIR, measuring),
        workload_files=[path.relative_to(PACKAGE_DIR).as_posix() for path in measuring],
        source_sha256=sources_sha256(PACKAGE_DIR, PACKAGE_DIR.rglob("*.py")),
        manifests_sha256=hashed,
        unreadable=unreadable,
    )


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def collect(redact: bool = False, image_probe: dict | ImageProbe | None = None,
            images_cuda: list[ImageCuda] | None = None) -> Fingerprint:
    """Fingerprint this host; `image_probe` is the output of the in-image probe, if it ran;
    `images_cuda` the CUDA versions of the images the run will use (kit.images.images_cuda).

    With `redact`, the hostname, GPU UUIDs and serials become salted tokens (see
    `redaction_salt`), so a fingerprint can be shared without naming the machine.
    """
    fingerprint = Fingerprint(
        collected_at=datetime.now(timezone.utc),
        host=_collect_host(),
        gpus=_collect_gpus(),
        topology=_collect_topology(),
        network=_collect_network(),
        container_runtime=_collect_container_runtime(),
        image=None if image_probe is None else ImageProbe.model_validate(image_probe),
        images_cuda=images_cuda or [],
        kit=kit_info(),
        nccl_environment={key: value for key, value in sorted(os.environ.items()) if key.startswith("NCCL_")},
    )
    return redact_identifiers(fingerprint, redaction_salt()) if redact else fingerprint
