"""The docker executor: runs a case's independent runs in its pinned image, one container each.

The image stays as published: the kit's code is mounted read-only, the case folder is mounted for
the results, and the container is removed whatever happens (success, failure, timeout, Ctrl-C).
If `kit` itself is killed, a watchdog process removes the container at once; every container
also carries labels naming its run and its owner process, so the next `kit` start removes any
container whose owner is gone (`remove_leftovers`).
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from kit import images
from kit.cache import cache_dir
from kit.child_process import die_with_parent
from kit.comm.gpu_links import topology_facts
from kit.execute import memory_cap_bytes, nccl_tests, processes
from kit.execute.local import launcher_command
from kit.execute.owners import alive, mark_this_process, process_start_ticks
from kit.execute.samples import host_memory_bytes, killed_for_host_memory, launch_samples, serve_run
from kit.files.atomic import appending
from kit.host.this_host import gpu_names
from kit.plan.protocol import Case
from kit.rundir.directory import atomic_write_model
from kit.rundir.schema import ContainerRun, RunSample, utc_now
from kit.rundir.serving import ContainerPort, EngineRecord, EngineStop

NAME = "docker"
KILL_GRACE_S = 10
# Where things are inside the container.
SOURCE_MOUNT = "/opt/kit/src/kit"
CASE_MOUNT = "/kit/case"
CACHE_MOUNT = "/kit/cache"
# NVIDIA's recommendation for PyTorch in containers: the host's IPC namespace (or a large /dev/shm),
# unlimited locked memory, a 64 MiB stack.
SHM_SIZE = "16g"
ULIMITS = {"memlock": (-1, -1), "stack": (67108864, 67108864)}
RLIMIT_TYPES = {"memlock": 8, "stack": 3, "data": 2}  # Linux RLIMIT_* numbers, as runc names a refused one
# A token for gated models is passed on when the user set one, under these names, and never
# written to the case, the log or the result.
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
NOBODY = (65534, 65534)  # the user and group Debian and the images' bases name nobody / nogroup

LABEL_RUN = "kit.run-id"
LABEL_RUN_DIR = "kit.run-dir"  # the run id is a folder name; the folder itself is unique
LABEL_CASE = "kit.case"
LABEL_INDEX = "kit.run-index"
LABEL_OWNER_PID = "kit.owner-pid"
LABEL_OWNER_START = "kit.owner-start"
LABEL_OWNER_HOST = "kit.owner-host"


class ImageMissing(RuntimeError):
    """The case's image is not in the lock, or not present in the local engine."""


# ---------------------------------------------------------------------------------------------
# Which image, and can this host run it
# ---------------------------------------------------------------------------------------------


def locked_image(case: Case) -> images.LockedImage:
    """The lock's entry for the case's image."""
    found = images.image_for_case(case.image)
    if found is None:
        raise ImageMissing(f"the lock ({images.lock_path()}) has no image {case.image!r}")
    return found[1]


def image_reference(case: Case) -> str:
    """The repo:tag the case runs in, as the lock names it."""
    return locked_image(case).reference


def unavailable_reason(case: Case) -> str | None:
    """Why this case cannot run in docker here (no engine, image not in the lock or not local)."""
    try:
        locked = locked_image(case)
        reference = locked.reference
        images.engine()
    except (ImageMissing, images.EngineUnavailable) as exc:
        return str(exc)
    if case.device not in locked.devices:
        return f"image {reference} ({case.image}) runs on {', '.join(locked.devices)}, not {case.device}"
    if images.local_image(reference) is None:
        hint = "pull" if (locked.build is None) else "build"
        return f"image {reference} ({case.image}) is not present locally: kit images {hint} {case.image}"
    return None


# ---------------------------------------------------------------------------------------------
# The container's settings: pure functions of the case, so they can be read and tested
# ---------------------------------------------------------------------------------------------


def container_command(case: Case, indices: list[int]) -> list[str]:
    """The same launcher as the local executor, with paths inside the container; for an
    nccl-tests case, the binary itself (on the comm image's PATH), with no Python and no kit."""
    if nccl_tests.runs_binary(case):
        return nccl_tests.command(case, nccl_tests.binary_name(case))
    out_dirs = [Path(f"{CASE_MOUNT}/runs/{index}") for index in indices]
    return launcher_command(case, Path(f"{CASE_MOUNT}/case.json"), out_dirs, python="python")


