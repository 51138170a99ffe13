"""`kit run --resume` on a run directory that was damaged or tampered with: one line and exit 2,
never a traceback, never a write or a removal outside the run directory, never a finished case
run again over its unreadable result."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

KIT = [sys.executable, "-m", "kit.cli"]
CASE = "comm.all_reduce.g2"  # the smoke profile's quickest case: a real run directory in seconds


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A run directory as `kit run` writes it, of one smoke case."""
    run = tmp_path_factory.mktemp("base") / "run"
    done = subprocess.run([*KIT, "run", "--profile", "smoke", "--case", CASE, "--executor", "local", "--no-preflight",
                           "--out", str(run)], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def hostile_id(info: dict, new_id: str) -> None:
    info["plan"]["cases"][0]["id"] = new_id
    info["selected"] = [new_id]


DAMAGE = {
    "run.json cut short": lambda run: (run / "run.json").write_bytes((run / "run.json").read_bytes()[:200]),
    "run.json binary": lambda run: (run / "run.json").write_bytes(bytes(range(256)) * 4),
    "run.json empty": lambda run: (run / "run.json").write_text(""),
    "run.json a list": lambda run: (run / "run.json").write_text("[1, 2]"),
    "case id climbs out": lambda run: edit_info(run, lambda info: hostile_id(info, "../../escape")),
    "case id absolute": lambda run: edit_info(run, lambda info: hostile_id(info, "/tmp/kit-escape")),
    "case id with a NUL": lambda run: edit_info(run, lambda info: hostile_id(info, "comm\u0000x")),
    "model name climbs out": lambda run: edit_info(run, lambda info: info["plan"]["cases"][0].update(model="../m")),
    "selected case not in the plan": lambda run: edit_info(run, lambda info: info["selected"].append("comm.nothing.g2")),
    "SHA256SUMS not a sums file": lambda run: (run / "SHA256SUMS").write_bytes(b"\x00garbage\n" * 10),
    "SHA256SUMS a folder": lambda run: ((run / "SHA256SUMS").unlink(), (run / "SHA256SUMS").mkdir()),
    "kit.lock a folder": lambda run: ((run / "kit.lock").unlink(missing_ok=True), (run / "kit.lock").mkdir()),
    "fingerprint.json garbage": lambda run: (run / "fingerprint.json").write_text("{]"),
    "a rank file deleted": lambda run: (run / "cases" / CASE / "runs" / "1" / "rank-0.json").unlink(),
    "result.json cut short": lambda run: cut(run / "cases" / CASE / "result.json"),
    "result.json binary": lambda run: (run / "cases" / CASE / "result.json").write_bytes(b"\xff\xfe\x00" * 50),
}


def edit_info(run, change) -> None:
    info = json.loads((run / "run.json").read_text())
    change(info)
    (run / "run.json").write_text(json.dumps(info))


def cut(path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def files_of(run) -> dict:
    """Every file's bytes, but the lock's note (who holds the run: not evidence, rewritten by each kit)."""
    return {path: path.read_bytes() for path in run.rglob("*") if path.is_file() and path.name != "kit.lock"}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_run_directory_is_refused_in_one_line_and_nothing_outside_it_changes(real_run, tmp_path, damage):
    root = tmp_path / "a" / "b"
    run = root / "run"
    shutil.copytree(real_run, run)
    sentinel = tmp_path / "a" / "escape"  # where cases/../../escape points
    sentinel.mkdir()
    (sentinel / "keep.txt").write_text("not the kit's")
    DAMAGE[damage](run)
    before = files_of(run)
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(run) in done.stderr
    assert (sentinel / "keep.txt").read_text() == "not the kit's" and not (tmp_path / "kit-escape").exists()
    assert not any(tmp_path.rglob("*escape*/*.json"))
    assert files_of(run) == before, "a refused resume changed the run directory"


def test_a_second_kit_on_a_run_in_use_is_refused_naming_the_holder_and_a_crash_frees_it(real_run, tmp_path):
    """The holder is a process of its own (as a first `kit run --resume` would be); once it is
    killed, without a chance to clean up, the run directory is free again."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    holder = subprocess.Popen([sys.executable, "-c", f"from kit.results import RunDir; RunDir({str(run)!r}).lock(); "
                               "print('held', flush=True); import time; time.sleep(600)"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert f"in use by another kit (pid {holder.pid} on " in done.stderr
    finally:
        holder.kill()
        holder.wait()
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_tampered_run_is_not_resumed_unless_the_changes_are_accepted_and_then_recorded(real_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    result = run / "cases" / CASE / "result.json"
    bent = json.loads(result.read_text())
    bent["metrics"]["bus_bandwidth_gb_s"]["mean"] *= 10  # a better number than was measured
    result.write_text(json.dumps(bent))
    (run / "cases" / CASE / "extra.txt").write_text("planted")
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"changed: cases/{CASE}/result.json" in done.stderr and f"added: cases/{CASE}/extra.txt" in done.stderr
    assert json.loads(result.read_text()) == bent and not json.loads((run / "run.json").read_text())["resumed_at"]

    done = subprocess.run([*KIT, "run", "--resume", str(run), "--accept-changes"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    accepted = json.loads((run / "run.json").read_text())["accepted_changes"]
    assert [sorted(a["files"]) for a in accepted] == [[f"added: cases/{CASE}/extra.txt", f"changed: cases/{CASE}/result.json"]]


def test_an_interrupted_run_leaves_evidence_of_its_finished_cases_for_the_resume(tmp_path):
    """Killed after its first case (kill -9, no clean-up): SHA256SUMS already covers that case,
    so a result bent before the resume is found."""
    from interrupted import killed_after_first_case

    run = tmp_path / "run"
    finished = killed_after_first_case(run)
    assert finished, "the evidence names no finished case"
    finished[0].write_text(finished[0].read_text().replace('"ok"', '"oom"', 1))
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and f"changed: {finished[0].relative_to(run)}" in done.stderr, done.stderr[-3000:]


def test_the_evidence_covers_dot_files_and_records_a_link_without_following_it(real_run, tmp_path):
    from kit.results import RunDir

    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the run's")
    (run / "cases" / CASE / ".hidden").write_text("planted")
    (run / "cases" / CASE / "elsewhere").symlink_to(outside)
    found = RunDir(run).digests()
    assert f"cases/{CASE}/.hidden" in found and f"cases/{CASE}/elsewhere" in found
    assert not any("secret" in path for path in found)
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"added: cases/{CASE}/.hidden" in done.stderr and f"added: cases/{CASE}/elsewhere" in done.stderr


def test_a_run_killed_before_its_evidence_with_its_fingerprint_lost_still_finishes(real_run, tmp_path):
    """No SHA256SUMS yet (killed during its first case) and fingerprint.json unreadable: nothing
    to check against, so the resume runs the case and the run ends without a drift comparison."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    (run / "SHA256SUMS").unlink()
    shutil.rmtree(run / "cases" / CASE)
    (run / "fingerprint.json").write_text("{]")
    edit_info(run, lambda info: info.update(status="interrupted"))
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert json.loads((run / "cases" / CASE / "result.json").read_text())["status"] == "ok"


def before_any_evidence(run) -> None:
    """As a run killed during its first case leaves it: no SHA256SUMS, no finished case."""
    (run / "SHA256SUMS").unlink()
    shutil.rmtree(run / "cases" / CASE)
    edit_info(run, lambda info: info.update(status="interrupted"))


@pytest.mark.parametrize("form", ["cases a link out", "the case's folder a link out", "the case's folder a file"])
def test_a_run_without_evidence_is_never_written_or_removed_through_a_link_or_a_file(real_run, tmp_path, form):
    """Nothing to check it against yet, so only the kit's own rule keeps a resume inside the run."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    before_any_evidence(run)
    outside = tmp_path / "outside"
    (outside / CASE).mkdir(parents=True)
    (outside / CASE / "keep.txt").write_text("not the kit's")
    if form == "cases a link out":
        shutil.rmtree(run / "cases")
        (run / "cases").symlink_to(outside)
    elif form == "the case's folder a link out":
        (run / "cases" / CASE).symlink_to(outside / CASE)
    else:
        (run / "cases" / CASE).write_text("a file")
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(done.stderr.strip().splitlines()) == 1 and str(run) in done.stderr, done.stderr
    assert sorted(p.name for p in (outside / CASE).iterdir()) == ["keep.txt"]


def test_a_run_whose_evidence_was_deleted_is_not_resumed_unless_that_is_accepted(real_run, tmp_path):
    """Deleting SHA256SUMS is no way around the check: a run with finished cases has had one."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    result = run / "cases" / CASE / "result.json"
    bent = json.loads(result.read_text())
    bent["reason"] = "edited after the run"
    result.write_text(json.dumps(bent))
    (run / "SHA256SUMS").unlink()
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "missing: SHA256SUMS (1 finished cases without evidence)" in done.stderr
    assert not (run / "SHA256SUMS").exists()

    done = subprocess.run([*KIT, "run", "--resume", str(run), "--accept-changes"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    accepted = json.loads((run / "run.json").read_text())["accepted_changes"]
    assert [a["files"] for a in accepted] == [["missing: SHA256SUMS (1 finished cases without evidence)"]]


def test_a_finished_case_the_evidence_does_not_list_is_run_again(real_run, tmp_path):
    """Killed between a case's result.json and the SHA256SUMS after it, or taken out of
    SHA256SUMS by hand: nothing vouches for the result, so the resume measures the case again."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    sums = run / "SHA256SUMS"
    sums.write_text("".join(line for line in sums.read_text().splitlines(keepends=True) if f"cases/{CASE}/" not in line))
    result = run / "cases" / CASE / "result.json"
    bent = json.loads(result.read_text())
    bent["metrics"]["bus_bandwidth_gb_s"]["mean"] *= 10
    result.write_text(json.dumps(bent))
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads(result.read_text())
    assert again["status"] == "ok" and again["started_at"] != bent["started_at"]
    assert again["metrics"]["bus_bandwidth_gb_s"]["mean"] != bent["metrics"]["bus_bandwidth_gb_s"]["mean"]
    check = subprocess.run([*KIT, "report", "--verify", str(run)], capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr
