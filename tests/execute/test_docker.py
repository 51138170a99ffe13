"""The docker executor on a real engine: smoke cases run in the smoke image, as a user runs them.

`python -m kit.cli run --executor docker ...` runs a pre-training and a fine-tuning case in
containers; a case over its timeout is killed and recorded; a killed `kit` leaves no container
once `kit` starts again. The container settings are checked as pure functions first.
"""

from __future__ import annotations

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
import yaml
from support.docker_engine import containers_of_run, engine_or_skip, smoke_image_or_skip
from support.planted_tokens import PLANTED, files_holding_a_token
from support.recorded_nccl_tests import FIXTURES, case_for, stand_in

from kit.execute import docker, owners
from kit.execute.choice import choose, describe_choice, named
from kit.execute.docker import DockerExecutor
from kit.execute.local import LocalExecutor
from kit.rundir.directory import RunDir

KIT = [sys.executable, "-m", "kit.cli"]
PRETRAIN = "pretrain.tiny-llama.naive.g2"
FINETUNE = "finetune.tiny-llama.l.g2"


def kit(*args, timeout=1200, env=None):
    return subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=timeout, env=env)


def case_of(plan, case_id):
    return next(case for case in plan.cases if case.id == case_id)


# --- settings, as functions of the case -------------------------------------------------------


def test_the_container_runs_the_same_launcher_with_paths_inside(smoke_plan):
    command = docker.container_command(case_of(smoke_plan, PRETRAIN), [2])
    assert command[:5] == ["python", "-m", "kit.workloads.launch", "--nproc", "2"]
    assert command[command.index("--") + 1 : command.index("--") + 4] == ["python", "-m", "kit.workloads"]
    assert command[-4:] == ["--case", "/kit/case/case.json", "--out", "/kit/case/runs/2"]


def test_the_environment_carries_the_cases_variables_and_a_token_only_when_set(smoke_plan):
    case = case_of(smoke_plan, PRETRAIN).model_copy(deep=True)
    case = case.model_copy(update={"params": case.params.model_copy(update={"env": {"NCCL_DEBUG": "INFO"}})})
    assert docker.container_environment(case, {})["NCCL_DEBUG"] == "INFO"
    assert "HF_TOKEN" not in docker.container_environment(case, {})
    assert docker.container_environment(case, {"HF_TOKEN": "t0k"})["HF_TOKEN"] == "t0k"


def test_gpus_are_requested_by_count_or_all(paper_plan, smoke_plan):
    case = next(c for c in paper_plan.cases if c.gpus == 8)
    assert docker.gpu_request(case, host_gpus=8)[0]["Count"] == -1
    assert docker.gpu_request(case, host_gpus=16)[0]["Count"] == 8
    assert docker.gpu_request(case_of(smoke_plan, PRETRAIN), host_gpus=0) == []


def test_a_container_whose_owner_process_is_gone_is_a_leftover():
    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = {
        docker.LABEL_OWNER_PID: str(os.getpid()),
        docker.LABEL_OWNER_START: docker.process_start_ticks(os.getpid()),
        docker.LABEL_OWNER_HOST: platform.node(),
    }
    assert docker.owner_alive(mine)
    assert not docker.owner_alive({**mine, docker.LABEL_OWNER_PID: str(dead.pid)})
    assert not docker.owner_alive({**mine, docker.LABEL_OWNER_START: "1"})  # the pid was reused
    assert docker.owner_alive({**mine, docker.LABEL_OWNER_PID: str(dead.pid), docker.LABEL_OWNER_HOST: "elsewhere"})


# --- choice of executor -----------------------------------------------------------------------


@pytest.mark.docker
def test_by_default_a_case_runs_in_docker_when_its_image_is_here(smoke_plan):
    smoke_image_or_skip()
    case = case_of(smoke_plan, PRETRAIN)
    assert isinstance(choose(case), DockerExecutor) and isinstance(choose(case, named("local")), LocalExecutor)
    assert describe_choice([case]).startswith("executor: docker")