def memory_cap_ulimit(case: Case) -> dict[str, tuple[int, int]]:
    """A CPU case's memory cap (TrainParams.memory_cap_gib) as the soft `data` ulimit of its
    processes, the hard one unlimited (-1) so that a one-off build of an op can lift it."""
    cap = memory_cap_bytes(case)
    return {} if cap is None else {"data": (cap, -1)}


def container_environment(case: Case, host_environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """The case's variables (NCCL_* and the like) over the kit's; a token only when the user set one."""
    host_environment = os.environ if host_environment is None else host_environment
    env = {
        "PYTHONUNBUFFERED": "1",
        "KIT_CACHE": CACHE_MOUNT,
        "TORCH_EXTENSIONS_DIR": f"{CACHE_MOUNT}/torch_extensions",
        "HOME": f"{CACHE_MOUNT}/home",
        "USER": "kit",  # getpass.getuser() needs one when the uid has no passwd entry
    }
    if case.device == "cpu":
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // processes(case)))
    env.update(case.params.env)
    for name in TOKEN_VARIABLES:
        if host_environment.get(name):
            env[name] = host_environment[name]
    return env


def gpu_request(case: Case, host_gpus: int):
    """All GPUs when the case uses them all, else the case's count; none for a CPU case."""
    if case.device != "cuda":
        return []
    import docker

    count = -1 if case.gpus >= host_gpus else case.gpus
    return [docker.types.DeviceRequest(count=count, capabilities=[["gpu"]])]


def container_user() -> tuple[int, int]:
    """Who the kit's own containers run as: the kit's user, or nobody when the kit runs as root
    (a root process in a container is root on every file it can reach, capabilities or not)."""
    return NOBODY if os.getuid() == 0 else (os.getuid(), os.getgid())


def hand_over(*folders: Path) -> None:
    """Give the folders a container writes, and what is in them, to its user (a kit run by a user
    owns them already; on a root-squashed NFS share root's files are nobody's already)."""
    if os.getuid() != 0:
        return
    for folder in folders:
        for path in (folder, *folder.rglob("*")):
            if (path.lstat().st_uid, path.lstat().st_gid) != NOBODY:
                os.chown(path, *NOBODY, follow_symlinks=False)


def image_cache(image_name: str) -> Path:
    """This image's built ops and home folder, kept between its containers."""
    return cache_dir() / "containers" / image_name


def mounts(case_dir: Path, image_name: str) -> dict[str, dict[str, str]]:
    """The kit's source (read-only), the case folder, a cache of this image's built ops, and the
    host's synthetic checkpoints (read-only: one per model, made before the case by the kit's
    own image where it needs one)."""
    cache = image_cache(image_name)
    (cache / "home").mkdir(parents=True, exist_ok=True)
    checkpoints = cache_dir() / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    return {
        str(images.kit_source_dir()): {"bind": SOURCE_MOUNT, "mode": "ro"},
        str(case_dir.resolve()): {"bind": CASE_MOUNT, "mode": "rw"},
        str(cache.resolve()): {"bind": CACHE_MOUNT, "mode": "rw"},
        str(checkpoints.resolve()): {"bind": f"{CACHE_MOUNT}/checkpoints", "mode": "ro"},
    }


def owner_labels(case: Case, run_dir: Path, index: int) -> dict[str, str]:
    return {
        LABEL_RUN: run_dir.name,
        LABEL_RUN_DIR: str(run_dir),
        LABEL_CASE: case.id,
        LABEL_INDEX: str(index),
        LABEL_OWNER_PID: str(os.getpid()),
        LABEL_OWNER_START: process_start_ticks(os.getpid()) or "",
        LABEL_OWNER_HOST: platform.node(),
    }


def owner_alive(labels: dict[str, str]) -> bool:
    """Whether the kit process that started a container still runs (on this host)."""
    return alive(labels.get(LABEL_OWNER_HOST, ""), labels.get(LABEL_OWNER_PID, ""), labels.get(LABEL_OWNER_START, ""))


def remove_leftovers(say=None) -> list[str] | None:
    """Remove the containers of kit processes that no longer exist; the names of those removed,
    or None where the engine could not be asked (they may still be there)."""
    if not images.engine_socket_may_exist():
        return []
    try:
        client = images.engine()
        found = client.containers.list(all=True, filters={"label": LABEL_RUN})
    except Exception:
        return None
    removed = []
    for container in found:
        labels = container.labels or {}
        if owner_alive(labels):
            continue
        try:
            container.remove(force=True)
        except Exception:
            continue
        removed.append(container.name)
        if say:
            say(
                f"removed container {container.name} left by kit pid {labels.get(LABEL_OWNER_PID)} "
                f"(run {labels.get(LABEL_RUN)}, case {labels.get(LABEL_CASE)}, run {labels.get(LABEL_INDEX)})"
            )
    return removed


# ---------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------


class _LogPump(threading.Thread):
    """Copies the container's output into the case log as it comes."""

    def __init__(self, container, log):
        super().__init__(daemon=True)
        self.container, self.log = container, log

    def run(self) -> None:
        try:
            for chunk in self.container.logs(stream=True, follow=True):
                self.log.write(chunk.decode("utf-8", errors="replace"))
                self.log.flush()
        except Exception:  # the container was removed under us (Ctrl-C): the log ends there
            pass


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _watchdog_child_setup() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    die_with_parent()


def _start_watchdog(container_id: str) -> subprocess.Popen | None:
    """A process that removes the container if `kit` dies (the kernel signals it, PDEATHSIG).

    Ctrl-C is held back while forking: CPython drops an exception raised in its at-fork
    handlers (seen with 3.11), so a Ctrl-C landing there would be lost and the run go on.
    """
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "kit.execute.docker", "watch", container_id],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_watchdog_child_setup,
        )
    except OSError:
        return None  # the labels and the next start's cleanup remain
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a held Ctrl-C is raised here


