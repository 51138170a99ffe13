"""The environment a number was measured in, as typed data: the host, its GPUs and their links,
the network, the container runtime, the kit and the images that measured, and the preflight's
calibration. Collecting it is kit.host.collection's; this module is only its shape, so
that a report reads a recorded fingerprint without the probes.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from kit.credentials import masked
from kit.host.health import HostHealth

GPU_COLUMN = re.compile(r"^GPU\d+$")  # a GPU among the devices of `nvidia-smi topo -m` (the others are NICs)


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
    disk_free_bytes: int | None = None  # free where the kit's cache (synthetic checkpoints) lives
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
    cuda_compiler_found: bool | None = None  # nvcc for DeepSpeed's JIT-built ops; None: not probed
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
    """What the host achieved in the preflight's short measurement (kit/measure/calibration.py), the
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
    # The host's health before the run (kit.host.health): each GPU's readings, the catalog's checks
    # judged on them, and the silent-data-corruption check where a preflight ran it. None in a
    # fingerprint taken before the kit read health.
    health: HostHealth | None = None