@pytest.mark.docker
def test_a_gpu_case_runs_in_docker_even_before_its_image_is_here(paper_plan):
    smoke_image_or_skip()
    case = next(c for c in paper_plan.cases if c.image == "serve-tgi")  # never present in CI
    assert docker.unavailable_reason(case) is not None
    assert isinstance(choose(case), DockerExecutor) and isinstance(choose(case, named("local")), LocalExecutor)
    assert describe_choice([case]).startswith("executor: docker, each case in its pinned image")


@pytest.mark.docker
def test_by_default_a_cpu_case_whose_image_is_missing_runs_locally(smoke_plan, manifests_copy):
    smoke_image_or_skip()
    lock = yaml.safe_load((manifests_copy / "images.lock.yaml").read_text())
    lock["images"]["smoke"]["reference"] = "kit-test/never-built:1"
    (manifests_copy / "images.lock.yaml").write_text(yaml.safe_dump(lock))
    case = case_of(smoke_plan, PRETRAIN)
    assert isinstance(choose(case), LocalExecutor)
    assert "executor: local" in describe_choice([case]) and "not present locally" in describe_choice([case])


# --- real runs ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_run(tmp_path_factory):
    """One `kit run --executor docker` of a smoke pre-training and a smoke fine-tuning case, on an
    empty kit cache (as a fresh machine has it: the ops and the checkpoint are made by the run),
    with credentials in its environment (the executor hands the tokens on to the containers)."""
    smoke_image_or_skip()
    folder = tmp_path_factory.mktemp("docker-run")
    run = folder / "run"
    env = {**os.environ, **PLANTED, "KIT_CACHE": str(folder / "cache")}
    done = kit(
        "run",
        "--executor",
        "docker",
        "--profile",
        "smoke",
        "--case",
        PRETRAIN,
        "--case",
        FINETUNE,
        "--out",
        str(run),
        env=env,
    )
    return run, done


@pytest.mark.docker
def test_tokens_handed_to_the_containers_appear_in_no_file_of_the_run(docker_run):
    run, done = docker_run
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_holding_a_token(run, done.stdout, done.stderr) == []


@pytest.mark.docker
@pytest.mark.parametrize("case_id", [PRETRAIN, FINETUNE], ids=["pretraining", "finetuning"])
def test_a_smoke_case_runs_in_the_smoke_container(docker_run, case_id):
    run, done = docker_run
    assert done.returncode == 0, done.stderr[-3000:]
    assert "executor: docker (as asked)" in done.stderr
    result = RunDir(run).read_result(case_id)
    assert result.status == "ok", result.reason
    assert result.executor == "docker"
    for sample in result.samples:
        container = sample.container
        assert container is not None and container.image == "kit/smoke:0.1.0"
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", container.image_digest)
        assert re.fullmatch(r"[0-9a-f]{64}", container.container_id)
        assert container.exit_code == 0 and container.oom_killed is False
        assert {rank.versions["torch"] for rank in sample.ranks} == {"2.13.0+cpu"}
    log = (run / "cases" / case_id / "log.txt").read_text()
    assert f"docker image kit/smoke:0.1.0 ({result.samples[0].container.image_digest})" in log
    assert "rank 0, run 1: ok" in log  # the workload's own output, streamed from the container
    if case_id == FINETUNE:  # LoRA loads a checkpoint: made first by the kit's image, then mounted read-only
        assert "making the synthetic checkpoint of tiny-llama" in log
        assert all(
            rank.details.weights.startswith("synthetic checkpoint tiny-llama-") for rank in result.samples[0].ranks
        )


@pytest.mark.docker
def test_the_run_records_its_images_and_leaves_no_container(docker_run):
    run, done = docker_run
    info = json.loads((run / "run.json").read_text())
    assert info["executor"] == "docker"
    assert list(info["images"]) == ["kit/smoke:0.1.0"] and info["images"]["kit/smoke:0.1.0"].startswith("sha256:")
    assert containers_of_run(run) == []