def _create_and_start(client, settings: dict, log):
    """Create and start the container; where the engine may not raise a limit, without that one.

    An engine whose own hard memlock limit is low (a sandboxed dockerd) refuses memlock=unlimited
    at start; the run then goes on with the engine's default, and the result says so.
    """
    import docker

    ulimits = dict(settings["ulimits"])
    mark_this_process()
    while True:
        container = client.containers.create(
            **{**settings, "ulimits": [docker.types.Ulimit(name=n, soft=s, hard=h) for n, (s, h) in ulimits.items()]}
        )
        try:
            container.start()
            return container, ulimits
        except BaseException as exc:
            _remove(container)
            if not isinstance(exc, docker.errors.APIError):
                raise
            refused = next((name for name in ulimits if f"rlimit type {RLIMIT_TYPES[name]}:" in str(exc)), None)
            if refused is None:
                raise
            log.write(f"=== the engine refused ulimit {refused}={ulimits.pop(refused)}; running with its default\n")
            log.flush()


def daemon_message(exc: BaseException) -> str:
    """What the docker daemon said (an APIError's explanation), else the error itself."""
    explanation = getattr(exc, "explanation", None)
    if isinstance(explanation, bytes):
        explanation = explanation.decode(errors="replace")
    return str(explanation or exc).strip()


def _remove(container) -> None:
    try:
        container.remove(force=True)
    except Exception:
        pass


def _state(container) -> dict:
    try:
        container.reload()
        return container.attrs.get("State") or {}
    except Exception:
        return {}


def run_dir_of(case_dir: Path) -> Path:
    """cases/<case-id> sits in the run directory (whose name is the run id)."""
    return case_dir.resolve().parent.parent


# ---------------------------------------------------------------------------------------------
# Serving: the engine's image as published, the kit's client on the host
# ---------------------------------------------------------------------------------------------

# The kit's own images, which make a serve case's synthetic checkpoint (never an engine's image).
KIT_IMAGES = {"cuda": "train", "cpu": "smoke"}
MODELS_MOUNT = "/models"
STOP_GRACE_S = 30


