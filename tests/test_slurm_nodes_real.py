"""Every node of a Slurm run fingerprinted on the node, and comm across nodes called so, on a real
Slurm: the two simulated nodes of tests/slurm/start.sh (one machine, so their facts agree)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from kit.execute.samples import run_sample
from kit.execute.slurm import SlurmExecutor
from kit.execute.slurm_script import SlurmOptions
from kit.results import RankSample, RunDir, SlurmJob, utc_now
from slurm_cluster import queued_jobs, slurm_or_skip

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]
KIT = [sys.executable, "-m", "kit.cli"]
COMM_CASE = "comm.all_reduce.g2"


@pytest.fixture
def slurm_nodes():
    nodes = slurm_or_skip()
    assert not queued_jobs(), "kit jobs are already queued: another run uses this Slurm"
    yield nodes
    assert not queued_jobs(), "the test left kit jobs in squeue"


def test_a_comm_case_over_two_nodes_is_inter_node_and_the_report_shows_each_nodes_fingerprint(slurm_nodes, tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([*KIT, "run", "--profile", "smoke", "--executor", "slurm", "--nodes", "2", "--no-preflight",
                           "--out", str(run), "--case", COMM_CASE], capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    info = RunDir(run).read_info()
    assert info.node_fingerprints == {"n1": "fingerprints/n1.json", "n2": "fingerprints/n2.json"}
    for node in ("n1", "n2"):
        taken = json.loads((run / "fingerprints" / f"{node}.json").read_text())
        assert taken["host"]["hostname"] and taken["image"]["torch"]  # this Python's frameworks, as the node saw them
    assert {"fingerprints/n1.json", "fingerprints/n2.json"} <= {line.split("  ", 1)[1] for line in (run / "SHA256SUMS").read_text().splitlines()}
    result = RunDir(run).read_result(COMM_CASE)
    assert result.status == "ok", result.reason
    for sample in result.samples:
        assert sample.ranks[0].details["rank_nodes"] == ["n1", "n2"]
    assert "inter-node: ranks on n1, n2 (as each rank said)" in result.notes
    report = subprocess.run([*KIT, "report", str(run), "--format", "html"], capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    html = (run / "report.html").read_text()
    assert "Fingerprints of the nodes" in html and "The nodes&#39; fingerprints agree on every fact compared." in html
    assert "Across nodes: ranks on several nodes, bound by the network between them" in html
    assert "Within a node" not in html  # the one comm case ran across the nodes
    assert re.search(r"not known.{0,400}TCP \(gloo\)", html, re.S)  # a CPU run: no bound invented


def test_a_node_a_job_ran_on_without_a_fingerprint_gets_one_from_a_job_pinned_to_it(slurm_nodes, tmp_path):
    run = tmp_path / "run"
    (run / "fingerprints").mkdir(parents=True)
    (run / "fingerprints" / "n1.json").write_text("{}")  # n1 fingerprinted already (by the check job at the start)
    now = utc_now()
    rank = RankSample(rank=0, world_size=2, status="ok", device="cpu", device_name="cpu", started_at=now, finished_at=now)
    sample = run_sample(index=1, ranks=[rank], expected_ranks=1, exit_code=0, wall_s=1.0, timed_out=False, timeout_s=60)
    sample = sample.model_copy(update={"slurm_job": SlurmJob(job_id="1", state="COMPLETED", nodes="n[1-2]")})
    found = SlurmExecutor(SlurmOptions()).fingerprint_nodes(run, [sample], redact=False)
    assert found == {"n1": "fingerprints/n1.json", "n2": "fingerprints/n2.json"}
    assert (run / "fingerprints" / "n1.json").read_text() == "{}"  # left alone
    (script,) = (run / "slurm" / "node-fingerprints").glob("*.sbatch")
    assert "#SBATCH --nodelist=n2\n" in script.read_text() and "#SBATCH --nodes=1\n" in script.read_text()
    assert json.loads((run / "fingerprints" / "n2.json").read_text())["host"]["hostname"]
    assert "Slurm job" in (run / "slurm" / "node-fingerprints" / "log.txt").read_text()
