"""Collecting the fingerprint on this host (`collect()`). It never raises: a probe that cannot
answer (no NVML, no nvidia-smi, no docker daemon, a field the GPU does not support) records why.
Collection is kept thin; what interprets text or numbers is pure (kit.host.nvidia_topology,
kit.host.facts), so recorded outputs from real machines test it.

This module must import without torch and without nvidia-ml-py: NVML is imported lazily.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from kit.cache import cache_dir
from kit.host.clock_events import decode_clock_event_reasons, read_clock_event_mask
from kit.host.facts import (
    cuda_version_text,
    docker_runtimes,
    parse_cpuinfo,
    parse_ib_rate,
    parse_meminfo_total,
    parse_os_release,
    parse_toolkit_version,
)
from kit.host.fingerprint import (
    ContainerRuntime,
    CpuInfo,
    Fingerprint,
    Gpu,
    GpuClocks,
    GpuInventory,
    GpuProcess,
    HostInfo,
    ImageCuda,
    ImageProbe,
    NetworkInfo,
    NvLinkState,
    RdmaPort,
    Topology,
)
from kit.host.health_collection import collect_health
from kit.host.kit_source import kit_info
from kit.host.nvidia_topology import TopologyParseError, classify_topology, parse_topology_matrix
from kit.host.redaction_tokens import redact_identifiers, redaction_salt
from kit.host.resources import free_bytes
from kit.host.this_host import nvml_text, open_nvml, run_command

T = TypeVar("T")


INFINIBAND_SYSFS = Path("/sys/class/infiniband")


def read_probe_output(stdout: str) -> ImageProbe:
    """The probe's JSON object is its last non-empty stdout line (frameworks may print banners)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the image probe printed nothing")
    return ImageProbe.model_validate_json(lines[-1])


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
        path.read_text().strip() for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")
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
        os=_attempt(unreadable, "os", lambda: parse_os_release(Path("/etc/os-release").read_text())),
        kernel=platform.release() or None,
        architecture=platform.machine() or None,
        cpu=cpu,
        numa_nodes=numa_nodes or None,
        memory_bytes=_attempt(
            unreadable, "memory_bytes", lambda: parse_meminfo_total(Path("/proc/meminfo").read_text())
        ),
        disk_free_bytes=_attempt(unreadable, "disk_free_bytes", lambda: free_bytes(cache_dir())),
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
        version = _attempt(
            unreadable, "nvlink.version_code", lambda: nvml.nvmlDeviceGetNvLinkVersion(handle, active[0])
        )
    return NvLinkState(links=len(states), active_links=len(active), version_code=version)


def _process_name(nvml, pid: int) -> str:
    return nvml_text(nvml.nvmlSystemGetProcessName(pid))


def _read_processes(nvml, handle, unreadable: dict[str, str]) -> list[GpuProcess]:
    processes: dict[int, Any] = {}  # pid -> pynvml's process record
    for call in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
        for process in call(handle):
            processes.setdefault(process.pid, process)
    return [
        GpuProcess(
            pid=pid,
            name=_attempt(unreadable, f"processes.{pid}.name", partial(_process_name, nvml, pid)),
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
        pcie_gen_current=read("pcie_gen_current", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        pcie_gen_max=read("pcie_gen_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        pcie_width_current=read("pcie_width_current", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        pcie_width_max=read("pcie_width_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        nvlink=read("nvlink", lambda: _read_nvlink(nvml, handle, unreadable)),
        persistence_mode=read("persistence_mode", lambda: nvml.nvmlDeviceGetPersistenceMode(handle) == enabled),
        # Mode queries answer [current, pending]; the current mode is what the run gets.
        ecc_enabled=None if ecc_mode is None else ecc_mode[0] == enabled,
        ecc_uncorrected_aggregate=read(
            "ecc_uncorrected_aggregate",
            lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC
            ),
        ),
        mig_enabled=None if mig_mode is None else mig_mode[0] == nvml.NVML_DEVICE_MIG_ENABLE,
        power_limit_w=None if power_mw is None else power_mw / 1000,
        clocks=GpuClocks(
            applications_graphics_mhz=read(
                "clocks.applications_graphics_mhz",
                lambda: nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_GRAPHICS),
            ),
            applications_memory_mhz=read(
                "clocks.applications_memory_mhz",
                lambda: nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_MEM),
            ),
            max_graphics_mhz=read(
                "clocks.max_graphics_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_GRAPHICS)
            ),
            max_sm_mhz=read("clocks.max_sm_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
            max_memory_mhz=read(
                "clocks.max_memory_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
            ),
        ),
        clock_event_reasons=None if event_mask is None else decode_clock_event_reasons(event_mask),
        processes=read("processes", lambda: _read_processes(nvml, handle, unreadable)),
        unreadable=unreadable,
    )


def _collect_gpus() -> GpuInventory:
    try:
        nvml = open_nvml()
    except ImportError as exc:
        return GpuInventory(unavailable=f"NVML not available: {_reason(exc)} (the nvidia-ml-py package provides it)")
    except Exception as exc:  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return GpuInventory(unavailable=f"NVML not available: {_reason(exc)}")
    unreadable: dict[str, str] = {}
    try:
        driver = _attempt(unreadable, "driver_version", lambda: nvml_text(nvml.nvmlSystemGetDriverVersion()))
        cuda = _attempt(
            unreadable, "cuda_driver_version", lambda: cuda_version_text(nvml.nvmlSystemGetCudaDriverVersion())
        )
        try:
            gpus = [_read_gpu(nvml, index) for index in range(nvml.nvmlDeviceGetCount())]
        except Exception as exc:  # e.g. a GPU fell off the bus while being listed
            return GpuInventory(
                driver_version=driver,
                cuda_driver_version=cuda,
                unavailable=f"NVML could not list the GPUs: {_reason(exc)}",
                unreadable=unreadable,
            )
        return GpuInventory(driver_version=driver, cuda_driver_version=cuda, gpus=gpus, unreadable=unreadable)
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

        def attribute(name: str, port_dir: Path = port_dir) -> str | None:
            path = port_dir / name
            return path.read_text().strip() if path.is_file() else None

        rate = attribute("rate")
        ports.append(
            RdmaPort(
                device=port_dir.parent.parent.name,
                port=int(port_dir.name),
                state=_without_state_number(attribute("state")),
                physical_state=_without_state_number(attribute("phys_state")),
                rate=rate,
                rate_gbps=parse_ib_rate(rate) if rate else None,
                link_layer=attribute("link_layer"),
            )
        )
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
            toolkit = _attempt(unreadable, "nvidia_container_toolkit", partial(parse_toolkit_version, output))
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


def collect(
    redact: bool = False,
    image_probe: dict | ImageProbe | None = None,
    images_cuda: list[ImageCuda] | None = None,
    dcgm_level: int | None = None,
) -> Fingerprint:
    """Fingerprint this host; `image_probe` is the output of the in-image probe, if it ran;
    `images_cuda` the CUDA versions of the images the run will use (kit.images.images_cuda);
    `dcgm_level` the level of `dcgmi diag` its health section runs (None: none).

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
        health=collect_health(dcgm_level),
    )
    return redact_identifiers(fingerprint, redaction_salt()) if redact else fingerprint
