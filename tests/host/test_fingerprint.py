"""kit.host.fingerprint: parsers on outputs recorded on real machines, and collection on this host.

The topology fixtures are `nvidia-smi topo -m` outputs pasted in public issues or recorded on a
GPU host by the kit's authors; each has a .source file naming where it came from.
"""

import json
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from support import FIXTURES, REPO

import kit
from kit.host import clock_events, kit_source, redaction_tokens
from kit.host import collection as fingerprint_collection
from kit.host import facts as host_facts
from kit.host import this_host as host
from kit.host.fingerprint import Fingerprint, Gpu
from kit.host.nvidia_topology import TopologyParseError, classify_topology, parse_topology_matrix
from kit.workloads import probe

TOPO = FIXTURES / "topo"


def topo(name: str) -> str:
    return (TOPO / name).read_text()


# --- nvidia-smi topo -m ----------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(TOPO.glob("*.txt")), ids=lambda p: p.stem)
def test_every_topology_fixture_names_its_source(path):
    source = path.with_suffix(".source").read_text()
    assert source.startswith(("https://github.com/", "Recorded by the kit's authors on"))


@pytest.mark.parametrize(
    ("name", "gpus", "nics"),
    [
        ("h20x8-nvswitch-mlx5.txt", 8, 11),
        ("rtx4090x8-pcie-sys-nics.txt", 8, 2),
        ("pcie6-pix-node-sys.txt", 6, 0),
        ("nv4-pairs-pxb-sys-nics.txt", 6, 2),
        ("rtx5090x2-phb.txt", 2, 0),
        ("tesla-p4x1-numa-na.txt", 1, 0),
        ("h200x1-underlined-header.txt", 1, 0),
    ],
)
def test_topology_matrix_has_a_row_and_column_per_device(name, gpus, nics):
    matrix = parse_topology_matrix(topo(name))
    assert len(matrix.gpus) == gpus and len(matrix.nics) == nics
    assert all(matrix.links[d][d] == "X" for d in matrix.devices)
    assert set(matrix.links) == set(matrix.devices)


def test_tab_separated_cells_keep_their_columns_when_nvidia_smi_pads_them():
    matrix = parse_topology_matrix(topo("tesla-p4x1-numa-na.txt"))
    assert matrix.cpu_affinity == {"GPU0": "0-7"} and matrix.numa_affinity == {"GPU0": "N/A"}


def test_a_header_underlined_with_terminal_escapes_is_still_the_header():
    matrix = parse_topology_matrix(topo("h200x1-underlined-header.txt"))
    assert matrix.devices == ["GPU0"] and matrix.cpu_affinity == {"GPU0": "0-15"}
    assert matrix.numa_affinity == {"GPU0": "0"}


def test_an_empty_cpu_affinity_cell_does_not_shift_the_numa_affinity():
    # The real rtx5090x2 output with its CPU-affinity values removed and their tabs kept, as
    # nvidia-smi prints a GPU without CPU affinity ("PHB\t\t0\t\tN/A").
    text = topo("rtx5090x2-phb.txt").replace("\t0-63\t", "\t\t")
    assert "\tPHB\t\t0\t\tN/A" in text
    matrix = parse_topology_matrix(text)
    assert matrix.cpu_affinity == {"GPU0": "", "GPU1": ""}
    assert matrix.numa_affinity == {"GPU0": "0", "GPU1": "0"}
    assert matrix.links["GPU0"] == {"GPU0": "X", "GPU1": "PHB"}


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("h20x8-nvswitch-mlx5.txt", "8 GPUs, all pairs NVLink (NV18)"),
        ("rtx4090x8-pcie-sys-nics.txt", "8 GPUs, PCIe only, cross-socket pairs"),
        ("pcie6-pix-node-sys.txt", "6 GPUs, PCIe only, cross-socket pairs"),
        ("nv4-pairs-pxb-sys-nics.txt", "6 GPUs, NVLink (NV4) on 3 of 15 pairs, others PCIe, cross-socket pairs"),
        ("rtx5090x2-phb.txt", "2 GPUs, PCIe only, pairs through a CPU host bridge"),
    ],
)
def test_topology_class_summarises_the_gpu_pairs(name, label):
    assert classify_topology(parse_topology_matrix(topo(name))).label == label


