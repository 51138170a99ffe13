"""The Slurm executor's pure logic: Slurm's output read (recorded from a real Slurm, see
tests/fixtures/slurm/SOURCE.md), a job's end as a case status, the rank environment, and the
batch scripts it submits (golden files in tests/golden/slurm/; KIT_UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from support import FIXTURES
from support.golden_files import assert_golden

from kit.cli import cli
from kit.execute.choice import choose, named, needs_local_frameworks
from kit.execute.node_fingerprint import node_token
from kit.execute.per_node import node_arguments
from kit.execute.slurm import SlurmExecutor, judged
from kit.execute.slurm_jobs import (
    FailedTask,
    JobState,
    ended_by_slurm,
    first_failed_task,
    owner_comment,
    owner_of,
    parse_fields,
    parse_sacct,
    parse_scontrol_job,
    parse_submitted,
)
from kit.execute.slurm_script import check_script, layout, pyxis_arguments, time_limit
from kit.host.redaction_tokens import REDACTION_SALT_ENV
from kit.rundir.schema import RankSample, RunSample, SlurmOptions
from kit.workloads.srun_rank import rank_environment

RECORDED = FIXTURES / "slurm"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text(encoding="utf-8")


# --- Slurm's output, as a real Slurm printed it ----------------------------------------------


@pytest.mark.parametrize(
    "name, state, reason, exit_code, signal",
    [
        ("scontrol-pending.txt", "PENDING", "Resources", 0, 0),
        ("scontrol-running.txt", "RUNNING", "None", 0, 0),
        ("scontrol-completed.txt", "COMPLETED", "None", 0, 0),
        ("scontrol-timeout.txt", "TIMEOUT", "TimeLimit", 143, 0),
        ("scontrol-failed.txt", "FAILED", "NonZeroExitCode", 143, 0),
        ("scontrol-cancelled.txt", "CANCELLED", "None", 0, 15),
    ],
)
def test_scontrol_show_job_is_read_as_the_job_it_describes(name, state, reason, exit_code, signal):
    job = parse_scontrol_job(recorded(name))
    assert (job.state, job.reason, job.exit_code, job.signal) == (state, reason, exit_code, signal)
    assert job.active == (state in ("PENDING", "RUNNING"))
    assert job.time_limit in ("00:01:00", "00:15:00")


def test_a_value_may_hold_equals_signs_and_an_empty_value_stays_empty():
    fields = parse_fields(recorded("scontrol-completed.txt"))
    assert fields["TRES"] == "cpu=2,node=2,billing=2"
    assert fields["NodeList"] == "n[1-2]" and fields["BatchHost"] == "n1"
    assert fields["AllocNode:Sid"] == "localhost:4080" and fields["Power"] == ""
    assert fields["JobName"] == "kit-pretrain.tiny-llama.naive.g2"
    assert parse_fields(recorded("scontrol-pending.txt"))["NodeList"] == ""


def test_a_job_slurm_no_longer_knows_is_none():
    assert parse_scontrol_job(recorded("scontrol-unknown.txt")) is None


def test_sacct_gives_each_job_its_own_line_and_nothing_without_accounting():
    lines = recorded("sacct-c.txt")
    assert parse_sacct(lines, "2") == JobState(
        job_id="2", state="TIMEOUT", exit_code=0, signal=0, time_limit="1", nodes="n[1-2]"
    )
    assert parse_sacct(lines, "3").exit_code == 143
    assert parse_sacct(lines, "7").state == "CANCELLED"
    assert parse_sacct(lines, "4") is None
    assert parse_sacct(recorded("sacct-no-dbd.txt"), "2") is None


def test_sbatch_parsable_output_is_the_job_id():
    assert parse_submitted("8\n") == "8"
    assert parse_submitted("1234;cluster-a\n") == "1234"
    with pytest.raises(ValueError, match="no job id"):
        parse_submitted("sbatch: error: Batch job submission failed: Invalid partition name specified\n")


# --- a job's end as the case's status --------------------------------------------------------


def test_each_way_slurm_ends_a_job_is_a_status_with_its_reason():
    timeout = ended_by_slurm(parse_scontrol_job(recorded("scontrol-timeout.txt")))
    assert timeout == (
        "timeout",
        "Slurm job 2: the job exceeded its time limit (00:01:00) and Slurm stopped it; Slurm's reason: TimeLimit",
    )
    assert ended_by_slurm(parse_scontrol_job(recorded("scontrol-cancelled.txt")))[0] == "error"
    assert "by uid 0" in ended_by_slurm(JobState(job_id="9", state="CANCELLED by 0"))[1]
    assert ended_by_slurm(JobState(job_id="9", state="OUT_OF_MEMORY"))[0] == "oom"
    node_fail = ended_by_slurm(JobState(job_id="9", state="NODE_FAIL", nodes="n[3-4]", reason="NodeDown"))
    assert node_fail == (
        "error",
        "Slurm job 9: a node of the job (n[3-4]) failed (Slurm NODE_FAIL); Slurm's reason: NodeDown",
    )
    # Ended by its ranks: their samples say how the run went.
    assert ended_by_slurm(parse_scontrol_job(recorded("scontrol-failed.txt"))) is None
    assert ended_by_slurm(parse_scontrol_job(recorded("scontrol-completed.txt"))) is None


def _sample(index: int, status: str, reason: str | None = None) -> RunSample:
    rank = RankSample(
        rank=0, world_size=1, status="ok", device="cpu", device_name="cpu", started_at="t", finished_at="t"
    )
    return RunSample(index=index, status=status, reason=reason, exit_code=0, wall_s=1.0, ranks=[rank])


def test_slurm_s_end_names_the_run_where_the_launch_stopped_and_leaves_finished_runs_alone():
    timeout = parse_scontrol_job(recorded("scontrol-timeout.txt"))
    runs = judged([_sample(1, "ok"), _sample(2, "error", "ranks [0, 1] wrote no sample")], timeout)
    assert [run.status for run in runs] == ["ok", "timeout"] and "time limit" in runs[1].reason
    assert [run.slurm_job.model_dump() for run in runs] == [timeout.model_dump()] * 2  # where each run happened
    assert judged([_sample(1, "ok")], timeout)[0].status == "ok"
    failed = parse_scontrol_job(recorded("scontrol-failed.txt"))
    assert judged([_sample(1, "oom", "rank 0: CUDA out of memory")], failed)[0].reason == "rank 0: CUDA out of memory"


def test_srun_names_the_rank_that_failed_first_not_those_it_stopped_for_it():
    assert first_failed_task(recorded("srun-rank-failed.out")) == FailedTask(
        node="n2", tasks="1", how="Exited with exit code 3"
    )
    assert first_failed_task("srun: error: n1: task 0: Terminated\n") is None
    assert first_failed_task("srun: error: gpu7: tasks 4-7: Killed\n").tasks == "4-7"
    failed = parse_scontrol_job(recorded("scontrol-failed.txt"))
    run = judged([_sample(1, "error", "rank 0: connection reset by peer")], failed, recorded("srun-rank-failed.out"))[0]
    assert run.reason == (
        "rank 1 on n2: Exited with exit code 3 (srun; its log: slurm/job-3-rank-1.log); "
        "rank 0: connection reset by peer"
    )


def test_a_job_comment_names_the_kit_process_that_submitted_it():
    assert owner_of(owner_comment("node-a.example", 4242, "987654")) == ("node-a.example", "4242", "987654")
    assert owner_of(owner_comment("h", 1, None)) == ("h", "1", "unknown")
    assert owner_of("") is None and owner_of("someone else's job") is None and owner_of("kit-owner:h:1") is None


# --- ranks and nodes -------------------------------------------------------------------------


def test_the_rank_environment_comes_from_slurm_s_task_variables():
    task = {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_NODEID": "1",
    }
    assert rank_environment(task) == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
    }
    assert rank_environment({**task, "SLURM_NTASKS_PER_NODE": "8"})["LOCAL_WORLD_SIZE"] == "8"


def test_ranks_fill_the_nodes_asked_for_or_nodes_of_the_gpus_given():
    assert layout(2, "cpu", SlurmOptions(nodes=2)) == layout(2, "cpu", SlurmOptions(nodes=5))
    assert layout(2, "cpu", SlurmOptions(nodes=2)).tasks_per_node == 1
    assert layout(16, "cuda", SlurmOptions(gpus_per_node=8)).model_dump() == {"nodes": 2, "tasks_per_node": 8}
    assert layout(4, "cuda", SlurmOptions()).model_dump() == {"nodes": 1, "tasks_per_node": 4}
    with pytest.raises(ValueError, match="do not split evenly"):
        layout(3, "cpu", SlurmOptions(nodes=2))


def test_a_time_limit_is_whole_minutes_rounded_up():
    assert [time_limit(s) for s in (1, 60, 61, 900 * 3, 7200)] == [
        "00:01:00",
        "00:01:00",
        "00:02:00",
        "00:45:00",
        "02:00:00",
    ]


def test_pyxis_runs_an_image_by_digest_only():
    with pytest.raises(ValueError, match="registry digest"):
        pyxis_arguments("kit/train:0.1.0", Path("/shared/run"), Path("/opt/src/kit"))


# --- the scripts, as golden files ------------------------------------------------------------


def _script(executor: SlurmExecutor, case, run_dir: Path, indices: list[int]) -> str:
    """The script with this machine's Python and kit source written as placeholders."""
    import sys

    from kit import images

    case_dir = run_dir / "cases" / case.id
    text = executor.script(case, case_dir, indices, case_dir / "slurm")
    return text.replace(sys.executable, "$PYTHON").replace(str(images.kit_source_dir()), "$KIT_SOURCE")


