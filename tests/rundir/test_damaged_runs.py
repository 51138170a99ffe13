"""`kit run --resume` on a run directory that was damaged or tampered with: one line and exit 2,
never a traceback, never a write or a removal outside the run directory, never a finished case
run again over its unreadable result."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys

import pytest

KIT = [sys.executable, "-m", "kit.cli"]
CASE = "comm.all_reduce.g2"  # the smoke profile's quickest case: a real run directory in seconds


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A run directory as `kit run` writes it, of one smoke case."""
    run = tmp_path_factory.mktemp("base") / "run"
    done = subprocess.run(
        [*KIT, "run", "--profile", "smoke", "--case", CASE, "--executor", "local", "--no-preflight", "--out", str(run)],
        capture_output=True,
        text=True,
        timeout=600,
    )
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
    "selected case not in the plan": lambda run: edit_info(
        run, lambda info: info["selected"].append("comm.nothing.g2")
    ),
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
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from kit.rundir.directory import RunDir; RunDir({str(run)!r}).lock(); "
            "print('held', flush=True); import time; time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
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

    done = subprocess.run(
        [*KIT, "run", "--resume", str(run), "--accept-changes"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    accepted = json.loads((run / "run.json").read_text())["accepted_changes"]
    assert [sorted(a["files"]) for a in accepted] == [
        [f"added: cases/{CASE}/extra.txt", f"changed: cases/{CASE}/result.json"]
    ]


def test_an_interrupted_run_leaves_evidence_of_its_finished_cases_for_the_resume(tmp_path):
    """Killed after its first case (kill -9, no clean-up): SHA256SUMS already covers that case,
    so a result bent before the resume is found."""
    from support.interrupted import killed_after_first_case

    run = tmp_path / "run"
    finished = killed_after_first_case(run)
    assert finished, "the evidence names no finished case"
    finished[0].write_text(finished[0].read_text().replace('"ok"', '"oom"', 1))
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and f"changed: {finished[0].relative_to(run)}" in done.stderr, done.stderr[-3000:]


def test_the_evidence_covers_dot_files_and_refuses_a_link_without_following_it(real_run, tmp_path):
    from kit.rundir.directory import RunDir, UnreadableRun

    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the run's")
    (run / "cases" / CASE / ".hidden").write_text("planted")
    assert f"cases/{CASE}/.hidden" in RunDir(run).digests()
    done = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and f"added: cases/{CASE}/.hidden" in done.stderr, done.stderr[-3000:]
    (run / "cases" / CASE / "elsewhere").symlink_to(outside)
    with pytest.raises(UnreadableRun, match=f"cases/{CASE}/elsewhere \\(a symbolic link\\)"):
        RunDir(run).digests()


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

    done = subprocess.run(
        [*KIT, "run", "--resume", str(run), "--accept-changes"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    accepted = json.loads((run / "run.json").read_text())["accepted_changes"]
    assert [a["files"] for a in accepted] == [["missing: SHA256SUMS (1 finished cases without evidence)"]]


def test_a_finished_case_the_evidence_does_not_list_is_run_again(real_run, tmp_path):
    """Killed between a case's result.json and the SHA256SUMS after it, or taken out of
    SHA256SUMS by hand: nothing vouches for the result, so the resume measures the case again."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    sums = run / "SHA256SUMS"
    sums.write_text(
        "".join(line for line in sums.read_text().splitlines(keepends=True) if f"cases/{CASE}/" not in line)
    )
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


# --- generated damages of a whole real smoke run, each tried in this process ----------------------
# What no run holds (a FIFO, a socket, a link, a name SHA256SUMS cannot hold), files cut short or
# put where another belongs, and forgeries sealed again: `kit report --verify` says what is wrong
# (exit 1, or 2 where the folder is no run), `kit run --resume` refuses it or has nothing to do,
# neither hangs, prints a traceback or a raw control character, and nothing changes.

SMOKE_CASE = "comm.all_reduce.g2"
SERVE_CASE = "serve.tiny-llama.vllm.g1"


def case_dir(run, case=SMOKE_CASE):
    return run / "cases" / case


def fifo(path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def link(path, target) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    path.symlink_to(target)


def unix_socket(path) -> None:
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(path))


def sealed_again(run) -> None:
    """SHA256SUMS written anew over the run as it is now, as a resume with --accept-changes did."""
    from kit.rundir.directory import RunDir

    RunDir(run).write_sums()


def sealed_as_before(run) -> None:
    """SHA256SUMS as the kit wrote it before it refused links: a link listed as the SHA-256 of
    `symlink -> <target>`, so that a run holding one passed --verify."""
    lines = []
    for path in sorted(run.rglob("*")):
        rel = path.relative_to(run).as_posix()
        if path.is_symlink():
            lines.append(f"{hashlib.sha256(f'symlink -> {os.readlink(path)}'.encode()).hexdigest()}  {rel}")
        elif path.is_file() and rel not in ("SHA256SUMS", "kit.lock") and not any(p.is_symlink() for p in path.parents):
            lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {rel}")
    (run / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def listed(run, line: str) -> None:
    with (run / "SHA256SUMS").open("a") as sums:
        sums.write(line + "\n")


def moved_result(run, source: str, target: str) -> None:
    shutil.copy(case_dir(run, source) / "result.json", case_dir(run, target) / "result.json")


def swapped_results(run) -> None:
    first, second = case_dir(run) / "result.json", case_dir(run, "comm.all_gather.g2") / "result.json"
    held = first.read_bytes()
    first.write_bytes(second.read_bytes())
    second.write_bytes(held)


def a_folder_of_no_case(run) -> None:
    shutil.copytree(case_dir(run), run / "cases" / "comm.nothing.g2")


def result_of_a_list(run) -> None:
    result = case_dir(run) / "result.json"
    result.write_text(json.dumps({**json.loads(result.read_text()), "case_id": ["comm.all_reduce.g2"]}))


def named(run, name: str, folder: bool = False) -> None:
    path = os.path.join(os.fsencode(case_dir(run)), name if isinstance(name, bytes) else name.encode())
    os.mkdir(path) if folder else open(path, "wb").close()


GENERATED_DAMAGE = {
    "a FIFO as a new rank file": lambda run, _: fifo(case_dir(run) / "runs" / "1" / "rank-9.json"),
    "a FIFO in place of a rank file": lambda run, _: fifo(case_dir(run) / "runs" / "1" / "rank-0.json"),
    "a FIFO in place of result.json": lambda run, _: fifo(case_dir(run) / "result.json"),
    "a FIFO in place of run.json": lambda run, _: fifo(run / "run.json"),
    "a FIFO in place of SHA256SUMS": lambda run, _: fifo(run / "SHA256SUMS"),
    "a FIFO in place of fingerprint.json": lambda run, _: fifo(run / "fingerprint.json"),
    "a FIFO in place of a case log": lambda run, _: fifo(case_dir(run) / "log.txt"),
    "a FIFO named as a temporary file": lambda run, _: fifo(case_dir(run) / ".result.json.x1y2.tmp"),
    "a FIFO at the top": lambda run, _: fifo(run / "notes"),
    "a FIFO among the preflight's files": lambda run, _: fifo(run / "preflight" / "notes"),
    "a FIFO in place of a serve run's requests": lambda run, _: fifo(
        case_dir(run, SERVE_CASE) / "runs" / "1" / "requests.jsonl"
    ),
    "a FIFO in place of kit.lock": lambda run, _: fifo(run / "kit.lock"),
    "a socket in a case folder": lambda run, _: unix_socket(case_dir(run) / "s"),
    "runs/ linked outside, sealed as before": lambda run, out: (
        shutil.copytree(case_dir(run) / "runs", out / "runs"),
        link(case_dir(run) / "runs", out / "runs"),
        sealed_as_before(run),
    ),
    "a rank file linked to /etc/passwd": lambda run, _: link(
        case_dir(run) / "runs" / "1" / "rank-0.json", "/etc/passwd"
    ),
    "result.json linked to another case's": lambda run, _: link(
        case_dir(run) / "result.json", case_dir(run, "comm.all_gather.g2") / "result.json"
    ),
    "run.json linked to /dev/zero": lambda run, _: link(run / "run.json", "/dev/zero"),
    "fingerprint.json linked to /dev/zero": lambda run, _: link(run / "fingerprint.json", "/dev/zero"),
    "SHA256SUMS linked to /dev/zero": lambda run, _: link(run / "SHA256SUMS", "/dev/zero"),
    "a dangling link": lambda run, _: link(case_dir(run) / "gone", "/nonexistent/kit"),
    "a link to a folder outside, in the preflight's": lambda run, out: link(run / "preflight" / "elsewhere", out),
    "cases/ linked outside": lambda run, out: (
        shutil.copytree(run / "cases", out / "cases"),
        link(run / "cases", out / "cases"),
    ),
    "a case folder linked outside": lambda run, out: (
        shutil.copytree(case_dir(run), out / "c"),
        link(case_dir(run), out / "c"),
    ),
    "a name with a line break": lambda run, _: named(run, "evil\nname.txt"),
    "a name with a carriage return": lambda run, _: named(run, "evil\rname.txt"),
    "a name with an escape sequence": lambda run, _: named(run, "\x1b[31mred\x1b[0m"),
    "a name with a right-to-left override": lambda run, _: named(run, "txt.\u202eexe"),
    "a name not UTF-8": lambda run, _: named(run, b"bad\xff\xfe"),
    "a name with a tab": lambda run, _: named(run, "a\tb"),
    "a name with DEL": lambda run, _: named(run, "a\x7fb"),
    "a name with a line separator": lambda run, _: named(run, "a\u2028b"),
    "a folder with a line break in its name": lambda run, _: named(run, "runs\n2", folder=True),
    "a name that is rich markup": lambda run, _: named(run, "[bold red]x[blink]"),
    "another case's result moved in, sealed again": lambda run, _: (
        moved_result(run, "comm.all_gather.g2", SMOKE_CASE),
        sealed_again(run),
    ),
    "two cases' results swapped, sealed again": lambda run, _: (swapped_results(run), sealed_again(run)),
    "a result whose case id is a list, sealed again": lambda run, _: (result_of_a_list(run), sealed_again(run)),
    "a folder of no case holding a result, sealed again": lambda run, _: (a_folder_of_no_case(run), sealed_again(run)),
    "SHA256SUMS cut in a line": lambda run, _: cut(run / "SHA256SUMS"),
    "SHA256SUMS listing a name with an escape sequence": lambda run, _: listed(
        run, "0" * 64 + "  cases/\x1b[2J\x1b[31mx"
    ),
    "SHA256SUMS listing a path out of the run": lambda run, _: listed(run, "0" * 64 + "  ../../etc/passwd"),
    "SHA256SUMS not UTF-8": lambda run, _: (run / "SHA256SUMS").write_bytes(
        b"\xff\xfe" + (run / "SHA256SUMS").read_bytes()
    ),
    "SHA256SUMS in sha256sum's escaped form": lambda run, _: listed(run, "\\" + "0" * 64 + "  cases/a\\nb"),
    "result.json a folder": lambda run, _: (
        (case_dir(run) / "result.json").unlink(),
        (case_dir(run) / "result.json").mkdir(),
    ),
    "run.json a folder": lambda run, _: ((run / "run.json").unlink(), (run / "run.json").mkdir()),
    "a rank file emptied": lambda run, _: (case_dir(run) / "runs" / "1" / "rank-0.json").write_bytes(b""),
}


def entries(run) -> dict:
    """Every entry of the run by its name as bytes: a regular file's bytes, else its type."""
    found = {}
    for folder, dirs, files in os.walk(os.fsencode(run)):
        for name in dirs + files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode) and name != b"kit.lock":
                with open(path, "rb") as handle:
                    found[path] = handle.read()
            elif not stat.S_ISREG(mode):
                found[path] = stat.S_IFMT(mode)
    return found


def shown_raw(text: str) -> list[str]:
    """Characters a terminal would act on: anything not printable but the line breaks between lines."""
    return sorted({c for c in text if not c.isprintable() and c != "\n"})


@pytest.mark.parametrize("damage", sorted(GENERATED_DAMAGE))
def test_a_damaged_run_fails_verification_and_is_not_resumed_and_nothing_changes(
    real_smoke_run, tmp_path, kit_in_process, damage
):
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(real_smoke_run, run, symlinks=True)
    outside.mkdir()
    GENERATED_DAMAGE[damage](run, outside)
    before, around = entries(run), entries(outside)

    code, out, err = kit_in_process("report", "--verify", run, seconds=30)
    assert code in (1, 2) and out + err, out + err
    assert shown_raw(out + err) == [], out + err
    code, out, err = kit_in_process("run", "--resume", run, seconds=30)
    assert code == 2 or (code == 0 and "nothing to resume" in out), out + err
    said = [line for line in err.splitlines() if line.lower().startswith("error")]  # after what the resume read
    assert shown_raw(out + err) == [] and (code == 0 or len(said) == 1), out + err
    assert entries(run) == before and entries(outside) == around, "a refused resume changed the run or what it links to"


@pytest.mark.parametrize(
    "damage",
    [
        "a FIFO as a new rank file",
        "runs/ linked outside, sealed as before",
        "another case's result moved in, sealed again",
        "a name with a line break",
    ],
)
def test_a_report_of_a_damaged_run_is_refused_in_seconds_naming_what_is_wrong(
    real_smoke_run, tmp_path, kit_in_process, damage
):
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(real_smoke_run, run, symlinks=True)
    outside.mkdir()
    GENERATED_DAMAGE[damage](run, outside)
    code, out, err = kit_in_process("report", run, "--format", "json", "--out", tmp_path / "report", seconds=60)
    assert code == 1 and "does not match its evidence" in err, out + err
    assert any(word in err for word in ("FIFO", "symbolic link", "misplaced", "not printable")), err
    assert not (tmp_path / "report" / "report.json").exists()


def test_a_resume_with_accept_changes_refuses_what_no_run_holds_and_seals_nothing(
    real_smoke_run, tmp_path, kit_in_process
):
    """A name with a line break, accepted, made SHA256SUMS unreadable for good."""
    run = tmp_path / "run"
    shutil.copytree(real_smoke_run, run)
    named(run, "evil\nname.txt")
    sums = (run / "SHA256SUMS").read_bytes()
    code, out, err = kit_in_process("run", "--resume", run, "--accept-changes", seconds=30)
    assert code == 2 and "evil\\nname.txt" in err and (run / "SHA256SUMS").read_bytes() == sums, out + err


def test_a_resume_of_a_finished_run_changes_nothing(real_smoke_run, tmp_path, kit_in_process):
    run = tmp_path / "run"
    shutil.copytree(real_smoke_run, run)
    before = entries(run)
    code, out, err = kit_in_process("run", "--resume", run, seconds=30)
    assert code == 0 and "nothing to resume" in out, out + err
    assert entries(run) == before


def a_bad_request_row(run) -> None:
    requests = case_dir(run, SERVE_CASE) / "runs" / "1" / "requests.jsonl"
    rows = requests.read_text().splitlines()
    requests.write_text("\n".join([json.dumps({**json.loads(rows[0]), "ttft": "soon"}), *rows[1:]]) + "\n")


def a_bad_estimate(run) -> None:
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "estimates": {SMOKE_CASE: {"seconds": "soon", "basis": "x"}}}))


