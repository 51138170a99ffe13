"""The link rate a bus bandwidth cannot exceed: NVLink, PCI Express or the network between nodes,
as the hardware table and the run's fingerprint give them; a figure above it is no measurement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from kit.comm.collectives import collective
from kit.comm.sweep import CommSweep
from kit.theory.hardware import GpuSpec, HardwareTable, load_hardware

if TYPE_CHECKING:
    from kit.host.fingerprint import NetworkInfo


# PCI Express per lane and direction: transfer rate x encoding / 8 bits. Gen1-2: 2.5 and 5 GT/s,
# 8b/10b; Gen3-5: 8, 16, 32 GT/s, 128b/130b (the PCI-SIG base specifications' rates, as tabled
# e.g. at https://hpc-notes.pages.dev/reference/pcie). Gen6 (PAM4, FLIT mode) is not tabled.
PCIE_GB_PER_S_PER_LANE = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
}
# NVLink SHARP (NVLS, NVLink 4 and later behind NVSwitch) reduces and multicasts inside the
# switch; busbw then is no wire bandwidth: 8 x H100 reach ~480 GB/s AllReduce busbw against a
# 450 GB/s per-direction line rate (NVIDIA/nccl-tests#212, a maintainer's answer; #272 on H200).
NVLS_MIN_GENERATION = 4
NVLS_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


class BusBandwidthBound(BaseModel):
    """The most a GPU's link carries per direction; busbw above it is impossible."""

    gbps: float | None
    link: str | None = None  # which link bounds it, and from where its rate comes
    reason: str | None = None  # why there is no bound

    @property
    def known(self) -> bool:
        return self.gbps is not None


def _no_bound(reason: str) -> BusBandwidthBound:
    return BusBandwidthBound(gbps=None, reason=reason)


def busbw_bound(
    collective_name: str,
    ranks: int,
    interconnect: str | None,
    host_gpus: int | None,
    spec: GpuSpec | None,
    pcie_generation: int | None = None,
    pcie_lanes: int | None = None,
) -> BusBandwidthBound:
    """The per-direction line rate of the link that carries the traffic between a host's GPUs.

    `interconnect` is the fingerprint's topology class (nvlink-all-pairs, nvlink-partial,
    pcie-only, single-gpu); `spec` the GPU's entry in hardware.yaml; the PCIe generation and
    lanes measured on the host (nvidia-smi's maximum link) take precedence over hardware.yaml's.
    With NVLink the bound is NVLink's rate (assuming NCCL routes GPU-to-GPU traffic over NVLink
    where there is NVLink, not over PCIe as well); with PCIe only, the GPU's own PCIe link.
    Unknown inputs give no bound, and the bound says why.
    """
    collective(collective_name)
    if ranks <= 1:
        return _no_bound("one rank: no data crosses a link")
    if interconnect is None:
        return _no_bound("the topology of the GPUs was not recorded")
    if interconnect == "single-gpu":
        return _no_bound("one GPU in the host: no GPU-to-GPU link")
    if host_gpus is not None and ranks > host_gpus:
        return _no_bound(
            f"{ranks} ranks on a host of {host_gpus} GPUs: the network bounds it, which the kit does not model"
        )
    if spec is None:
        return _no_bound("the GPU is not in manifests/hardware.yaml")
    if interconnect in ("nvlink-all-pairs", "nvlink-partial"):
        rate = spec.interconnect_bidirectional_gb_per_s.value
        generation = spec.interconnect_generation.value
        if rate is None:
            return _no_bound(
                f"no NVLink rate for {spec.model} in hardware.yaml ({spec.interconnect_bidirectional_gb_per_s.note})"
            )
        if (
            interconnect == "nvlink-all-pairs"
            and generation is not None
            and generation >= NVLS_MIN_GENERATION
            and collective_name in NVLS_COLLECTIVES
        ):
            return _no_bound(
                f"NVLink {generation}: NCCL can use NVLink SHARP (in-switch reduction and multicast) for "
                f"{collective_name}, with which busbw is not a wire bandwidth and can exceed the line rate "
                "(NVIDIA/nccl-tests#212)"
            )
        partial = " (some GPU pairs only; rings that cross PCIe are slower)" if interconnect == "nvlink-partial" else ""
        return BusBandwidthBound(
            gbps=rate / 2,
            link=f"NVLink{f' {generation}' if generation else ''}{partial}: {rate:g} GB/s per GPU both directions, "
            f"{rate / 2:g} GB/s each way ({spec.model}, hardware.yaml)",
        )
    if interconnect == "pcie-only":
        source = "measured on the host (nvidia-smi, maximum link)"
        generation, lanes = pcie_generation, pcie_lanes
        if generation is None or lanes is None:
            generation = generation or spec.pcie_generation.value
            lanes = lanes or spec.pcie_lanes.value
            source = "hardware.yaml"
        if generation is None or lanes is None:
            return _no_bound(
                f"the PCIe generation or width of {spec.model} is known neither from the host nor from hardware.yaml"
            )
        if generation not in PCIE_GB_PER_S_PER_LANE:
            return _no_bound(f"PCIe generation {generation} has no tabled rate in kit/comm/link_bounds.py")
        gbps = PCIE_GB_PER_S_PER_LANE[generation] * lanes
        return BusBandwidthBound(gbps=gbps, link=f"PCIe Gen{generation} x{lanes}: {gbps:.1f} GB/s each way ({source})")
    return _no_bound(f"unrecognised interconnect {interconnect!r}")