def test_a_smoke_case_as_two_nodes_of_one_task_each(smoke_plan):
    case = next(c for c in smoke_plan.cases if c.id == "pretrain.tiny-llama.naive.g2")
    assert_golden(
        "slurm/smoke-naive-2x1.sbatch",
        _script(SlurmExecutor(SlurmOptions(nodes=2)), case, Path("/shared/runs/r1"), [1, 2, 3]),
    )


def test_a_smoke_case_with_a_memory_cap_holds_it_softly(smoke_plan):
    case = next(c for c in smoke_plan.cases if c.stage == "maxbatch")
    text = _script(SlurmExecutor(SlurmOptions()), case, Path("/shared/runs/r1"), [1])
    cap_kib = int(case.params.memory_cap_gib * 2**30) // 1024
    assert f"ulimit -S -d {cap_kib}\n" in text and "#SBATCH --nodes=1\n" in text


def test_a_paper_case_in_its_image_through_pyxis(paper_plan, manifests_copy):
    lock_file = manifests_copy / "images.lock.yaml"
    lock = yaml.safe_load(lock_file.read_text())
    lock["images"]["train"].update(
        digest="sha256:" + "ab" * 32, digest_source="pushed to the cluster's registry (test)"
    )
    lock_file.write_text(yaml.safe_dump(lock, sort_keys=False))
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.z3.g8")
    options = SlurmOptions(
        partition="gpu",
        account="acme",
        gpus_per_node=4,
        time_limit="02:00:00",
        sbatch_args=["--qos=high", "--exclusive"],
        container_mode="pyxis",
    )
    assert_golden(
        "slurm/paper-z3-2x4-pyxis.sbatch", _script(SlurmExecutor(options), case, Path("/shared/runs/r1"), [2])
    )