class EngineContainer:
    """A started engine container: its port published on the host's loopback only."""

    def __init__(self, container, host_port: int, log_path: Path):
        self.container, self.base_url = container, f"http://127.0.0.1:{host_port}"
        self._log = appending(log_path)
        self._pump = _LogPump(container, self._log)
        self._pump.start()
        self._watchdog = _start_watchdog(container.id)

    def exit_code(self) -> int | None:
        state = _state(self.container)
        return None if state.get("Running") else state.get("ExitCode", -1)

    def stop(self) -> EngineStop:
        """docker stop (SIGTERM, SIGKILL after the grace period), then the container goes."""
        code = self.exit_code()
        outcome = EngineStop(
            stopped_by="itself" if code is not None else f"docker stop (SIGTERM; SIGKILL after {STOP_GRACE_S} s)"
        )
        try:
            if code is None:
                self.container.stop(timeout=STOP_GRACE_S)
            state = _state(self.container)
            outcome.exit_code, outcome.oom_killed = state.get("ExitCode"), bool(state.get("OOMKilled"))
        finally:
            self._pump.join(timeout=KILL_GRACE_S)
            _remove(self.container)
            self._log.close()
            if self._watchdog is not None:
                self._watchdog.kill()
                self._watchdog.wait()
        return outcome


class ContainerPlacement:
    """A serve case's engine in its pinned image, unchanged: its ENTRYPOINT and USER, only the
    engine's documented arguments and variables added, GPUs by device request, /dev/shm as its
    docs ask, its port published on 127.0.0.1 only, the model folder mounted read-only. No kit
    code runs in it; the checkpoint, where one is needed, is made by the kit's own image."""

    name = NAME

    def __init__(self, case_dir: Path, index: int):
        self.case_dir, self.index = case_dir, index

    def _labels(self, case: Case) -> dict[str, str]:
        return owner_labels(case, run_dir_of(self.case_dir), self.index)

    def checkpoint(self, case: Case, say) -> Path:
        from kit.serve.checkpoints import checkpoint_path, make_checkpoint

        kit_image = KIT_IMAGES[case.device]
        reference = images.load_lock().images[kit_image].reference
        if images.local_image(reference) is None:
            raise RuntimeError(
                f"the kit's {kit_image} image ({reference}) makes the checkpoint and is not here: kit images build {kit_image}"
            )
        host_folder = checkpoint_path(case).parent
        host_folder.mkdir(parents=True, exist_ok=True)
        hand_over(host_folder)

        def run(arguments: list[str]) -> tuple[int, str]:
            mark_this_process()
            container = images.engine().containers.run(
                reference,
                ["python", "-m", *arguments],
                detach=True,
                network_disabled=True,
                user="{}:{}".format(*container_user()),
                labels=self._labels(case),
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                environment={
                    "KIT_CACHE": CACHE_MOUNT,
                    "HF_HOME": "/tmp/hf",
                    "HF_HUB_OFFLINE": "1",
                    "PYTHONUNBUFFERED": "1",
                },
                volumes={
                    str(images.kit_source_dir()): {"bind": SOURCE_MOUNT, "mode": "ro"},
                    str(host_folder.resolve()): {"bind": f"{CACHE_MOUNT}/checkpoints", "mode": "rw"},
                },
            )
            try:
                code = container.wait()["StatusCode"]
                output = container.logs().decode("utf-8", errors="replace")
                say(output)
                return code, output
            finally:
                _remove(container)

        return make_checkpoint(case, run, say)

    def start(self, engine, case: Case, model_dir: Path, out_dir: Path, say, cpus: Sequence[int] | None = None):
        from kit.serve.process import free_port

        reference = image_reference(case)
        image = images.local_image(reference)
        if image is None:
            hint = "pull" if locked_image(case).build is None else "build"
            raise RuntimeError(f"image {reference} ({case.image}) is not present: kit images {hint} {case.image}")
        inside = f"{MODELS_MOUNT}/{model_dir.name}"
        command = [*engine.command, *engine.arguments(case, inside, "0.0.0.0", engine.container_port)]
        environment = {**engine.environment(case, cpus), **case.params.env}
        host_port = free_port()
        mark_this_process()
        container = images.engine().containers.run(
            image.id,
            command or None,
            detach=True,
            environment=environment,
            ports={f"{engine.container_port}/tcp": ("127.0.0.1", host_port)},  # reachable from this host only
            volumes={str(model_dir.resolve()): {"bind": inside, "mode": "ro"}},
            shm_size=engine.shm_size,
            # As the image's USER (the engines' own images run as root), without capabilities: an
            # engine serves from its model folder and /dev/shm and needs none of root's powers.
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            device_requests=gpu_request(case, len(gpu_names()) if case.device == "cuda" else 0),
            cpuset_cpus=",".join(map(str, cpus)) if cpus else None,
            labels=self._labels(case),
        )
        say(f"engine container {container.id[:12]} of {reference} ({image.id}), published on 127.0.0.1:{host_port}")
        handle = EngineContainer(container, host_port, out_dir / "engine.log")
        config = image.attrs.get("Config") or {}
        return handle, EngineRecord(
            name=engine.name,
            label=engine.label,
            placement=self.name,
            image=reference,
            image_digest=image.id,
            repo_digests=list(image.attrs.get("RepoDigests") or []),
            entrypoint=config.get("Entrypoint"),
            user=config.get("User") or "root (the image sets none)",
            command=command,
            environment=environment,
            container_id=container.id,
            port=ContainerPort(container=engine.container_port, host=f"127.0.0.1:{host_port}"),
            version=images.load_lock().images[case.image].versions.get(engine.name),
            confinement={
                key: (container.attrs.get("HostConfig") or {}).get(key)
                for key in ("CapDrop", "SecurityOpt", "NetworkMode", "CpusetCpus")
            },
        )