def test_nvswitch_box_is_all_pairs_nvlink_with_its_bond_width():
    topology_class = classify_topology(parse_topology_matrix(topo("h20x8-nvswitch-mlx5.txt")))
    assert topology_class.interconnect == "nvlink-all-pairs"
    assert topology_class.nvlink_bonds == [18]
    assert topology_class.farthest_pcie_path is None


def test_nvlink_bridged_pairs_are_partial_nvlink():
    topology_class = classify_topology(parse_topology_matrix(topo("nv4-pairs-pxb-sys-nics.txt")))
    assert topology_class.interconnect == "nvlink-partial"
    assert topology_class.farthest_pcie_path == "SYS"


def test_nic_legend_names_the_rdma_devices():
    matrix = parse_topology_matrix(topo("h20x8-nvswitch-mlx5.txt"))
    assert matrix.nic_names["NIC0"] == "mlx5_0"
    assert matrix.nic_names["NIC9"] == "mlx5_11"
    assert matrix.nic_names["NIC10"] == "mlx5_bond_0"
    assert matrix.links["GPU6"]["NIC8"] == "PIX"


def test_nics_without_a_legend_keep_their_column_name():
    matrix = parse_topology_matrix(topo("rtx4090x8-pcie-sys-nics.txt"))
    assert matrix.nic_names == {"NIC0": "NIC0", "NIC1": "NIC1"}
    assert matrix.links["GPU6"]["NIC0"] == "PHB"


def test_cpu_and_numa_affinity_are_read_per_gpu():
    matrix = parse_topology_matrix(topo("h20x8-nvswitch-mlx5.txt"))
    assert matrix.cpu_affinity["GPU0"] == "0-47,96-143"
    assert matrix.cpu_affinity["GPU4"] == "48-95,144-191"
    assert matrix.numa_affinity["GPU7"] == "1"
    assert "NIC0" not in matrix.cpu_affinity


def test_tab_separated_output_with_gpu_numa_id_column_parses():
    matrix = parse_topology_matrix(topo("rtx5090x2-phb.txt"))
    assert matrix.cpu_affinity == {"GPU0": "0-63", "GPU1": "0-63"}
    assert matrix.numa_affinity == {"GPU0": "0", "GPU1": "0"}


def test_legacy_soc_path_counts_as_cross_socket():
    # Drivers from before NODE existed printed the cross-socket path as SOC.
    legacy = topo("pcie6-pix-node-sys.txt").replace("SYS", "SOC")
    assert classify_topology(parse_topology_matrix(legacy)).farthest_pcie_path == "SYS"


def test_output_without_a_matrix_is_a_parse_error():
    with pytest.raises(TopologyParseError, match="GPU0"):
        parse_topology_matrix("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


def test_truncated_matrix_is_a_parse_error():
    lines = topo("pcie6-pix-node-sys.txt").splitlines()
    with pytest.raises(TopologyParseError, match="GPU5"):
        parse_topology_matrix("\n".join(lines[:-1]))


# --- NVML values -----------------------------------------------------------------------------


def test_clock_event_reason_mask_is_named_bit_by_bit():
    assert clock_events.decode_clock_event_reasons(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]
    assert clock_events.decode_clock_event_reasons(0) == []


def test_unknown_clock_event_bits_stay_visible():
    assert clock_events.decode_clock_event_reasons(0x4 | 0x400) == ["sw_power_cap", "unknown_bits_0x400"]


def test_cuda_driver_version_is_decoded():
    assert host_facts.cuda_version_text(12040) == "12.4"
    assert host_facts.cuda_version_text(11080) == "11.8"


def test_nvidia_smi_list_gives_gpu_names_and_skips_mig_devices():
    output = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-257d8671-d0e6-d1a7-dea9-952249a668fa)\n"
        "  MIG 3g.40gb     Device  0: (UUID: MIG-6d1b1d4f-3c2c-5a7e-9c1c-1d0f3f6b2a11)\n"
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-cc7d93b3-73f8-5028-287a-9e617839550e)\n"
    )
    assert host.parse_nvidia_smi_list(output) == ["NVIDIA H100 80GB HBM3"] * 2


