"""`kit run --executor slurm` on a real Slurm: the two simulated nodes of tests/slurm/start.sh.

The smoke profile's 2-process cases run as 2 nodes x 1 task over gloo, redacted: no file of the
run or its report names a node or the host, each node is its token everywhere; a job over its time limit
ends its case `timeout`; a rank that dies ends its case `error`, naming that rank and its log;
Ctrl-C leaves no job in squeue.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.identifying_names import places_naming
from support.slurm_cluster import processes_with, queued_jobs, slurm_or_skip

from kit.cache import cache_dir
from kit.execute.node_fingerprint import node_token
from kit.execute.samples import run_sample
from kit.execute.slurm import SlurmExecutor, configured
from kit.host.redaction_tokens import REDACTION_SALT_ENV, redaction_token
from kit.measure.registry import unit_of
from kit.rundir.directory import RunDir, atomic_write_model
from kit.rundir.redact import SALT_FILE
from kit.rundir.schema import RankSample, SlurmJob, SlurmOptions, utc_now

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]
KIT = [sys.executable, "-m", "kit.cli"]
TWO_PROCESS_CASES = ("pretrain.tiny-llama.naive.g2", "comm.all_reduce.g2")


@pytest.fixture
def slurm_nodes():
    nodes = slurm_or_skip()
    assert not queued_jobs(), "kit jobs are already queued: another run uses this Slurm"
    yield nodes
    assert not queued_jobs(), "the test left kit jobs in squeue"


def machine_token(name: str) -> str:
    """The token of a name in this machine's redacted runs and reports (kit.rundir.redact.use_machine_salt)."""
    return redaction_token(name, (cache_dir() / SALT_FILE).read_bytes().strip())


def kit_run(out: Path, *cases: str, extra: tuple[str, ...] = ()) -> list[str]:
    selected = [part for case in cases for part in ("--case", case)]
    return [
        *KIT,
        "run",
        "--profile",
        "smoke",
        "--executor",
        "slurm",
        "--nodes",
        "2",
        "--no-preflight",
        "--out",
        str(out),
        *selected,
        *extra,
    ]


