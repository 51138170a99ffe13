"""The fork server: a CPU case's ranks are forked from a process that has imported the frameworks,
with the case's thread count, and a launch over its time limit is stopped with all its ranks."""

from __future__ import annotations

import os
import time

from support.interrupted import processes_mentioning

from kit.execute import local
from kit.workloads.forkserver import ForkServer


def comm_case(smoke_plan):
    return next(c for c in smoke_plan.cases if c.id == "comm.all_reduce.g2")


def test_the_ranks_are_forked_with_the_cases_thread_count_not_the_servers(smoke_plan, tmp_path):
    """The server imported torch with 3 threads in its environment; the case asks for 1, and a
    rank forked without setting it again would keep the server's 3."""
    case = comm_case(smoke_plan)
    case = case.model_copy(update={"params": case.params.model_copy(update={"env": {"OMP_NUM_THREADS": "1"}})})
    (tmp_path / "case.json").write_text(case.model_dump_json())
    server = ForkServer({**os.environ, "OMP_NUM_THREADS": "3"}, tmp_path / "server.log")
    try:
        command = local.launcher_command(case, tmp_path / "case.json", [tmp_path / "runs" / "1"])
        launch = server.start(
            2, command[command.index("--") + 1 :], local.process_environment(case), tmp_path / "log.txt", None
        )
        assert launch.wait(timeout=300) == 0, (tmp_path / "log.txt").read_text()[-3000:]
    finally:
        server.close()
    log = (tmp_path / "log.txt").read_text()
    assert sorted(line for line in log.splitlines() if "forked by the fork server" in line) == [
        "rank 0: forked by the fork server, 1 torch threads",
        "rank 1: forked by the fork server, 1 torch threads",
    ]
    assert "rank 0, run 1: ok" in log and "rank 1, run 1: ok" in log
    assert not (tmp_path / "server.log").exists()  # closed with kit, its log with it


def test_a_launch_over_its_time_limit_is_stopped_with_its_ranks(smoke_plan, tmp_path):
    training = next(c for c in smoke_plan.cases if c.id == "pretrain.tiny-llama.naive.g2")
    case = training.model_copy(
        update={"params": training.params.model_copy(update={"timeout_s": 2, "measured_steps": 10_000})}
    )
    case_dir = tmp_path / case.id
    case_dir.mkdir()
    (case_dir / "case.json").write_text(case.model_dump_json())
    started = time.monotonic()
    with (case_dir / "log.txt").open("a") as log:
        (sample,) = local.LocalExecutor().run_launch(case, case_dir, [1], log)
    assert sample.status == "timeout" and time.monotonic() - started < 60
    assert "forked by kit.workloads.forkserver" in (case_dir / "log.txt").read_text()
    assert not processes_mentioning(str(case_dir))  # neither the launcher nor a rank holds the case log


def test_a_second_ctrl_c_during_the_clean_up_ends_the_server_and_removes_its_log(tmp_path):
    """The first Ctrl-C stops the run; a second one lands while kit waits for the server to end
    (held here with SIGSTOP): the server is killed, its log removed, and no traceback escapes."""
    import signal

    server = ForkServer(dict(os.environ), tmp_path / "server.log")
    os.kill(server.process.pid, signal.SIGSTOP)  # a server slow to end: kit waits on it
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    previous = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        server.close()  # the SIGINT, 0.5 s in, is the second Ctrl-C
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert server.process.returncode == -signal.SIGKILL
    assert not (tmp_path / "server.log").exists()