# --- host files and commands -----------------------------------------------------------------

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
physical id\t: 0
core id\t\t: 0
cpu cores\t: 2

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
physical id\t: 0
core id\t\t: 1
cpu cores\t: 2
"""


def test_cpuinfo_gives_model_sockets_and_cores():
    cpu = host_facts.parse_cpuinfo(CPUINFO)
    assert (cpu.model, cpu.sockets, cpu.physical_cores, cpu.logical_cpus) == ("AMD EPYC", 1, 2, 2)


def test_hyperthreads_of_one_core_count_once():
    siblings = CPUINFO.replace("core id\t\t: 1", "core id\t\t: 0")
    assert host_facts.parse_cpuinfo(siblings).physical_cores == 1


def test_meminfo_total_is_in_bytes():
    assert host_facts.parse_meminfo_total("MemTotal:       24684084 kB\nMemFree: 1 kB\n") == (24684084 * 1024)


def test_os_release_pretty_name():
    text = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
    assert host_facts.parse_os_release(text) == "Debian GNU/Linux 12 (bookworm)"


@pytest.mark.parametrize(
    ("rate", "gbps"), [("400 Gb/sec (4X NDR)", 400.0), ("100 Gb/sec (4X EDR)", 100.0), ("2.5 Gb/sec (1X SDR)", 2.5)]
)
def test_infiniband_rate_in_gbps(rate, gbps):
    assert host_facts.parse_ib_rate(rate) == gbps


def test_rdma_ports_are_read_from_sysfs(tmp_path):
    # The attribute values of a RoCE port as sysfs shows them.
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    for name, value in {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "100 Gb/sec (4X EDR)",
        "link_layer": "Ethernet",
    }.items():
        (port / name).write_text(value + "\n")
    network = fingerprint_collection.read_rdma_ports(tmp_path)
    assert network.unavailable is None
    [rdma] = network.rdma_ports
    assert (rdma.device, rdma.port, rdma.state, rdma.physical_state, rdma.rate_gbps, rdma.link_layer) == (
        "mlx5_0",
        1,
        "ACTIVE",
        "LinkUp",
        100.0,
        "Ethernet",
    )


def test_host_without_rdma_devices_says_so(tmp_path):
    network = fingerprint_collection.read_rdma_ports(tmp_path / "infiniband")
    assert network.rdma_ports == [] and "does not exist" in network.unavailable


def test_a_docker_engine_that_does_not_answer_is_recorded_with_the_sdks_reason(monkeypatch, tmp_path):
    import docker

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/docker.sock")
    runtime = fingerprint_collection._collect_container_runtime()
    assert runtime.docker_server_version is None and runtime.runtimes == []
    assert runtime.docker_client_version == docker.__version__
    assert runtime.unreadable["docker"].startswith("DockerException: Error while fetching server API version")


def test_docker_info_lists_the_nvidia_runtime():
    # The runtime keys of the engine's /info answer (Docker 28.2.2), as the SDK's info() returns it.
    info = json.loads(
        '{"ServerVersion":"28.2.2","Runtimes":{"io.containerd.runc.v2":{"path":"runc"},'
        '"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}},'
        '"DefaultRuntime":"runc"}'
    )
    assert host_facts.docker_runtimes(info) == (["io.containerd.runc.v2", "nvidia", "runc"], "runc")


def test_container_toolkit_version_is_found():
    output = "NVIDIA Container Toolkit CLI version 1.14.3\ncommit: 53b24618a542025b108239fe602e66e912b7d6e2\n"
    assert host_facts.parse_toolkit_version(output) == "1.14.3"


# --- kit identity ----------------------------------------------------------------------------


def write_workloads(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def test_workload_hash_is_stable_for_the_same_sources(tmp_path):
    a = write_workloads(tmp_path / "a", {"train.py": "step()\n", "comm.py": "x = 1\n"})
    b = write_workloads(tmp_path / "b", {"comm.py": "x = 1\n", "train.py": "step()\n"})
    assert hashed(a) == hashed(b)


def test_workload_hash_changes_with_an_edit_or_a_rename(tmp_path):
    base = hashed(write_workloads(tmp_path / "a", {"train.py": "1\n"}))
    edited = write_workloads(tmp_path / "b", {"train.py": "2\n"})
    renamed = write_workloads(tmp_path / "c", {"serve.py": "1\n"})
    assert base != hashed(edited)
    assert base != hashed(renamed)


def hashed(directory: Path) -> str:
    return kit_source.sources_sha256(directory, directory.glob("*.py"))


def test_the_measuring_code_is_the_workloads_and_every_module_the_metrics_are_computed_with():
    names = {path.relative_to(kit_source.PACKAGE_DIR).as_posix() for path in kit_source.measuring_sources()}
    assert {
        "workloads/train.py",
        "workloads/harness.py",
        "measure/metrics.py",
        "comm/collectives.py",
        "rundir/serving.py",
        "theory/analytic.py",
        "measure/training.py",
        "measure/maxbatch.py",
        "measure/comm.py",
        "measure/serve.py",
        "measure/profile.py",
    } <= names
    assert not names & {
        "cli.py",
        "report/render.py",
        "report/sections/common.py",
        "reference/published.py",
        "reference/claims.py",
        "units.py",
        "console.py",
    }


def test_the_kit_records_its_source_its_manifests_and_whether_its_checkout_was_clean():
    info = kit_source.kit_info()
    assert set(info.manifests_sha256) >= {"protocol.yaml", "hardware.yaml", "images.lock.yaml"}
    assert len(info.source_sha256) == 64 and info.workload_files and isinstance(info.dirty, bool)


# --- redaction -------------------------------------------------------------------------------


def fingerprint_with_gpus() -> Fingerprint:
    # Identifiers as `nvidia-smi -q` prints them for an H800 (UUID, serial number).
    fp = fingerprint_collection.collect()
    gpus = [Gpu(index=0, name="NVIDIA H800", uuid="GPU-34bf77d1-c686-6821-79a8-32d326c5039c", serial="1651323018291")]
    return fp.model_copy(
        update={
            "host": fp.host.model_copy(update={"hostname": "gpu21005"}),
            "gpus": fp.gpus.model_copy(update={"gpus": gpus}),
        }
    )


def test_redaction_removes_hostname_uuid_and_serial():
    redacted = redaction_tokens.redact_identifiers(fingerprint_with_gpus(), b"salt")
    text = redacted.model_dump_json()
    assert redacted.redacted
    for identifier in ("gpu21005", "34bf77d1", "1651323018291"):
        assert identifier not in text


def test_redaction_tokens_are_stable_for_one_salt_and_differ_across_salts():
    fp = fingerprint_with_gpus()
    first = redaction_tokens.redact_identifiers(fp, b"run-1")
    again = redaction_tokens.redact_identifiers(fp, b"run-1")
    other = redaction_tokens.redact_identifiers(fp, b"run-2")
    assert first.host.hostname == again.host.hostname != other.host.hostname
    assert first.gpus.gpus[0].uuid == again.gpus.gpus[0].uuid != other.gpus.gpus[0].uuid


def test_collect_with_redaction_gives_the_same_host_token_within_a_run():
    first, second = fingerprint_collection.collect(redact=True), fingerprint_collection.collect(redact=True)
    assert first.host.hostname == second.host.hostname != socket.gethostname()


# --- collection on this host (no GPU, no nvidia-smi, no pynvml) ------------------------------


@pytest.fixture(scope="module")
def here() -> Fingerprint:
    return fingerprint_collection.collect()


def test_collect_without_nvml_records_why_there_are_no_gpus(here):
    assert here.gpus.gpus == []
    assert here.gpus.unavailable.startswith("NVML not available: ")


def test_collect_without_nvidia_smi_records_why_there_is_no_topology(here):
    assert here.topology.matrix is None
    assert "nvidia-smi" in here.topology.unavailable


def test_collect_describes_the_host(here):
    assert here.host.kernel == platform.release()
    assert here.host.hostname == socket.gethostname()
    assert here.host.cpu.logical_cpus and here.host.memory_bytes
    assert here.collected_at <= datetime.now(timezone.utc)


def test_collect_names_the_kit_and_hashes_its_workloads(here):
    assert here.kit.version == kit.__version__
    measuring = kit_source.measuring_sources()
    assert here.kit.workload_sources_sha256 == kit_source.sources_sha256(kit_source.PACKAGE_DIR, measuring)
    assert "workloads/probe.py" in here.kit.workload_files and "measure/metrics.py" in here.kit.workload_files
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=kit_source.PACKAGE_DIR)
    assert here.kit.git_commit == head.stdout.strip() and "git_commit" not in here.kit.unreadable


def test_fingerprint_survives_a_json_round_trip(here):
    assert Fingerprint.model_validate_json(here.model_dump_json()) == here


def test_collect_takes_the_image_probe():
    """The probe's real output (run here, as it runs in an image) lands in the fingerprint as the
    versions this Python has."""
    import torch
    import transformers

    done = subprocess.run(
        [sys.executable, "-m", "kit.workloads.probe"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    fp = fingerprint_collection.collect(image_probe=fingerprint_collection.read_probe_output(done.stdout))
    assert fp.image.torch == torch.__version__ and fp.image.python == platform.python_version()
    assert fp.image.packages["transformers"] == transformers.__version__ and fp.image.packages["flash-attn"] is None


def test_gpu_names_is_empty_without_nvml_or_nvidia_smi():
    assert host.gpu_names() == []


def test_fingerprint_imports_and_collects_without_torch_or_pynvml():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['pynvml'] = None\n"
        "from kit.host.collection import collect\n"
        "fp = collect()\n"
        "assert fp.gpus.unavailable.startswith('NVML not available'), fp.gpus.unavailable\n"
        "assert sys.modules['torch'] is None\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr


# --- the in-image probe ----------------------------------------------------------------------


def test_cudnn_version_is_decoded_across_the_9_x_encoding_change():
    assert probe.cudnn_version_text(8902) == "8.9.2"
    assert probe.cudnn_version_text(90100) == "9.1.0"


def test_probe_prints_one_json_object_of_versions():
    done = subprocess.run(
        [sys.executable, "-m", "kit.workloads.probe"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert len(done.stdout.strip().splitlines()) == 1
    probed = fingerprint_collection.read_probe_output(done.stdout)
    assert probed.python == platform.python_version()
    assert set(probed.packages) == set(probe.FRAMEWORKS)
    assert json.loads(done.stdout)["packages"] == probed.packages


def test_the_kits_nccl_variables_are_recorded(monkeypatch):
    """A stray NCCL_P2P_DISABLE=1 in the kit's environment turns every local case into a p2p-off
    variant: the fingerprint names it."""
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    assert fingerprint_collection.collect().nccl_environment == {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1"}
