"""The health section of a fingerprint: what each GPU and the host's kernel log said about their
health before a run, each check of the catalog (manifests/health.yaml) judged on it, the DCGM
diagnostic where one ran, and the silent-data-corruption check the preflight ran.

Only the shape lives here, so that a report or an acceptance spec reads a recorded fingerprint
without the probes: reading the tools' outputs is kit.host.nvidia_smi_query, kit.host.nvlink_report,
kit.host.dcgm_diag and kit.host.xid_events; judging, kit.host.health_checks; collecting,
kit.host.health_collection; the silent-data-corruption check, kit.measure.sdc.

The field names are the words a reader would use (`ecc_uncorrectable_volatile`,
`remapped_rows_pending`); README's "Health before performance" lists them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Severity = Literal["critical", "warning"]
# pass: within its threshold; warn / fail: past it, at the check's severity (warning / critical);
# unknown: the host did not report the value; not_applicable: there is nothing to check (a CPU host).
CheckStatus = Literal["pass", "warn", "fail", "unknown", "not_applicable"]
Verdict = Literal["healthy", "warnings", "unhealthy", "unknown", "not_applicable"]


class NvLinkLink(BaseModel):
    """One NVLink link of a GPU: up or not (`nvidia-smi nvlink -s`) and its error counters since
    the driver loaded (`nvidia-smi nvlink -e`), None where not read."""

    link: int
    active: bool
    speed_gb_s: float | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_errors: int | None = None


class GpuHealth(BaseModel):
    """What `nvidia-smi -q` (and its nvlink reports) said of one GPU. A value the GPU does not
    report (N/A, a consumer GPU without ECC) is None."""

    index: int  # the GPU's place in nvidia-smi's order (PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID)
    pci_bus_id: str
    name: str | None = None
    uuid: str | None = None
    ecc_mode: bool | None = None
    # ECC error counts, SRAM and DRAM together: volatile since the driver loaded, aggregate over the GPU's life.
    ecc_correctable_volatile: int | None = None
    ecc_uncorrectable_volatile: int | None = None
    ecc_correctable_aggregate: int | None = None
    ecc_uncorrectable_aggregate: int | None = None
    # Page retirement (before Ampere): retired pages and one pending until the next driver load.
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    # Row remapping (Ampere and later): rows remapped, one pending until the next GPU reset, a failed remap.
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    # PCIe: the link's generation now and at most (the most both ends allow), the device's own most,
    # the width now and at most, and the link's replays since reset.
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_gen_device_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    # The clock event (throttle) reasons active while the GPU was idle, in kit.host.clock_events' words.
    clock_event_reasons: list[str] | None = None
    power_limit_w: float | None = None  # the enforced limit
    default_power_limit_w: float | None = None
    persistence_mode: bool | None = None
    temperature_c: int | None = None
    temperature_headroom_c: int | None = None  # degrees below the temperature where the GPU slows down
    nvlink: list[NvLinkLink] | None = None  # None: nvidia-smi listed no link for it (a PCIe board)
    nvlink_all_inactive: bool = False  # NVML answered that every link of the GPU is down


class XidEvent(BaseModel):
    """One Xid the NVIDIA driver wrote to the kernel log since boot: its number, the GPU's PCI
    address as the driver names it, and the line itself."""

    xid: int
    pci: str
    line: str


class XidLog(BaseModel):
    """The Xids of the kernel log since boot, where it could be read (`source`), else why not."""

    source: str | None = None
    events: list[XidEvent] = []
    unreadable: str | None = None


class DcgmTestResult(BaseModel):
    """One test of `dcgmi diag` on one GPU (or on all, for the tests DCGM runs once)."""

    category: str
    test: str
    gpus: str  # "0", or "0,1,2,3" for a test DCGM runs once for the whole group
    status: Literal["pass", "warn", "fail", "skip", "not_run"]
    detail: str | None = None  # DCGM's warning text


class DcgmDiag(BaseModel):
    """`dcgmi diag -r LEVEL -j` as the host answered it: each test's result, or why none
    (`unavailable`: DCGM not installed, the host engine not running...)."""

    level: int
    version: str | None = None
    results: list[DcgmTestResult] = []
    unavailable: str | None = None


class HealthCheck(BaseModel):
    """One check of the catalog on one GPU (or on the host): what was observed, against which
    threshold, how bad a violation is, where the threshold comes from, and the outcome."""

    name: str
    scope: str  # "GPU3 (00000000:9E:00.0)", or "host"
    observed: str
    threshold: str
    severity: Severity
    status: CheckStatus
    source: str
    remedy: str = ""


class SdcDevice(BaseModel):
    """One device's deterministic training, against the others of its model and software: whether
    its per-step loss and gradient-norm fingerprints are identical, and where they first differ."""

    rank: int
    device: str  # "GPU2: NVIDIA H100 80GB HBM3", or "CPU rank 1"
    identical: bool
    steps: int
    first_difference: str | None = None  # "step 4: loss 0x3f8e1a2b, the others 0x3f8e1a2c"


class SdcPair(BaseModel):
    """An all-reduce of known data between two devices, verified element by element."""

    ranks: tuple[int, int]
    elements: int
    wrong_elements: int
    first_wrong: str | None = None  # "element 1037 on rank 1: 3.0, expected 5.0"


class SilentDataCorruption(BaseModel):
    """The silent-data-corruption check the preflight ran (kit.measure.sdc): the devices whose
    training differs from the others' name the first step that differs; a pair whose all-reduce
    came back wrong names the first wrong element."""

    status: Literal["pass", "fail", "error"]
    summary: str
    devices: list[SdcDevice] = []
    pairs: list[SdcPair] = []
    model: str = ""  # what was trained: "2 of tiny-llama's layers, 8 steps of micro-batch 2 x 32 tokens, fp32"
    raw_samples: str | None = None  # the folder of its rank files, in the run directory


class HostHealth(BaseModel):
    """The health section of a fingerprint. `not_applicable` says why there is nothing to check
    (a host without NVIDIA GPUs); each check of the catalog is then listed as not applicable."""

    catalog: str  # the catalog the checks were judged against (manifests/health.yaml) and its version
    driver_version: str | None = None
    gpus: list[GpuHealth] = []
    xid: XidLog = Field(default_factory=XidLog)
    dcgm: DcgmDiag | None = None  # None: no level was asked for
    checks: list[HealthCheck] = []
    commands: dict[str, str] = {}  # each command run -> "ok" or why it gave nothing
    not_applicable: str | None = None
    silent_data_corruption: SilentDataCorruption | None = None  # set by the preflight that ran it

    @property
    def failing(self) -> list[HealthCheck]:
        """The critical checks past their threshold: a host with any is unhealthy."""
        return [check for check in self.checks if check.status == "fail"]

    @property
    def warnings(self) -> list[HealthCheck]:
        return [check for check in self.checks if check.status == "warn"]

    @property
    def verdict(self) -> Verdict:
        """healthy, warnings, unhealthy (a critical check failed, or the silent-data-corruption
        check did), unknown (nothing could be read), or not_applicable (no GPU)."""
        corrupt = self.silent_data_corruption is not None and self.silent_data_corruption.status == "fail"
        if self.failing or corrupt:
            return "unhealthy"
        if self.not_applicable is not None:
            return "not_applicable"
        if self.warnings:
            return "warnings"
        if self.checks and all(check.status == "unknown" for check in self.checks):
            return "unknown"
        return "healthy"

    @property
    def unhealthy_because(self) -> str | None:
        """ "remapped_rows_pending on GPU1 (00000000:9E:00.0): yes": the first reason the host is
        unhealthy, in one line; None where it is not."""
        if self.failing:
            first = self.failing[0]
            more = f" (and {len(self.failing) - 1} more)" if len(self.failing) > 1 else ""
            return f"{first.name} on {first.scope}: {first.observed}{more}"
        sdc = self.silent_data_corruption
        if sdc is not None and sdc.status == "fail":
            return f"silent_data_corruption: {sdc.summary}"
        return None
