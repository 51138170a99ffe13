"""Shared fixtures: the real manifests, and a way to break a copy of them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.deadline import ends_within

from kit.manifest import manifests_dir
from kit.plan.protocol import build_plan, load_protocol

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def protocol():
    return load_protocol()


@pytest.fixture(scope="session")
def smoke_plan(protocol):
    return build_plan(protocol, "smoke")


@pytest.fixture(scope="session")
def paper_plan(protocol):
    return build_plan(protocol, "paper")


@pytest.fixture(scope="session")
def real_smoke_run(tmp_path_factory) -> Path:
    """A finished real `kit run --all` of this machine: the one KIT_SMOKE_RUN names (CI's first
    step, the README's main command on an empty cache), else one made here. A full smoke run takes
    many minutes on two cores, so every test that reads real results of the smoke profile's cases
    reads this one run; a test that changes it works on a copy."""
    from kit.rundir.directory import RunDir

    given = os.environ.get("KIT_SMOKE_RUN")
    run = Path(given) if given else tmp_path_factory.mktemp("smoke") / "run"
    if not given:
        done = subprocess.run(
            [sys.executable, "-m", "kit.cli", "run", "--all", "--out", str(run)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    info = RunDir(run).read_info()
    assert (info.profile, info.status) == ("smoke", "finished"), f"{run}: not a finished smoke run"
    assert info.selected == [case.id for case in build_plan(load_protocol(), "smoke").cases], (
        f"{run}: not every smoke case"
    )
    return run


@pytest.fixture
def kit_in_process(capsys, monkeypatch):
    """`kit ARGS` run in this process as the command runs it (kit.cli.main): its exit status,
    standard output and standard error. Many bad inputs are tried in one process, each without
    a Python start and the imports; one that runs past `seconds` fails instead of hanging."""
    from kit.cli import main

    def run(*args, seconds: int = 60) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["kit", *map(str, args)])
        try:
            with ends_within(seconds, f"kit {' '.join(map(str, args))}"):
                main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def manifests_copy(tmp_path, monkeypatch) -> Path:
    """A private copy of manifests/ that KIT_MANIFESTS points at, for tests that break it."""
    copy = tmp_path / "manifests"
    shutil.copytree(manifests_dir(), copy)
    monkeypatch.setenv("KIT_MANIFESTS", str(copy))
    return copy


# --- skips: CI fails on any skip not on the allow-list -------------------------------------------
# A skip can hide a missing piece (a tool CI forgot to install, a test that never runs). CI sets
# KIT_FAIL_ON_UNEXPECTED_SKIP=1: a skipped test that tests/allowed_skips.txt does not name, with
# why it may skip, fails the session. The list's size is printed at the end of every run.
ALLOWED_SKIPS = Path(__file__).with_name("allowed_skips.txt")
_skipped: list[tuple[str, str]] = []


def allowed_skips() -> dict[str, str]:
    """Test node id -> why it may skip (lines `node-id  # reason`)."""
    allowed = {}
    for line in ALLOWED_SKIPS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            node, _, why = line.partition("#")
            allowed[node.strip()] = why.strip()
    return allowed


def pytest_runtest_logreport(report):
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append((report.nodeid, reason))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    allowed = allowed_skips()
    unexpected = [(node, why) for node, why in _skipped if node not in allowed]
    terminalreporter.write_line(
        f"skips: {len(_skipped) - len(unexpected)} allowed (the allow-list names {len(allowed)}), {len(unexpected)} unexpected"
    )
    for node, why in unexpected:
        terminalreporter.write_line(f"  unexpected skip: {node}: {why}")


def pytest_sessionfinish(session, exitstatus):
    unexpected = [node for node, _ in _skipped if node not in allowed_skips()]
    if unexpected and os.environ.get("KIT_FAIL_ON_UNEXPECTED_SKIP") == "1" and session.exitstatus == 0:
        session.exitstatus = 1