@pytest.mark.docker
def test_a_case_over_its_timeout_is_killed_and_recorded_as_timeout(tmp_path, manifests_copy):
    smoke_image_or_skip()
    protocol = manifests_copy / "protocol.yaml"
    data = yaml.safe_load(protocol.read_text())
    stage = data["profiles"]["smoke"]["stages"]["pretrain"]
    # The smoke profile's three runs share one launch, whose budget is three runs' timeouts: 3 s.
    stage["params"] = {**stage["params"], "timeout_s": 1}
    protocol.write_text(yaml.safe_dump(data))
    run = tmp_path / "run"
    started = time.monotonic()
    done = kit("run", "--executor", "docker", "--profile", "smoke", "--case", PRETRAIN, "--out", str(run))
    assert done.returncode == 1, done.stderr[-3000:]  # a case ended `timeout`
    result = RunDir(run).read_result(PRETRAIN)
    assert result.status == "timeout" and "timeout of 1 s" in result.reason
    assert len(result.samples) == 1  # a configuration that timed out once is not run again
    assert result.samples[0].container is not None and result.samples[0].wall_s < 3 + docker.KILL_GRACE_S + 30
    assert containers_of_run(run) == []
    assert time.monotonic() - started < 300


def start_kit_and_wait_for_its_container(run: Path) -> subprocess.Popen:
    # SIGINT back to its default: a shell's background job (a CI runner's, say) starts with it ignored.
    process = subprocess.Popen(
        [*KIT, "run", "--executor", "docker", "--profile", "smoke", "--case", PRETRAIN, "--out", str(run)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 300
    while not [c for c in containers_of_run(run) if c.status == "running"]:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no container started in 5 minutes"
        time.sleep(0.5)
    return process


@pytest.mark.docker
def test_a_training_container_has_no_network_no_capabilities_no_root_and_its_own_shared_memory(tmp_path):
    smoke_image_or_skip()
    run = tmp_path / "run"
    process = start_kit_and_wait_for_its_container(run)
    try:
        container = next(c for c in containers_of_run(run) if c.status == "running")
        host = container.attrs["HostConfig"]
        assert (
            host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
        )
        assert host["IpcMode"] != "host" and host["ShmSize"] == 16 * 2**30
        user = container.attrs["Config"]["User"]  # the kit's user, or nobody under a root kit: never root
        assert user == "{}:{}".format(*docker.container_user()) and not user.startswith("0:")
        binds = {bind.split(":")[1]: bind.split(":")[2] for bind in host["Binds"]}
        assert binds[docker.SOURCE_MOUNT] == "ro" and binds[f"{docker.CACHE_MOUNT}/checkpoints"] == "ro"
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)


@pytest.mark.docker
def test_ctrl_c_removes_the_running_container_and_marks_the_run_interrupted(tmp_path):
    smoke_image_or_skip()
    run = tmp_path / "run"
    process = start_kit_and_wait_for_its_container(run)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) == 130, process.stderr.read().decode()[-3000:]
    assert containers_of_run(run) == []
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"


@pytest.mark.docker
def test_killing_kit_mid_case_leaves_no_container_after_the_next_start(tmp_path):
    smoke_image_or_skip()
    run = tmp_path / "run"
    first = start_kit_and_wait_for_its_container(run)
    os.kill(first.pid, signal.SIGKILL)  # no chance to clean up
    first.wait()
    nxt = kit("images", "list")  # any next start of kit
    assert nxt.returncode == 0, nxt.stderr
    for _ in range(20):  # the removal is synchronous in the next start; allow the engine a moment
        if not containers_of_run(run):
            break
        time.sleep(0.5)
    assert containers_of_run(run) == []


