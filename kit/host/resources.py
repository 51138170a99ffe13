"""What of a host beyond its GPUs decides whether a case can run there: its memory (ZeRO offload
keeps optimizer states in it), the free disk where synthetic checkpoints go, and the software a
case needs (flash-attn, a CUDA compiler for DeepSpeed's fused ops, a docker engine for the
engines published as images only). Read cheaply here, or from a fingerprint."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from kit.cache import cache_dir

# The distributions whose absence turns a case `unavailable` (kit.plan.fit).
PLANNED_PACKAGES = ("bitsandbytes", "deepspeed", "flash-attn", "vllm")
DOCKER_SOCKET = Path("/var/run/docker.sock")


@dataclass(frozen=True)
class HostResources:
    """None wherever the source (this host, an older fingerprint) does not say."""

    memory_bytes: int | None = None
    disk_free_bytes: int | None = None  # where the kit's cache (synthetic checkpoints) lives
    packages: dict[str, str | None] | None = None  # distribution -> version, None where not installed
    cuda_compiler: bool | None = None  # an nvcc DeepSpeed can JIT-build its fused ops with
    docker_engine: bool | None = None


def free_bytes(path: Path) -> int:
    """Free bytes of the file system `path` is (or would be made) on."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def cuda_compiler_path() -> Path | None:
    """nvcc as torch's cpp_extension finds it (CUDA_HOME or CUDA_PATH, nvcc on PATH, /usr/local/cuda),
    without importing torch."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [Path(home) / "bin" / "nvcc"] if home else []
    on_path = shutil.which("nvcc")
    candidates += [Path(on_path)] if on_path else []
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    return next((path for path in candidates if path.is_file()), None)


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def docker_engine_reachable() -> bool:
    """A docker engine to talk to: DOCKER_HOST set, or the default socket present."""
    return bool(os.environ.get("DOCKER_HOST")) or DOCKER_SOCKET.exists()


def this_hosts_resources() -> HostResources:
    try:  # MemTotal of /proc/meminfo, as the fingerprint records it
        memory: int | None = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        memory = None
    try:
        disk: int | None = free_bytes(cache_dir())
    except OSError:
        disk = None
    return HostResources(
        memory_bytes=memory,
        disk_free_bytes=disk,
        packages={name: installed_version(name) for name in PLANNED_PACKAGES},
        cuda_compiler=cuda_compiler_path() is not None,
        docker_engine=docker_engine_reachable(),
    )