class DockerExecutor:
    """Runs a case's independent runs in its pinned image, one container each."""

    name = NAME
    uses_this_python = False
    on_cluster = False

    def run_once(self, case: Case, case_dir: Path, index: int, log: TextIO) -> RunSample:
        """One independent run in a fresh container: start, stream its log, wait up to the timeout."""
        if case.workload == "serve":
            return serve_run(case, case_dir, index, log, ContainerPlacement(case_dir, index))
        return self.run_launch(case, case_dir, [index], log)[0]

    def run_launch(self, case: Case, case_dir: Path, indices: list[int], log: TextIO) -> list[RunSample]:
        """One container doing the runs `indices` one after another (one run unless the case shares
        a launch between its runs); the runs it finished, in order."""
        import requests

        index = indices[0]
        out_dirs = [case_dir / "runs" / str(i) for i in indices]
        for folder in out_dirs:
            folder.mkdir(parents=True, exist_ok=True)
        out_dir = out_dirs[0]
        started = time.monotonic()

        def failed(reason: str) -> list[RunSample]:
            log.write(f"=== run {index}: {reason}\n")
            log.flush()
            return [
                RunSample(
                    index=index,
                    status="error",
                    reason=reason,
                    exit_code=None,
                    wall_s=time.monotonic() - started,
                    ranks=[],
                )
            ]

        reason = unavailable_reason(case)
        if reason is not None:
            return failed(reason)
        import docker

        client = images.engine()
        reference = image_reference(case)
        try:
            image = client.images.get(reference)
        except docker.errors.DockerException as exc:  # removed since the check, or the engine went away
            return failed(f"docker could not read image {reference}: {daemon_message(exc)}")

        if case.needs_checkpoint:  # made first, by the kit's own image: the case's mount of it is read-only
            try:
                ContainerPlacement(case_dir, index).checkpoint(
                    case, say=lambda line: (log.write(f"{line}\n"), log.flush())
                )
            except (RuntimeError, docker.errors.DockerException) as exc:
                return failed(f"the synthetic checkpoint could not be made: {exc}")
        binary = nccl_tests.runs_binary(case)
        command = container_command(case, indices)
        environment = container_environment(case)
        started_at = utc_now()
        settings = {
            "image": image.id,
            "command": command,
            "environment": environment,
            "volumes": {} if binary else mounts(case_dir, case.image),
            "working_dir": None if binary else CASE_MOUNT,
            "user": "{}:{}".format(*container_user()),
            # One host's ranks talk over loopback and shared memory: no network, no capabilities.
            # A large /dev/shm instead of the host's IPC namespace: the ranks share the container's
            # own, which is all NCCL's shared-memory and CUDA IPC transports need within one container.
            "network_mode": "none",
            "hostname": "localhost",  # resolves to loopback in the /etc/hosts docker writes: the rendezvous and gloo find it
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "shm_size": SHM_SIZE,
            "ulimits": {**ULIMITS, **memory_cap_ulimit(case)},
            "device_requests": gpu_request(case, len(gpu_names()) if case.device == "cuda" else 0),
            "init": True,
            "labels": owner_labels(case, run_dir_of(case_dir), index),
            "detach": True,
        }
        visible = {
            k: ("(from the environment, not recorded)" if k in TOKEN_VARIABLES else v) for k, v in environment.items()
        }
        log.write(
            f"\n=== run {index}: docker image {reference} ({image.id})\n=== command: {' '.join(command)}\n=== environment: {visible}\n"
        )
        log.flush()
        if not binary:
            hand_over(case_dir, image_cache(case.image))
        try:
            container, ulimits = _create_and_start(client, settings, log)
        except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
            # The daemon refused the container (a GPU request without the NVIDIA runtime, a bad
            # mount, no space): this case is an error with the daemon's words, the run goes on.
            return failed(f"docker could not start the container: {daemon_message(exc)}")
        watchdog, timed_out = None, False
        try:  # from here on, whatever happens (Ctrl-C included), the container goes at the end
            watchdog = _start_watchdog(container.id)
            pump = _LogPump(container, log)
            pump.start()
            try:
                exit_code = container.wait(timeout=case.params.timeout_s * len(indices))["StatusCode"]
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                timed_out = True
                container.stop(timeout=KILL_GRACE_S)  # SIGTERM to the launcher, SIGKILL after the grace
                exit_code = None
            pump.join(timeout=KILL_GRACE_S)
            state = _state(container)
            if exit_code is None:
                exit_code = state.get("ExitCode")
            if binary:
                stdout, stderr = (
                    container.logs(stdout=out, stderr=not out).decode(errors="replace") for out in (True, False)
                )
        finally:
            _remove(container)
            if watchdog is not None:
                watchdog.kill()
                watchdog.wait()
        wall_s = time.monotonic() - started
        oom_killed = bool(state.get("OOMKilled"))
        log.write(
            f"\n=== run {index}: container {container.id[:12]} exit code {exit_code}"
            f"{' (killed by the kernel OOM killer)' if oom_killed else ''} after {wall_s:.1f} s; removed\n"
        )
        log.flush()
        if binary:  # the binary's output, read here into the run's one sample
            raw_name = nccl_tests.keep_output(out_dir, command[0], stdout, stderr)
            rank = nccl_tests.rank_sample(
                case,
                command,
                stdout,
                stderr,
                exit_code,
                raw_name,
                started_at,
                utc_now(),
                topology_facts(case.gpus) if case.device == "cuda" else None,
            )
            atomic_write_model(out_dir / "rank-0.json", rank)
        samples = launch_samples(
            indices=indices,
            out_dirs=out_dirs,
            expected_ranks=processes(case),
            exit_code=exit_code,
            wall_s=wall_s,
            timed_out=timed_out,
            timeout_s=case.params.timeout_s,
        )
        if oom_killed:
            samples[-1] = killed_for_host_memory(samples[-1], host_memory_bytes())
        ran_in = ContainerRun(
            image=reference,
            image_digest=image.id,
            repo_digests=list(image.attrs.get("RepoDigests") or []),
            container_id=container.id,
            exit_code=exit_code,
            oom_killed=oom_killed,
            ulimits={name: soft for name, (soft, _) in ulimits.items()},
        )
        return [sample.model_copy(update={"container": ran_in}) for sample in samples]

    # ---------------------------------------------------------------------------------------------
    # The watchdog: `python -m kit.execute.docker watch CONTAINER_ID`
    # ---------------------------------------------------------------------------------------------


def watch(container_id: str) -> None:
    """Wait for SIGTERM (sent by the kernel when kit dies) and remove the container then."""

    def remove_and_exit(signum, frame):
        try:
            images.engine().containers.get(container_id).remove(force=True)
        except Exception:
            pass
        os._exit(0)

    signal.signal(signal.SIGTERM, remove_and_exit)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is kit's to handle
    if os.getppid() == 1:  # kit died before the handler was in place
        remove_and_exit(signal.SIGTERM, None)
    while True:
        signal.pause()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "watch":
        watch(sys.argv[2])
    else:
        sys.exit("usage: python -m kit.execute.docker watch CONTAINER_ID")