def test_a_per_node_run_pins_each_job_and_the_shared_directory_check_to_its_node(smoke_plan):
    case = next(c for c in smoke_plan.cases if c.id == "profile.tiny-llama.base.g1")
    options = SlurmOptions(nodes=1, nodelist="n2")
    assert_golden(
        "slurm/smoke-profile-per-node-n2.sbatch", _script(SlurmExecutor(options), case, Path("/shared/runs/r1/n2"), [1])
    )
    check = check_script(
        Path("/shared/runs/r1/n2/slurm/marks"), 1, options, Path("/shared/runs/r1/n2/slurm/job-%j.out")
    )
    assert "#SBATCH --nodes=1\n" in check and "#SBATCH --nodelist=n2\n" in check


def test_each_nodes_run_is_this_run_into_its_own_folder_on_that_node_alone():
    assert node_arguments(
        ["--profile=smoke", "--case=profile.tiny-llama.base.g1", "--executor=slurm"], "n2", Path("/shared/f")
    ) == [
        "--profile=smoke",
        "--case=profile.tiny-llama.base.g1",
        "--executor=slurm",
        "--out=/shared/f/n2",
        "--nodes=1",
        "--nodelist=n2",
    ]


def test_a_redacted_per_node_run_is_in_a_folder_named_by_its_nodes_token(monkeypatch):
    monkeypatch.setenv(REDACTION_SALT_ENV, "this machine's salt")
    assert node_arguments(["--redact"], "n2", Path("/shared/f"), node_token) == [
        "--redact",
        f"--out=/shared/f/{node_token('n2')}",
        "--nodes=1",
        "--nodelist=n2",
    ]  # the node's name goes to Slurm alone


@pytest.mark.parametrize("extra", [["--nodes", "2"], ["--nodelist", "n1"], ["--resume", "somewhere"]])
def test_a_per_node_run_sets_its_nodes_itself(extra):
    done = CliRunner().invoke(
        cli, ["run", "--case", "profile.tiny-llama.base.g1", "--executor", "slurm", "--per-node", *extra]
    )
    assert done.exit_code == 2 and "--per-node runs each case on one node" in done.output