def test_two_process_smoke_cases_run_as_two_nodes_of_one_task_naming_no_node_when_redacted(slurm_nodes, tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(
        kit_run(run, *TWO_PROCESS_CASES, extra=("--redact",)), capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    n1, n2 = machine_token("n1"), machine_token("n2")
    assert sorted(path.name for path in (run / "slurm" / "shared-run-dir-check" / "nodes").iterdir()) == sorted(
        [n1, n2]
    )
    info = RunDir(run).read_info()
    assert info.executor == "slurm" and info.slurm.nodes == 2 and info.status == "finished" and info.redacted
    for case_id in TWO_PROCESS_CASES:
        result = RunDir(run).read_result(case_id)
        assert result.status == "ok", f"{case_id}: {result.reason}"
        assert result.executor == "slurm"
        figure = result.metrics[unit_of(result.case).headline]
        assert figure.n == result.case.params.runs == len(result.samples) and figure.mean > 0
        for sample in result.samples:
            assert sample.slurm_job.state == "COMPLETED" and sample.slurm_job.nodes == f"{n1},{n2}"  # n[1-2]
            assert sorted(rank.rank for rank in sample.ranks) == [0, 1]
            assert all(rank.world_size == 2 and rank.status == "ok" for rank in sample.ranks)
        job_files = run / "cases" / case_id / "slurm"
        script = (job_files / "launch-1.sbatch").read_text()
        assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n" in script
        (job_output,) = job_files.glob("job-*.out")
        assert f"on {n1},{n2}, master 127.0.0.1:" in job_output.read_text()  # one rank on each node
        assert sorted(path.name.rsplit("-", 1)[1] for path in job_files.glob("job-*-rank-*.log")) == ["0.log", "1.log"]
        assert "--- job-" in (run / "cases" / case_id / "log.txt").read_text()
    check = subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=run, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    # Each node fingerprinted on itself (by the check job: no other job was needed), and the comm
    # case over both nodes called inter-node.
    assert info.node_fingerprints == {n1: f"fingerprints/{n1}.json", n2: f"fingerprints/{n2}.json"}
    assert not list((run / "slurm" / "node-fingerprints").glob("*.sbatch"))
    for node in (n1, n2):
        taken = json.loads((run / "fingerprints" / f"{node}.json").read_text())
        assert taken["host"]["hostname"].startswith("redacted-") and taken["image"]["torch"]  # this Python's frameworks
    assert {f"fingerprints/{n1}.json", f"fingerprints/{n2}.json"} <= {
        line.split("  ", 1)[1] for line in (run / "SHA256SUMS").read_text().splitlines()
    }
    comm = RunDir(run).read_result("comm.all_reduce.g2")
    assert all(sample.ranks[0].details.rank_nodes == [n1, n2] for sample in comm.samples)
    assert f"inter-node: ranks on {n1}, {n2} (as each rank said)" in comm.notes
    report = subprocess.run([*KIT, "report", str(run), "--format", "html"], capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    html = (run / "report.html").read_text()
    assert "Fingerprints of the nodes" in html and "The nodes&#39; fingerprints agree on every fact compared." in html
    assert "Across nodes: ranks on several nodes, bound by the network between them" in html
    assert "Within a node" not in html  # the one comm case ran across the nodes
    assert re.search(r"not known.{0,400}TCP \(gloo\)", html, re.S)  # a CPU run: no bound invented
    # No file of the run, nor its report (report.html, in the run directory), names a node (alone
    # or in Slurm's compact list) or this host, in its text or its name.
    assert places_naming(run, [*slurm_nodes, "n[1-2]", platform.node()]) == []


def test_a_resumed_redacted_run_pins_its_jobs_to_the_nodes_its_options_name_by_token(slurm_nodes, monkeypatch):
    """run.json of a redacted run keeps --nodelist and the sbatch arguments with tokens for the
    node names; the executor it resumes with asks Slurm which of its nodes has each token."""
    monkeypatch.setenv(REDACTION_SALT_ENV, "this machine's salt")
    n2 = node_token("n2")
    executor = configured(SlurmOptions(nodelist=n2, sbatch_args=[f"--exclude={node_token('n1')}", "--exclusive"]))
    assert executor.options.nodelist == "n2" and executor.options.sbatch_args == ["--exclude=n1", "--exclusive"]
    assert (
        configured(SlurmOptions(nodelist="redacted-0123456789abcdef")).options.nodelist == "redacted-0123456789abcdef"
    )  # no such node


def test_a_job_over_its_time_limit_ends_its_case_timeout(slurm_nodes, smoke_plan, tmp_path):
    case = next(c for c in smoke_plan.cases if c.id == "pretrain.tiny-llama.naive.g2")
    endless = case.model_copy(update={"params": case.params.model_copy(update={"measured_steps": 100_000})})
    case_dir = tmp_path / "cases" / case.id
    case_dir.mkdir(parents=True)
    atomic_write_model(case_dir / "case.json", endless)
    log = io.StringIO()
    started = time.monotonic()
    (run,) = SlurmExecutor(SlurmOptions(nodes=2, time_limit="1")).run_launch(endless, case_dir, [1], log)
    assert run.status == "timeout", log.getvalue()[-3000:]
    assert "exceeded its time limit (00:01:00)" in run.reason and "TimeLimit" in run.reason
    assert time.monotonic() - started < 240
    assert "DUE TO TIME LIMIT" in log.getvalue()  # Slurm's own words, in the case log


def test_a_rank_that_dies_ends_its_case_error_naming_that_rank_and_its_log(slurm_nodes, tmp_path):
    run = tmp_path / "run"
    kit = subprocess.Popen(
        kit_run(run, TWO_PROCESS_CASES[0]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 300
    while not (rank_one := processes_with("SLURM_PROCID=1", f"{run}/cases/")):
        assert kit.poll() is None and time.monotonic() < deadline, "rank 1 never started"
        time.sleep(0.5)
    time.sleep(5)  # well into its work: the other rank is waiting on it
    for pid in rank_one:
        os.kill(pid, signal.SIGKILL)
    output, _ = kit.communicate(timeout=300)
    assert kit.returncode == 1, output[-3000:]
    result = RunDir(run).read_result(TWO_PROCESS_CASES[0])
    assert result.status == "error"
    assert result.reason.startswith("rank 1 on n2: "), result.reason
    assert "its log: slurm/job-" in result.reason and "-rank-1.log" in result.reason
    log = (run / "cases" / TWO_PROCESS_CASES[0] / "log.txt").read_text()
    assert "-rank-1.log\n" in log and "srun: error: n2: task 1:" in log
    # The report of this run (not redacted), rendered with --redact, names no node nor the host.
    report = subprocess.run(
        [*KIT, "report", str(run), "--redact", "--format", "html", "--out", str(tmp_path / "report")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    html = (tmp_path / "report" / "report.html").read_text()
    assert f"rank 1 on {machine_token('n2')}: " in html
    assert places_naming(tmp_path / "report", [*slurm_nodes, "n[1-2]", platform.node()]) == []


@pytest.mark.parametrize(
    "stop, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM)], ids=["ctrl-c", "sigterm"]
)
def test_ctrl_c_or_sigterm_cancels_the_job_and_leaves_squeue_empty(slurm_nodes, tmp_path, stop, exit_code):
    run = tmp_path / "run"
    kit = subprocess.Popen(
        kit_run(run, TWO_PROCESS_CASES[0]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 300
    while not any(line.endswith("RUNNING") for line in queued_jobs("kit-pretrain")):
        assert kit.poll() is None and time.monotonic() < deadline, "the case's job never ran"
        time.sleep(0.5)
    kit.send_signal(stop)
    output, _ = kit.communicate(timeout=120)
    assert kit.returncode == exit_code, output[-3000:]
    assert not queued_jobs(), "a job of the interrupted run is still queued"
    assert not processes_with("SLURM_PROCID=0", f"{run}/cases/") and not processes_with(
        "SLURM_PROCID=1", f"{run}/cases/"
    )
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert "cancelled" in (run / "cases" / TWO_PROCESS_CASES[0] / "log.txt").read_text()


def test_nodes_that_cannot_reach_the_run_directory_stop_the_run_saying_so(slurm_nodes, tmp_path):
    """The check job runs as another user (`sbatch --uid`, root only), to whom the run directory
    is closed: as to nodes that do not mount it."""
    if os.geteuid() != 0:
        pytest.skip("sbatch --uid, which makes the run directory unreachable to the job, needs root")
    run = tmp_path / "run"
    done = subprocess.run(
        kit_run(run, TWO_PROCESS_CASES[0], extra=("--sbatch-arg=--uid=nobody",)),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "1000"},
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert f"the compute nodes do not see the run directory {run}" in said
    assert "of the 2 node(s) of check job" in said and "wrote their file (none)" in said
    assert not (run / "cases" / TWO_PROCESS_CASES[0] / "result.json").exists()
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"


def test_the_job_of_a_kit_killed_outright_is_cancelled_by_the_next_kit_start(slurm_nodes, tmp_path):
    run = tmp_path / "run"
    kit = subprocess.Popen(kit_run(run, TWO_PROCESS_CASES[0]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not any(line.endswith("RUNNING") for line in queued_jobs("kit-pretrain")):
        assert kit.poll() is None and time.monotonic() < deadline, "the case's job never ran"
        time.sleep(0.5)
    kit.kill()  # SIGKILL: no chance to cancel its job
    kit.wait()
    assert queued_jobs("kit-pretrain"), "the job went with the kit: nothing left to test"
    done = subprocess.run([*KIT, "list", "--profile", "smoke"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f"left by kit pid {kit.pid}" in done.stderr, done.stderr[-2000:]
    deadline = time.monotonic() + 60
    while queued_jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_with("SLURM_PROCID=1", f"{run}/cases/")


def test_a_job_sbatch_refuses_ends_its_case_error_with_slurm_s_words(slurm_nodes, smoke_plan, tmp_path):
    case = next(c for c in smoke_plan.cases if c.id == "pretrain.tiny-llama.naive.g2")
    log = io.StringIO()
    (run,) = SlurmExecutor(SlurmOptions(nodes=2, partition="no-such-partition")).run_launch(
        case, tmp_path / case.id, [1], log
    )
    assert run.status == "error" and "sbatch refused" in run.reason and "Invalid partition name" in run.reason, (
        run.reason
    )


def test_per_node_runs_one_case_on_every_node_at_once_each_into_its_own_run_and_the_fleet_report_compares_them(
    slurm_nodes, tmp_path
):
    """Redacted: each node's run is in a folder named by the node's token, and no file of the
    fleet (the runs, the fleet report) names a node or the host."""
    case_id = "profile.tiny-llama.base.g1"  # one rank: a simulated node has one CPU
    fleet = tmp_path / "fleet"
    done = subprocess.run(
        [
            *KIT,
            "run",
            "--profile",
            "smoke",
            "--executor",
            "slurm",
            "--per-node",
            "--no-preflight",
            "--redact",
            "--out",
            str(fleet),
            "--case",
            case_id,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tokens = [machine_token(node) for node in slurm_nodes]
    assert sorted(path.name for path in fleet.iterdir()) == sorted(tokens)
    spans = []
    for token in tokens:
        run = fleet / token
        info = RunDir(run).read_info()
        assert info.slurm.nodelist == token and info.slurm.nodes == 1 and info.status == "finished"
        assert info.node_fingerprints == {token: f"fingerprints/{token}.json"}  # what the fleet report compares
        assert sorted(path.name for path in (run / "slurm" / "shared-run-dir-check" / "nodes").iterdir()) == [token]
        result = RunDir(run).read_result(case_id)
        assert result.status == "ok", f"{token}: {result.reason}"
        assert all(sample.slurm_job.nodes == token for sample in result.samples)
        assert f"#SBATCH --nodelist={token}\n" in (run / "cases" / case_id / "slurm" / "launch-1.sbatch").read_text()
        spans.append((result.started_at, result.finished_at))
    assert max(start for start, _ in spans) < min(end for _, end in spans), f"the nodes' cases did not overlap: {spans}"
    assert f"compare them: kit report --fleet {fleet / tokens[0]}" in done.stdout + done.stderr
    report = subprocess.run(
        [*KIT, "report", "--fleet", *(str(fleet / token) for token in tokens), "--format", "html"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0 and (fleet / "fleet-report.html").is_file(), report.stdout + report.stderr
    assert places_naming(fleet, [*slurm_nodes, platform.node()]) == []


def test_ctrl_c_of_a_per_node_run_stops_each_nodes_run_and_leaves_squeue_empty(slurm_nodes, tmp_path):
    fleet = tmp_path / "fleet"
    kit = subprocess.Popen(
        [
            *KIT,
            "run",
            "--profile",
            "smoke",
            "--executor",
            "slurm",
            "--per-node",
            "--no-preflight",
            "--out",
            str(fleet),
            "--case",
            "profile.tiny-llama.base.g1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    while sum(line.endswith("RUNNING") for line in queued_jobs("kit-profile")) < len(slurm_nodes):
        assert kit.poll() is None and time.monotonic() < deadline, "the nodes' jobs never ran"
        time.sleep(0.5)
    kit.send_signal(signal.SIGINT)
    output, _ = kit.communicate(timeout=180)
    assert kit.returncode == 130, output[-3000:]
    assert not queued_jobs(), "a job of the interrupted per-node run is still queued"
    for node in slurm_nodes:
        assert json.loads((fleet / node / "run.json").read_text())["status"] == "interrupted", node


@pytest.mark.parametrize("redact", [False, True], ids=["plain", "redacted"])
def test_a_node_a_job_ran_on_without_a_fingerprint_gets_one_from_a_job_pinned_to_it(
    slurm_nodes, tmp_path, monkeypatch, redact
):
    """Redacted, the run's files name the nodes by token (n[1-2] in its results is two tokens): the
    job is pinned to the node with that token, and the script the run keeps names the token."""
    monkeypatch.setenv(REDACTION_SALT_ENV, "this machine's salt")  # the job's environment: the node's token alike
    n1, n2 = (node_token(node) if redact else node for node in ("n1", "n2"))
    run = tmp_path / "run"
    (run / "fingerprints").mkdir(parents=True)
    (run / "fingerprints" / f"{n1}.json").write_text("{}")  # n1 fingerprinted already (by the check job at the start)
    now = utc_now()
    rank = RankSample(
        rank=0, world_size=2, status="ok", device="cpu", device_name="cpu", started_at=now, finished_at=now
    )
    sample = run_sample(index=1, ranks=[rank], expected_ranks=1, exit_code=0, wall_s=1.0, timed_out=False, timeout_s=60)
    nodes = f"{n1},{n2}" if redact else "n[1-2]"
    sample = sample.model_copy(update={"slurm_job": SlurmJob(job_id="1", state="COMPLETED", nodes=nodes)})
    found = SlurmExecutor(SlurmOptions()).fingerprint_nodes(run, [sample], redact=redact)
    assert found == {n1: f"fingerprints/{n1}.json", n2: f"fingerprints/{n2}.json"}
    assert (run / "fingerprints" / f"{n1}.json").read_text() == "{}"  # left alone
    (script,) = (run / "slurm" / "node-fingerprints").glob("*.sbatch")
    assert f"#SBATCH --nodelist={n2}\n" in script.read_text() and "#SBATCH --nodes=1\n" in script.read_text()
    assert json.loads((run / "fingerprints" / f"{n2}.json").read_text())["host"]["hostname"]
    assert "Slurm job" in (run / "slurm" / "node-fingerprints" / "log.txt").read_text()
