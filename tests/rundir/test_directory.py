"""The run directory: atomic writes, clean restarts of a case, evidence digests."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from kit.files.atomic import atomic_write_text
from kit.rundir.directory import RunDir


def test_atomic_write_replaces_whole_files(tmp_path):
    target = tmp_path / "a" / "result.json"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "result.json"
    atomic_write_text(target, "old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("kit.files.atomic.os.replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_preparing_a_case_discards_an_interrupted_attempt(tmp_path, smoke_plan):
    run = RunDir(tmp_path)
    case = smoke_plan.cases[0]
    leftover = run.case_dir(case.id) / "runs" / "1" / "rank-0.json"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("{}")
    folder = run.prepare_case(case)
    assert sorted(p.name for p in folder.iterdir()) == ["case.json"]
    assert not run.is_finished(case.id)


def test_sha256sums_cover_every_file_and_verify_with_sha256sum(tmp_path):
    run = RunDir(tmp_path)
    atomic_write_text(tmp_path / "run.json", "{}")
    atomic_write_text(tmp_path / "cases" / "x" / "log.txt", "hello")
    sums = run.write_sums()
    lines = sums.read_text().splitlines()
    assert lines == sorted(lines) and len(lines) == 2
    assert f"{hashlib.sha256(b'hello').hexdigest()}  cases/x/log.txt" in lines
    check = subprocess.run(
        ["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=tmp_path, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
