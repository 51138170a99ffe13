"""Judging a run from what its processes left behind."""

from __future__ import annotations

from kit.execute.samples import killed_for_host_memory, launch_samples, run_sample
from kit.rundir.schema import RankSample


def rank(r, status, reason=None):
    return RankSample(
        rank=r,
        world_size=2,
        status=status,
        reason=reason,
        device="cpu",
        device_name="cpu",
        started_at="t",
        finished_at="t",
    )


def judge(ranks, exit_code=0, timed_out=False, expected=2):
    return run_sample(
        index=1,
        ranks=ranks,
        expected_ranks=expected,
        exit_code=exit_code,
        wall_s=1.0,
        timed_out=timed_out,
        timeout_s=60,
    )


def test_all_ranks_ok_and_clean_exit_is_ok():
    assert judge([rank(0, "ok"), rank(1, "ok")]).status == "ok"


def test_an_oom_on_one_rank_explains_errors_on_the_others():
    sample = judge([rank(0, "error", "collective aborted"), rank(1, "oom", "CUDA out of memory")], exit_code=1)
    assert sample.status == "oom" and sample.reason.startswith("rank 1: CUDA out of memory")


def test_unavailable_is_its_own_status():
    assert (
        judge([rank(0, "unavailable", "no flash-attn"), rank(1, "unavailable", "no flash-attn")]).status
        == "unavailable"
    )


def test_a_rank_that_wrote_nothing_is_an_error():
    sample = judge([rank(0, "ok")], exit_code=-9)
    assert sample.status == "error" and "[1]" in sample.reason


def test_a_timeout_wins_over_everything():
    assert judge([rank(0, "ok"), rank(1, "ok")], timed_out=True).status == "timeout"


def test_a_shared_launch_killed_before_its_first_run_wrote_gives_that_run_the_launchs_wall_time(tmp_path):
    out_dirs = [tmp_path / str(i) for i in (1, 2, 3)]
    for folder in out_dirs:
        folder.mkdir()
    samples = launch_samples(
        indices=[1, 2, 3], out_dirs=out_dirs, expected_ranks=2, exit_code=137, wall_s=9.5, timed_out=True, timeout_s=3
    )
    assert [(s.index, s.status, s.wall_s) for s in samples] == [(1, "timeout", 9.5)]
    assert "timeout of 3 s" in samples[0].reason


def test_a_failing_launcher_is_an_error_even_if_ranks_look_fine():
    assert judge([rank(0, "ok"), rank(1, "ok")], exit_code=1).status == "error"


def test_a_served_engine_is_driven_by_one_process_whatever_its_gpus(paper_plan):
    from kit.execute import processes

    serve = next(c for c in paper_plan.cases if c.stage == "serve")
    train = next(c for c in paper_plan.cases if c.stage == "pretrain")
    assert (serve.gpus, processes(serve)) == (8, 1)
    assert processes(train) == train.gpus == 8


def test_a_container_the_kernels_oom_killer_ended_is_out_of_host_memory_said_with_the_hosts_memory(tmp_path):
    """Docker's State.OOMKilled: no process wrote a sample, and the launch's exit code is SIGKILL's
    137; the run ran out of host memory, which is `oom`, not an error."""

    (tmp_path / "1").mkdir()
    [killed] = launch_samples(
        indices=[1],
        out_dirs=[tmp_path / "1"],
        expected_ranks=8,
        exit_code=137,
        wall_s=600.0,
        timed_out=False,
        timeout_s=3600,
    )
    assert killed.status == "error" and "exit code 137" in killed.reason
    said = killed_for_host_memory(killed, 2048 * 2**30)
    assert said.status == "oom"
    assert said.reason == (
        "host out of memory: the kernel's OOM killer ended the container (exit code 137) on a host of 2048 GiB; "
        "see log.txt"
    )
    gpu_oom = killed.model_copy(update={"status": "oom", "reason": "rank 0: OutOfMemoryError: CUDA out of memory"})
    assert killed_for_host_memory(gpu_oom, 2048 * 2**30) == gpu_oom