@pytest.mark.parametrize("damage", [a_bad_request_row, a_bad_estimate], ids=lambda damage: damage.__name__)
def test_a_run_sealed_again_over_data_the_kit_cannot_read_is_refused_in_one_line(
    real_smoke_run, tmp_path, kit_in_process, damage
):
    run = tmp_path / "run"
    shutil.copytree(real_smoke_run, run)
    damage(run)
    sealed_again(run)
    code, out, err = kit_in_process("report", run, "--format", "html", "--out", tmp_path / "report")
    said = [line for line in err.splitlines() if line.lower().startswith("error")]
    assert code == 2 and len(said) == 1 and "Input should be a valid number" in said[0], out + err


def reseal(run) -> None:
    """SHA256SUMS made again over the run as it now is, as a forger would with sha256sum."""
    lines = [
        f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.relative_to(run).as_posix()}"
        for path in sorted(run.rglob("*"))
        if path.is_file() and path.name not in ("SHA256SUMS", "kit.lock")
    ]
    (run / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def nested(folder, depth: int) -> None:
    path = folder
    for _ in range(depth):
        path = path / "d"
    path.mkdir(parents=True)


def long_reason(run, characters: int) -> None:
    result = run / "cases" / CASE / "result.json"
    recorded = json.loads(result.read_text())
    recorded["reason"] = "x" * characters
    result.write_text(json.dumps(recorded))
    reseal(run)


def sparse(path, size: int) -> None:
    with open(path, "wb") as handle:
        handle.truncate(size)


def deep_json(path, depth: int) -> None:
    path.write_text('{"a": ' * depth + "1" + "}" * depth)


def rewritten(path, change) -> None:
    recorded = json.loads(path.read_text())
    change(recorded)
    path.write_text(json.dumps(recorded))


HOSTILE = {
    # a sparse file: hashed, it would be read for minutes
    "a sparse file of 300 GiB in a case": lambda run: sparse(run / "cases" / CASE / "core", 300 << 30),
    "folders nested 400 deep in a case": lambda run: nested(run / "cases" / CASE, 400),
    "a reason of 3 MB, resealed": lambda run: long_reason(run, 3 << 20),
    "result.json nested 20000 deep, resealed": lambda run: (
        deep_json(run / "cases" / CASE / "result.json", 20000),
        reseal(run),
    ),
    "fingerprint.json nested 3000 deep, resealed": lambda run: (deep_json(run / "fingerprint.json", 3000), reseal(run)),
    # the same case id with a full-width first letter: a twin folder, its result taken for the case's
    "a twin case folder, resealed": lambda run: (
        shutil.copytree(run / "cases" / CASE, run / "cases" / ("\uff43" + CASE[1:])),
        reseal(run),
    ),
    "a rank file holding a one-line string of 40 MB, resealed": lambda run: (
        rewritten(
            run / "cases" / CASE / "runs" / "1" / "rank-0.json", lambda rank: rank.update(device="y" * (40 << 20))
        ),
        reseal(run),
    ),
    "result.json that is a JSON array, resealed": lambda run: (
        (run / "cases" / CASE / "result.json").write_text("[1, 2, 3]"),
        reseal(run),
    ),
    "a NUL byte in a reason, resealed": lambda run: (
        rewritten(run / "cases" / CASE / "result.json", lambda result: result.update(reason="cut\x00here")),
        reseal(run),
    ),
    "a case folder that is a link to /": lambda run: (
        shutil.rmtree(run / "cases" / CASE),
        (run / "cases" / CASE).symlink_to("/"),
    ),
    "a fingerprint of a million keys, resealed": lambda run: (
        rewritten(run / "fingerprint.json", lambda found: found.update(extra={f"k{i}": i for i in range(10**6)})),
        reseal(run),
    ),
}
CPU_SECONDS = 10  # "no hang over 10 s", counted in the command's CPU time: a loaded machine's wall clock is not its


def commands(run, out) -> dict[str, list[str]]:
    return {
        "verify": ["report", "--verify", str(run)],
        "report": ["report", str(run), "--format", "html", "--out", str(out)],
        "resume": ["run", "--resume", str(run)],
    }


def kit_timed(args: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    """The kit's answer, and the CPU seconds it and its children spent."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def said(done: subprocess.CompletedProcess, run, out) -> list[str]:
    """What a command printed, the run's and the output folder's paths made the same for any copy."""
    return (done.stdout + done.stderr).replace(str(out), "OUT").replace(str(run), "RUN").splitlines()


@pytest.fixture(scope="module")
def normal_lines(real_run, tmp_path_factory) -> dict[str, list[str]]:
    """What each command says of an untouched copy of the run."""
    run = tmp_path_factory.mktemp("untouched") / "run"
    shutil.copytree(real_run, run)
    out = run.parent / "r"
    return {name: said(kit_timed(args)[0], run, out) for name, args in commands(run, out).items()}


@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_hostile_content_is_refused_by_report_verify_and_resume_in_one_line_within_seconds(
    real_run, tmp_path, hostile, normal_lines
):
    """What would have made the kit read until killed, lay a report out for minutes or recurse
    until Python gave up is refused before it is read: a refusal (exit 1 or 2) is one line, a
    command that goes on says only what it says of an untouched run, and none spends more than
    CPU_SECONDS of CPU time."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    HOSTILE[hostile](run)
    out = tmp_path / "r"
    for name, args in commands(run, out).items():
        done, cpu = kit_timed(args)
        lines = said(done, run, out)
        assert done.returncode in (0, 1, 2) and "Traceback" not in done.stderr, (name, done.stderr[-3000:])
        assert cpu <= CPU_SECONDS, (name, cpu)
        if done.returncode:
            assert len(lines) == 1 and len(lines[0]) < 2000, (name, lines)
        else:
            assert lines == normal_lines[name], (name, lines)


def test_a_file_named_like_a_writes_temporary_fails_verify(real_run, tmp_path):
    """No finished run holds one (a resume removes them), so one added after is named, not passed."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    (run / "cases" / CASE / ".result.json.q7x2k9ab.tmp").write_text('{"status": "ok"}')
    done = subprocess.run([*KIT, "report", "--verify", str(run)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and f"added: cases/{CASE}/.result.json.q7x2k9ab.tmp" in done.stdout, done.stdout


def test_two_kits_racing_into_one_folder_run_once_and_the_other_is_refused_in_one_line(tmp_path):
    run = tmp_path / "run"
    command = [*KIT, "run", "--profile", "smoke", "--case", CASE, "--executor", "local", "--no-preflight"]
    racing = [
        subprocess.Popen([*command, "--out", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    done = sorted((process.wait(timeout=900), process.stderr.read()) for process in racing)
    (ran, _), (refused, said) = done
    assert (ran, refused) == (0, 2) and "Traceback" not in said, done
    assert len(said.strip().splitlines()[-1:]) == 1 and (
        "already holds a run" in said or "in use by another kit" in said
    )
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
