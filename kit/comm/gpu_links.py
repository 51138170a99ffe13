"""The GPU links where a comm case runs, as nvidia-smi shows them (NVLink, the PCIe generation and
width): what the link bound of its sweep is read against (kit.comm.link_bounds).
"""

from __future__ import annotations

import subprocess

from kit.comm.sweep import TopologyFacts


def _nvidia_smi(*args: str) -> str:
    done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip()[:300] or f"exit code {done.returncode}")
    return done.stdout


def topology_facts(ranks: int) -> TopologyFacts:
    """The topology class of the host (kit.host.nvidia_topology's reading of `nvidia-smi topo -m`) and
    the slowest maximum PCIe link of its first `ranks` GPUs; what cannot be read is said."""
    from kit.host.nvidia_topology import classify_topology, parse_topology_matrix

    facts = TopologyFacts()
    try:
        topology = classify_topology(parse_topology_matrix(_nvidia_smi("topo", "-m")))
        facts.interconnect, facts.gpu_count, facts.label = topology.interconnect, topology.gpu_count, topology.label
    except Exception as exc:  # noqa: BLE001 - recorded, the bound then says it is unknown
        facts.unavailable = f"nvidia-smi topo -m: {type(exc).__name__}: {exc}"
        return facts
    try:
        query = "--query-gpu=pcie.link.gen.max,pcie.link.width.max"
        rows = [
            line.split(",") for line in _nvidia_smi(query, "--format=csv,noheader,nounits").splitlines() if line.strip()
        ]
        links = [(int(gen), int(width)) for gen, width in rows[:ranks]]
        facts.pcie_generation = min(gen for gen, _ in links)
        facts.pcie_lanes = min(width for _, width in links)
    except Exception as exc:  # noqa: BLE001
        facts.unavailable = f"PCIe link query: {type(exc).__name__}: {exc}"
    return facts
