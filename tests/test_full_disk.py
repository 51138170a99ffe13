"""A run whose disk fills up or turns read-only: one line saying what to free, no traceback,
finished cases kept, and `kit run --resume` finishing it once it can write again. The disk is a
real file system of its own (a tmpfs mounted for the test, which needs root, as CI has), filled
or remounted read-only after the first case."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from support.interrupted import KIT, in_evidence, killed_after_first_case, smoke_comm_run


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a file system of its own needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder) -> None:
    with open(folder / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 20))
                handle.flush()
        except OSError:
            pass


def test_a_full_disk_ends_the_run_in_one_line_keeps_finished_cases_and_resume_finishes(small_disk):
    run = small_disk / "run"
    started = subprocess.Popen(
        smoke_comm_run(run),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (run / "SHA256SUMS").is_file():  # written once the first case has finished
        assert started.poll() is None and time.monotonic() < deadline, "no case finished"
        time.sleep(0.1)
    fill(small_disk)
    kept = {path: path.read_bytes() for path in run.glob("cases/*/result.json")}
    _, stderr = started.communicate(timeout=600)
    assert started.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert "cannot write" in stderr and "No space left on device" in stderr and "kit run --resume" in stderr
    assert kept and all(path.read_bytes() == content for path, content in kept.items())
    kept = {path: content for path, content in kept.items() if in_evidence(run, path)}  # any other is run again
    assert kept

    (small_disk / "filler").unlink()
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(path.read_text()) for path in run.glob("cases/*/result.json")]
    assert len(results) == 8 and all(result["status"] == "ok" for result in results)
    assert all(path.read_bytes() == content for path, content in kept.items())


def remount(folder, mode: str) -> None:
    """The file system remounted `ro` or `rw`; a process of the killed run may still hold a file
    open for writing for a moment (EBUSY)."""
    deadline = time.monotonic() + 30
    while subprocess.run(["mount", "-o", f"remount,{mode}", str(folder)], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, f"could not remount {folder} {mode}"
        time.sleep(0.5)


def test_a_read_only_run_directory_is_one_line_keeps_finished_cases_and_resume_finishes(small_disk):
    run = small_disk / "run"
    finished = killed_after_first_case(run)
    remount(small_disk, "ro")
    kept = {path: path.read_bytes() for path in finished}
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(done.stderr.strip().splitlines()) == 1 and "Read-only file system" in done.stderr, done.stderr
    assert kept and all(path.read_bytes() == content for path, content in kept.items())

    remount(small_disk, "rw")
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(path.read_text()) for path in run.glob("cases/*/result.json")]
    assert len(results) == 8 and all(result["status"] == "ok" for result in results)
    assert all(path.read_bytes() == content for path, content in kept.items())
