"""Across nodes, as pure logic: which facts differ between nodes' fingerprints, Slurm's compact
node lists, whether a sweep's ranks spanned nodes, the network bound of one that did, and a
redacted run's node names as tokens (on output recorded from a real Slurm, tests/fixtures/slurm/).

The fingerprints are two taken on this machine (kit.host.fingerprint.collect); a node that differs is
one of them edited as `other_node` says (another driver, kernel, GPUs and InfiniBand port),
since every node of the test Slurm is this one machine and so the same.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import FIXTURES
from support.identifying_names import places_naming

from kit.comm.link_bounds import internode_bound
from kit.comm.sweep import CommSweep
from kit.execute.node_fingerprint import fingerprint_step, node_token
from kit.execute.slurm_script import check_script, node_fingerprint_script
from kit.host import collection as fingerprint_collection
from kit.host import fingerprint
from kit.host.fingerprint import Gpu, NetworkInfo, RdmaPort
from kit.host.hostlist import expand_hostlist
from kit.host.redaction_tokens import REDACTION_SALT_ENV
from kit.report.sections.environment import differing_facts, node_fingerprint_facts
from kit.rundir.redact import Redactor
from kit.rundir.schema import SlurmOptions

RECORDED = FIXTURES / "slurm"


@pytest.fixture(scope="module")
def two_fingerprints() -> tuple[fingerprint.Fingerprint, fingerprint.Fingerprint]:
    return fingerprint_collection.collect(), fingerprint_collection.collect()


def other_node(taken: fingerprint.Fingerprint) -> fingerprint.Fingerprint:
    """The fingerprint of a node unlike this one: another driver and kernel, eight H100s, one
    active 400 Gb/s InfiniBand port."""
    edited = taken.model_copy(deep=True)
    edited.gpus.driver_version = "570.86.15"
    edited.gpus.gpus = [Gpu(index=i, name="NVIDIA H100 80GB HBM3") for i in range(8)]
    edited.host.kernel = "5.15.0-1000-edited"
    edited.network = NetworkInfo(
        rdma_ports=[RdmaPort(device="mlx5_0", port=1, state="ACTIVE", rate="400 Gb/sec (4X NDR)", rate_gbps=400.0)]
    )
    return edited


def differing(fingerprints: dict) -> dict[str, dict[str, str]]:
    rows, _ = differing_facts(node_fingerprint_facts(fingerprints))
    found, fact = {}, None
    for row in rows:
        fact = row.cells[0].text or fact
        for node in row.cells[2].text.split(", "):
            found.setdefault(fact, {})[node] = row.cells[1].text
    return found


def test_two_fingerprints_of_one_machine_differ_in_nothing_the_report_compares(two_fingerprints):
    rows, equal = differing_facts(node_fingerprint_facts(dict(zip(("n1", "n2"), two_fingerprints))))
    assert rows == [] and "GPUs" in equal and "Driver, CUDA (driver)" in equal


def test_each_fact_that_differs_is_named_with_each_nodes_value(two_fingerprints):
    here, _ = two_fingerprints
    found = differing({"n1": here, "n2": other_node(here), "n3": here})
    assert set(found) == {"Operating system, kernel", "GPUs", "Driver, CUDA (driver)", "RDMA ports"}
    assert found["GPUs"]["n2"] == "8 × NVIDIA H100 80GB HBM3"
    assert found["Driver, CUDA (driver)"]["n2"].startswith("570.86.15")
    assert "5.15.0-1000-edited" in found["Operating system, kernel"]["n2"]
    assert found["RDMA ports"]["n2"] == "mlx5_0/1 ACTIVE 400 Gb/sec (4X NDR)"
    assert found["GPUs"]["n1"] == found["GPUs"]["n3"] != found["GPUs"]["n2"]


@pytest.mark.parametrize(
    "hostlist, names",
    [
        ("n[1-2]", ["n1", "n2"]),
        ("n1", ["n1"]),
        ("gpu[01-03,07],cpu1", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]),
        ("rack[1-2]-node[8-9]", ["rack1-node8", "rack1-node9", "rack2-node8", "rack2-node9"]),
        ("", []),
    ],
)
def test_slurm_s_compact_node_lists_read_as_scontrol_show_hostnames_writes_them(hostlist, names):
    assert expand_hostlist(hostlist) == names


def sweep(rank_nodes: list[str]) -> CommSweep:
    return CommSweep(
        collective="all_reduce",
        backend="torch-gloo",
        ranks=len(rank_nodes) or 2,
        dtype="float32",
        warmup_iters=1,
        iters=1,
        time_statistic="median",
        rows=[],
        rank_nodes=rank_nodes,
    )


def test_a_sweep_is_inter_node_when_its_ranks_said_they_ran_on_different_nodes():
    assert sweep(["n1", "n2"]).span == "inter-node"
    assert sweep(["n1", "n1"]).span == "intra-node"
    assert sweep([]).span is None


def test_the_network_bound_is_the_slowest_nodes_active_rdma_ports_and_never_invented(two_fingerprints):
    here, _ = two_fingerprints
    fast = other_node(here).network
    slow = fast.model_copy(deep=True)
    slow.rdma_ports[0].rate_gbps, slow.rdma_ports[0].rate = 200.0, "200 Gb/sec (4X HDR)"
    slow.rdma_ports.append(RdmaPort(device="mlx5_1", port=1, state="DOWN", rate_gbps=400.0))
    bound = internode_bound("cuda", {"n1": fast, "n2": slow})
    assert bound.gbps == 25.0 and "n2's 1 active RDMA port(s), 200 Gb/s" in bound.link
    assert not internode_bound("cpu", {"n1": fast, "n2": fast}).known
    missing = internode_bound("cuda", {"n1": fast, "n2": None})
    assert not missing.known and "n2 has no fingerprint" in missing.reason
    no_ports = internode_bound(
        "cuda", {"n1": fast, "n2": here.network if not here.network.rdma_ports else NetworkInfo()}
    )
    assert not no_ports.known and "no active RDMA port in n2's fingerprint" in no_ports.reason


def test_the_check_job_fingerprints_its_nodes_and_a_late_node_gets_a_job_pinned_to_it():
    step = fingerprint_step("/usr/bin/python3", Path("/shared/run/fingerprints"), redact=False)
    assert step.startswith("srun /usr/bin/python3 -m kit.execute.node_fingerprint /shared/run/fingerprints || echo")
    check = check_script(Path("/shared/run/slurm/marks"), 2, SlurmOptions(), Path("/shared/run/slurm/job-%j.out"), step)
    assert check.endswith(step + "\n") and "#SBATCH --nodes=2\n" in check
    late = node_fingerprint_script(["n2", "n3"], SlurmOptions(partition="gpu"), Path("/shared/out-%j"), step)
    assert (
        "#SBATCH --nodes=2\n" in late and "#SBATCH --nodelist=n2,n3\n" in late and "#SBATCH --partition=gpu\n" in late
    )


def test_a_redacted_run_names_its_nodes_by_one_token_each_in_every_file_and_file_name(tmp_path, monkeypatch):
    monkeypatch.setenv(REDACTION_SALT_ENV, "this machine's salt")
    run = tmp_path / "run"
    job_files = run / "cases" / "comm.all_reduce.g2" / "slurm"
    job_files.mkdir(parents=True)
    for name in ("srun-rank-failed.out", "scontrol-completed.txt", "sacct-c.txt"):
        shutil.copy(RECORDED / name, job_files / name)
    (run / "fingerprints").mkdir()
    (run / "fingerprints" / "n1.json").write_text('{"host": {"hostname": "n1"}}')
    marks = run / "slurm" / "shared-run-dir-check" / "nodes"
    marks.mkdir(parents=True)
    (marks / "n2").write_text("n2\n")
    (run / "run.json").write_text(
        json.dumps(
            {
                "node_fingerprints": {"n1": "fingerprints/n1.json"},
                "notes": ["inter-node: ranks on n1, n2", "not a node: gpu[01-03], n10"],
            }
        )
    )
    assert {name for _, name in places_naming(run, ["n1", "n2"])} == {"n1", "n2"}
    Redactor(run, ["n1", "n2"]).tree(run)
    assert places_naming(run, ["n1", "n2"]) == []
    n1, n2 = node_token("n1"), node_token("n2")
    assert sorted(path.name for path in (run / "fingerprints").iterdir()) == [f"{n1}.json"]
    assert sorted(path.name for path in marks.iterdir()) == [n2] and (marks / n2).read_text() == f"{n2}\n"
    info = json.loads((run / "run.json").read_text())
    assert info["node_fingerprints"] == {n1: f"fingerprints/{n1}.json"}
    assert info["notes"] == [f"inter-node: ranks on {n1}, {n2}", "not a node: gpu[01-03], n10"]
    assert f"5|COMPLETED|0:0|15|{n1},{n2}\n" in (job_files / "sacct-c.txt").read_text()  # n[1-2], node by node
    assert f" NodeList={n1},{n2} " in (job_files / "scontrol-completed.txt").read_text()
    failed = (job_files / "srun-rank-failed.out").read_text()
    assert (
        f"srun: error: {n2}: task 1: Exited" in failed
        and f"slurmstepd-{n1}: error: *** STEP 3.0 ON {n1} CANCELLED" in failed
    )