def test_without_a_digest_a_pyxis_case_is_an_error_that_says_what_to_do(paper_plan, tmp_path):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.z3.g8")
    run = SlurmExecutor(SlurmOptions(container_mode="pyxis")).run_once(
        case, tmp_path / "cases" / case.id, 1, io.StringIO()
    )
    assert run.status == "error" and "push it to a registry" in run.reason


def test_serving_cases_are_not_slurm_jobs(smoke_plan, tmp_path):
    case = next(c for c in smoke_plan.cases if c.workload == "serve")
    run = SlurmExecutor().run_once(case, tmp_path, 1, io.StringIO())
    assert run.status == "unavailable" and "one host" in run.reason


# --- choosing it ------------------------------------------------------------------------------


def test_the_slurm_executor_is_chosen_with_its_options_and_runs_this_python_without_containers(smoke_plan):
    case = smoke_plan.cases[0]
    executor = SlurmExecutor(SlurmOptions(nodes=2))
    assert choose(case, executor) is executor and named("slurm").name == "slurm"
    assert needs_local_frameworks([case], executor)
    assert not needs_local_frameworks([case], SlurmExecutor(SlurmOptions(container_mode="pyxis")))


def test_slurm_options_go_with_the_slurm_executor_only():
    done = CliRunner().invoke(cli, ["run", "--all", "--partition", "gpu", "--dry-run"])
    assert done.exit_code == 2 and "go with --executor slurm" in done.output
    done = CliRunner().invoke(cli, ["run", "--all", "--per-node", "--dry-run"])
    assert done.exit_code == 2 and "go with --executor slurm" in done.output


# --- nccl-tests across nodes (the cluster profile) --------------------------------------------


@pytest.fixture(scope="module")
def cluster_plan(protocol):
    from kit.plan.protocol import build_plan

    return build_plan(protocol, "cluster")


def test_the_cluster_profile_keeps_its_gpu_counts_whatever_the_host(protocol, cluster_plan):
    from kit.plan.protocol import build_plan

    on_eight = build_plan(protocol, "cluster", host_gpus=8)
    for plan in (cluster_plan, on_eight):
        assert sorted({c.gpus for c in plan.cases if c.stage == "comm"}) == [8, 16, 32]
        assert sorted({c.gpus for c in plan.cases if c.stage == "scaling"}) == [8, 16, 32]


def test_a_two_node_nccl_tests_case_is_one_mpi_rank_per_gpu_started_by_srun(cluster_plan):
    case = next(c for c in cluster_plan.cases if c.id == "comm.all_reduce.g16")
    options = SlurmOptions(partition="gpu", gpus_per_node=8, time_limit="00:30:00")
    assert_golden(
        "slurm/cluster-nccl-tests-all_reduce-2x8.sbatch",
        _script(SlurmExecutor(options), case, Path("/shared/runs/r1"), [1]),
    )


def test_rank_0s_output_of_a_two_node_job_is_the_runs_sweep_across_nodes(cluster_plan, tmp_path):
    """The recorded output of all_reduce_perf over two 8 x H100 hosts (tests/fixtures/nccl_tests/
    h100x16-two-nodes-all_reduce.source) as the rank-0 log of a job."""
    from kit.comm.sweep import CommSweep
    from kit.execute.slurm_jobs import JobState

    case = next(c for c in cluster_plan.cases if c.id == "comm.all_reduce.g16")
    job_files, out_dir = tmp_path / "slurm", tmp_path / "runs" / "1"
    job_files.mkdir()
    out_dir.mkdir(parents=True)
    recorded = FIXTURES / "nccl_tests" / "h100x16-two-nodes-all_reduce.txt"
    (job_files / "job-7-rank-0.log").write_text(recorded.read_text())
    job = JobState(job_id="7", state="COMPLETED", exit_code=0, signal=0, nodes="ztan-mig-[235z,gq73]")
    SlurmExecutor(SlurmOptions(gpus_per_node=8)).read_binary_output(case, job, job_files, out_dir, "")
    rank = RankSample.model_validate_json((out_dir / "rank-0.json").read_text())
    sweep = CommSweep.model_validate(rank.details)
    assert rank.status == "ok" and sweep.ranks == 16 and len(sweep.rows) == 31
    assert sweep.span == "inter-node" and sorted(set(sweep.rank_nodes)) == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert sweep.command[7:9] == ["-g", "1"] and (out_dir / "all_reduce_perf.out.txt").is_file()
