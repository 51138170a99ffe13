"""This host, as far as planning needs it: its GPUs, found cheaply (NVML, else `nvidia-smi -L`).
Kept light, as every command asks it before doing anything; the full inventory is
kit.host.collection's, and what of a plan can run here kit.plan.fit's.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kit.host.resources import HostResources, this_hosts_resources


@dataclass
class Host:
    """What the runner needs to know of the host to decide what can run here."""

    gpu_names: list[str]
    gpu_memory_bytes: list[int] = field(default_factory=list)  # NVML's total memory of each GPU
    resources: HostResources = field(default_factory=HostResources)  # memory, disk, software

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_names)

    @property
    def smallest_gpu_memory(self) -> int | None:
        """What a case on any of the GPUs can count on, in bytes; None where NVML could not say."""
        return (
            min(self.gpu_memory_bytes)
            if len(self.gpu_memory_bytes) == self.gpu_count and self.gpu_memory_bytes
            else None
        )


def this_host() -> Host:
    return Host(gpu_names=gpu_names(), gpu_memory_bytes=gpu_memory_bytes(), resources=this_hosts_resources())


def parse_nvidia_smi_list(text: str) -> list[str]:
    """GPU names from `nvidia-smi -L` ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)")."""
    names = []
    for line in text.splitlines():
        match = re.match(r"^GPU \d+: (.+?)(?: \(UUID: [^)]*\))?\s*$", line)
        if match:
            names.append(match.group(1))
    return names


def nvml_text(value: str | bytes) -> str:
    """pynvml before 11.5 returns bytes for names and versions, later releases str."""
    return value.decode() if isinstance(value, bytes) else value


def run_command(argv: list[str], timeout_s: float = 30) -> tuple[str, str | None]:
    """Run a command: its stdout, and why it failed (None when it exited 0)."""
    command = " ".join(argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return "", f"{argv[0]} not found on PATH"
    except subprocess.TimeoutExpired:
        return "", f"'{command}' timed out after {timeout_s:g} s"
    except OSError as exc:
        return "", f"'{command}' could not start: {exc}"
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        first = said[0] if said else "no output"
        return done.stdout, f"'{command}' exited {done.returncode}: {first}"
    return done.stdout, None


def open_nvml():
    """pynvml (the nvidia-ml-py distribution), initialised; the caller shuts it down."""
    import pynvml  # noqa: PLC0415 - optional dependency, imported only where GPUs are queried

    pynvml.nvmlInit()
    return pynvml


def gpu_memory_bytes() -> list[int]:
    """Each GPU's total memory in bytes from NVML (what a predicted-OOM check compares with);
    [] where NVML cannot say."""
    try:
        nvml = open_nvml()
    except Exception:
        return []
    try:
        return [
            int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index)).total)
            for index in range(nvml.nvmlDeviceGetCount())
        ]
    except Exception:
        return []
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def gpu_names() -> list[str]:
    """The GPUs' names, cheaply: NVML if importable, else `nvidia-smi -L`, else none.

    Used to pick the default profile, so it answers [] rather than raising on a host without GPUs.
    """
    try:
        nvml = open_nvml()
    except Exception:  # no NVML here: fall back to nvidia-smi
        pass
    else:
        try:
            return [
                nvml_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(index)))
                for index in range(nvml.nvmlDeviceGetCount())
            ]
        except Exception:  # NVML loaded but could not list: nvidia-smi may still answer
            pass
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
    stdout, problem = run_command(["nvidia-smi", "-L"])
    return [] if problem else parse_nvidia_smi_list(stdout)


def resources_recorded(found) -> HostResources:
    """What a fingerprint (kit.host.fingerprint.Fingerprint) recorded of the host's memory, disk and
    software; a fingerprint of an older kit leaves the disk and the CUDA compiler unknown."""
    runtime, probe = found.container_runtime, found.image
    docker = True if runtime.docker_server_version else False if "docker" in runtime.unreadable else None
    return HostResources(
        memory_bytes=found.host.memory_bytes,
        disk_free_bytes=found.host.disk_free_bytes,
        packages=None if probe is None else dict(probe.packages),
        cuda_compiler=None if probe is None else probe.cuda_compiler_found,
        docker_engine=docker,
    )


def host_described_by(path: Path) -> Host:
    """The host a fingerprint file describes, its GPUs and their memory (a run's fingerprint.json,
    or `kit doctor --json`, which wraps it); ValueError, in one line, for a file that is neither."""
    from pydantic import ValidationError

    from kit.files.regular import RUN_FILE_LIMIT, read_json
    from kit.host.fingerprint import Fingerprint
    from kit.manifest import first_problem

    try:
        data = read_json(path, RUN_FILE_LIMIT)
        found = Fingerprint.model_validate(
            data["fingerprint"] if isinstance(data, dict) and "fingerprint" in data else data
        )
    except ValidationError as exc:
        reason = first_problem(exc)
    except (OSError, ValueError) as exc:  # not a regular file, too large, not UTF-8, not JSON
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0][:200]
    else:
        return Host(
            gpu_names=[gpu.name or "unknown GPU" for gpu in found.gpus.gpus],
            gpu_memory_bytes=[gpu.memory_bytes for gpu in found.gpus.gpus if gpu.memory_bytes],
            resources=resources_recorded(found),
        )
    raise ValueError(
        f"--fingerprint {path} is not a fingerprint ({reason}); give a run's fingerprint.json or the output of "
        "`kit doctor --json`"
    )
