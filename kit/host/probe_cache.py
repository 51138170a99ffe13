"""This Python's frameworks probe (kit.workloads.probe), kept in the kit's cache: this Python is
the "image" of the local executor.

The probe imports every framework to learn its version and whether it imports at all: 16 s of
every `kit run`, `kit doctor` and `kit preflight` on this project's CPU hosts. Its answer changes
only when what this Python imports changes, so an entry is named by the digest of the interpreter,
the folders it imports from with each distribution's metadata folder there (its name and time:
pip writes a new one on every install, upgrade and removal), the variables that steer how a
framework finds its native libraries, and the GPU driver's version. Only an answer that read as a
probe's is kept, sealed (kit.cache.keep); one that is not as the kit kept it, or no longer reads
as a probe's, is probed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from pathlib import Path

from kit.cache import CacheEntryInvalid, cache_dir, drop_oldest, keep, read_kept
from kit.files.regular import MiB, read_regular
from kit.host.collection import read_probe_output
from kit.host.fingerprint import ImageProbe
from kit.host.this_host import run_command

ENTRIES_KEPT = 8  # one per Python environment the kit runs from, and a few of their past states
ENTRY_LIMIT = MiB  # an entry is a few hundred bytes
METADATA = (".dist-info", ".egg-info", ".egg-link", ".pth")
STEERING = ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "CUDA_HOME", "CUDA_PATH", "BNB_CUDA_VERSION")
DRIVER_VERSION = Path("/proc/driver/nvidia/version")


def probe_key() -> str:
    """The digest of everything the probe's answer depends on."""
    digest = hashlib.sha256(sys.executable.encode())
    for name in STEERING:
        digest.update(f"\0{name}={os.environ.get(name, '')}".encode())
    with contextlib.suppress(OSError):
        digest.update(read_regular(DRIVER_VERSION, ENTRY_LIMIT))
    for folder in sys.path[1:]:  # the first is the running script's folder, which the probe's is not
        digest.update(f"\0{folder}".encode())
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda entry: entry.name):
                if entry.name.endswith(METADATA):
                    digest.update(f"\0{entry.name}\0{entry.stat().st_mtime_ns}".encode())
    return digest.hexdigest()


def probe_entry() -> Path:
    return cache_dir() / "probes" / f"{probe_key()}.json"


def read_entry(entry: Path) -> bytes | None:
    """The kept answer, None where there is none (or it is not as the kit kept it)."""
    try:
        return read_kept(entry, ENTRY_LIMIT)
    except CacheEntryInvalid:
        return None


def keep_answer(entry: Path, answer: str) -> None:
    try:
        keep(entry, answer.encode())
        drop_oldest(entry.parent, ENTRIES_KEPT)
    except OSError:
        pass  # a cache that cannot be written costs time, not the answer


def probe_this_python() -> ImageProbe | None:
    """The probe run in this Python, which is the "image" of the local executor; None if it fails."""
    entry = probe_entry()
    kept = read_entry(entry)
    if kept is not None:
        with contextlib.suppress(ValueError):
            return ImageProbe.model_validate_json(kept)
    stdout, problem = run_command([sys.executable, "-m", "kit.workloads.probe"], timeout_s=120)
    if problem:
        return None
    try:
        probe = read_probe_output(stdout)
    except ValueError:
        return None
    keep_answer(entry, probe.model_dump_json())
    return probe