def sweep_bound(sweep: CommSweep, device: str, hardware: HardwareTable | None = None) -> BusBandwidthBound:
    """The bound for a recorded sweep, from what its workload saw of the host."""
    if device != "cuda":
        return _no_bound("CPU processes exchange data through host memory (gloo): no GPU link applies")
    if sweep.topology is None or sweep.topology.interconnect is None:
        reason = sweep.topology.unavailable if sweep.topology else None
        return _no_bound("the topology of the GPUs was not recorded" + (f" ({reason})" if reason else ""))
    names = sorted(set(sweep.device_names))
    if len(names) != 1:
        return _no_bound(f"GPU model not recorded or mixed ({', '.join(names) or 'none'})")
    spec = (hardware or load_hardware()).lookup(names[0])
    return busbw_bound(
        sweep.collective,
        sweep.ranks,
        sweep.topology.interconnect,
        sweep.topology.gpu_count,
        spec,
        sweep.topology.pcie_generation,
        sweep.topology.pcie_lanes,
    )


def internode_bound(device: str, node_networks: dict[str, NetworkInfo | None]) -> BusBandwidthBound:
    """The bound of a sweep whose ranks span nodes: the network between them, from each node's
    fingerprint (`None`: the node has none). A ring's bus bandwidth is the traffic each node
    sends out per direction, spread over its NICs, so the bound is the slowest node's active
    RDMA ports together, each way (Gb/s / 8). It assumes no reduction in the network (SHARP):
    with it, NCCL's busbw is no wire bandwidth. Ethernet NICs are not read, and a CPU sweep
    (gloo, over TCP) uses no RDMA port: both have no known bound, never an invented one."""
    if device != "cuda":
        return _no_bound(
            "CPU processes exchange data over TCP (gloo) on whatever network joins the nodes; "
            "the kit does not read its rate"
        )
    per_node: dict[str, list[float]] = {}  # a node's active RDMA ports' rates, Gb/s
    for node, network in node_networks.items():
        if network is None:
            return _no_bound(f"node {node} has no fingerprint")
        active = [rate for port in network.rdma_ports if port.state == "ACTIVE" and (rate := port.rate_gbps)]
        if not active:
            return _no_bound(
                f"no active RDMA port in {node}'s fingerprint ({network.unavailable or 'none up'}); "
                "Ethernet rates are not read"
            )
        per_node[node] = active
    if not per_node:
        return _no_bound("the nodes the ranks ran on are not recorded")
    node, ports = min(per_node.items(), key=lambda item: sum(item[1]))
    total = sum(ports)
    return BusBandwidthBound(
        gbps=total / 8,
        link=f"the network: {node}'s {len(ports)} active RDMA port(s), {total:g} Gb/s together, {total / 8:g} GB/s each "
        "way (the slowest node, from its fingerprint; without in-network reduction)",
    )