@pytest.mark.docker
def test_the_next_start_removes_leftovers_of_dead_owners_and_keeps_live_ones(tmp_path):
    client, smoke = smoke_image_or_skip()
    dead = subprocess.Popen(["true"])
    dead.wait()
    run = tmp_path / "leftover-test"
    common = {
        docker.LABEL_RUN: run.name,
        docker.LABEL_RUN_DIR: str(run.resolve()),
        docker.LABEL_CASE: PRETRAIN,
        docker.LABEL_INDEX: "1",
        docker.LABEL_OWNER_HOST: platform.node(),
    }
    orphan = client.containers.create(
        smoke.id,
        ["sleep", "300"],
        labels={**common, docker.LABEL_OWNER_PID: str(dead.pid), docker.LABEL_OWNER_START: "1"},
    )
    alive = client.containers.create(
        smoke.id,
        ["sleep", "300"],
        labels={
            **common,
            docker.LABEL_OWNER_PID: str(os.getpid()),
            docker.LABEL_OWNER_START: docker.process_start_ticks(os.getpid()),
        },
    )
    mark = owners.mark_path(dead.pid, "1")  # what the dead kit left in the cache before its container
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.touch()
    try:
        orphan.start()
        done = kit("list", "--profile", "smoke")  # any command: the mark says there may be leftovers
        assert done.returncode == 0, done.stderr
        assert f"removed container {orphan.name} left by kit pid {dead.pid}" in done.stderr
        assert [c.id for c in containers_of_run(run)] == [alive.id] and not mark.exists()
    finally:
        for container in (orphan, alive):
            try:
                container.remove(force=True)
            except Exception:
                pass


@pytest.mark.docker
def test_a_missing_image_is_a_recorded_error_not_a_crash(tmp_path, manifests_copy, smoke_plan):
    engine_or_skip()
    lock = yaml.safe_load((manifests_copy / "images.lock.yaml").read_text())
    lock["images"]["smoke"]["reference"] = "kit-test/never-built:1"
    (manifests_copy / "images.lock.yaml").write_text(yaml.safe_dump(lock))
    case_dir = tmp_path / "run" / "cases" / PRETRAIN
    case_dir.mkdir(parents=True)
    with (case_dir / "log.txt").open("w") as log:
        sample = DockerExecutor().run_once(case_of(smoke_plan, PRETRAIN), case_dir, 1, log)
    assert sample.status == "error"
    assert "kit-test/never-built:1" in sample.reason and "docker engine" not in sample.reason
    assert Path(case_dir / "log.txt").read_text().strip()


@pytest.mark.docker
def test_a_gpu_request_the_daemon_refuses_is_that_cases_error_with_the_daemons_message(tmp_path, smoke_plan):
    """On this engine there is no NVIDIA runtime: dockerd refuses every GPU device request."""
    from kit.execute.case_run import result_of
    from kit.host.this_host import gpu_names

    smoke_image_or_skip()
    if gpu_names():
        pytest.skip("this host has GPUs: the daemon would grant the request")
    case = case_of(smoke_plan, PRETRAIN).model_copy(update={"device": "cuda"})
    case_dir = tmp_path / "run" / "cases" / case.id
    case_dir.mkdir(parents=True)
    with (case_dir / "log.txt").open("w") as log:
        sample = DockerExecutor().run_once(case, case_dir, 1, log)
    assert sample.status == "error" and sample.ranks == []
    assert sample.reason.startswith("docker could not start the container: ")
    assert "could not select device driver" in sample.reason  # dockerd's own words
    result = result_of(case, [sample], DockerExecutor.name, "t")
    assert result.status == "error" and result.reason == sample.reason
    assert containers_of_run(tmp_path / "run") == []


RECORDED_COMM = "rtx2080ti-nvlink-old-format-headerless"  # all_gather_perf -g 2, two RTX 2080 Ti


@pytest.fixture(scope="module")
def comm_stand_in_image(tmp_path_factory):
    """An image whose all_gather_perf answers its recorded command with that real run's output
    (tests/support/recorded_nccl_tests.py), on the comm image's PATH: the docker path of an nccl-tests
    case without a GPU toolchain here."""
    client, smoke = smoke_image_or_skip()
    context = tmp_path_factory.mktemp("comm-stand-in")
    (context / "out.txt").write_bytes((FIXTURES / f"{RECORDED_COMM}.txt").read_bytes())
    stand_in(context, RECORDED_COMM, output_at="/opt/nccl-tests/out.txt")
    (context / "Dockerfile").write_text(
        f"FROM {smoke.id}\nCOPY all_gather_perf /opt/nccl-tests/all_gather_perf\n"
        "COPY out.txt /opt/nccl-tests/out.txt\nENV PATH=/opt/nccl-tests:$PATH\n"
    )
    tag = "kit-test/comm-stand-in:2"
    client.images.build(path=str(context), tag=tag, rm=True)
    yield tag
    client.images.remove(tag, force=True)


@pytest.mark.docker
def test_an_nccl_tests_case_runs_its_binary_as_the_container_and_is_read_here(
    comm_stand_in_image, tmp_path, manifests_copy, paper_plan
):
    lock = yaml.safe_load((manifests_copy / "images.lock.yaml").read_text())
    lock["images"]["comm"]["reference"] = comm_stand_in_image
    (manifests_copy / "images.lock.yaml").write_text(yaml.safe_dump(lock))
    # A CPU case: this engine has no GPUs to give (the device request is tested above).
    case = case_for(paper_plan.cases, RECORDED_COMM).model_copy(update={"device": "cpu"})
    case_dir = tmp_path / "run" / "cases" / case.id
    case_dir.mkdir(parents=True)
    with (case_dir / "log.txt").open("w") as log:
        sample = DockerExecutor().run_once(case, case_dir, 1, log)
    assert sample.status == "ok", sample.reason
    assert sample.container.image == comm_stand_in_image and sample.container.exit_code == 0
    [rank] = sample.ranks
    assert rank.details.command[:2] == ["all_gather_perf", "-b"] and len(rank.details.rows) == 12
    out = case_dir / "runs" / "1"
    assert (out / "all_gather_perf.out.txt").read_text() == (FIXTURES / f"{RECORDED_COMM}.txt").read_text()
    assert (out / "rank-0.json").is_file()
    assert containers_of_run(tmp_path / "run") == []


@pytest.mark.docker
def test_a_gpu_run_prepares_its_images_first_and_records_it(tmp_path, manifests_copy):
    """The paper profile on this GPU-less host: the comm image (here: the smoke image under the
    comm name) is found present, the run is docker's, and run.json says both."""
    _, smoke = smoke_image_or_skip()
    lock = yaml.safe_load((manifests_copy / "images.lock.yaml").read_text())
    reference = lock["images"]["smoke"]["reference"]
    lock["images"]["comm"]["reference"] = reference
    (manifests_copy / "images.lock.yaml").write_text(yaml.safe_dump(lock))
    run = tmp_path / "run"
    done = kit("run", "--profile", "paper", "--case", "comm.all_reduce.g8", "--force", "--out", str(run), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "preparing the 1 image(s) the plan runs in: comm" in done.stderr
    assert f"comm: {reference} is present" in done.stderr and "images ready in" in done.stderr
    info = json.loads((run / "run.json").read_text())
    assert info["executor"] == "docker"
    [step] = info["image_preparation"]
    assert (step["name"], step["action"], step["image_id"]) == ("comm", "present", smoke.id)
    assert RunDir(run).read_result("comm.all_reduce.g8").status == "skipped"  # no GPUs here


@pytest.mark.docker
def test_an_image_that_cannot_be_pulled_is_recorded_and_the_others_go_on(manifests_copy):
    from kit import images

    smoke_image_or_skip()
    lock = yaml.safe_load((manifests_copy / "images.lock.yaml").read_text())
    lock["images"]["serve-tgi"]["reference"] = "localhost:1/kit-test/unreachable:1"
    (manifests_copy / "images.lock.yaml").write_text(yaml.safe_dump(lock))
    lines = []
    unreachable, smoke = images.prepare(["serve-tgi", "smoke"], say=lines.append)
    assert unreachable.action == "failed" and "cannot pull localhost:1/kit-test/unreachable:1" in unreachable.error
    assert smoke.action == "present" and smoke.seconds == 0.0
    assert any("serve-tgi: failed after" in line for line in lines)
