"""The CLI as a user meets it: what it refuses, what it shows, what a dry run leaves behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from support import FIXTURES


def kit(*args, cwd=None):
    env = {**os.environ, "COLUMNS": "400"}  # wide enough that rich tables print whole
    return subprocess.run([sys.executable, "-m", "kit.cli", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_help_lists_the_commands():
    done = kit("--help")
    assert done.returncode == 0 and "list" in done.stdout and "run" in done.stdout


def test_importing_the_cli_loads_no_module_a_command_may_not_need():
    """Every command pays for what `import kit.cli` loads before it starts: the manifests' models,
    the fingerprint, the analysis, the runner, docker and rich are each imported by the command
    that uses them (tests/benchmarks/cli_startup.py measures what that buys)."""
    probe = "import sys, kit.cli; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    )
    heavy = {
        "pydantic",
        "yaml",
        "rich",
        "docker",
        "torch",
        "jinja2",
        "kit.plan.protocol",
        "kit.theory.analytic",
        "kit.comm.sweep",
        "kit.measure.metrics",
        "kit.host.fingerprint",
        "kit.runner",
        "kit.rundir.schema",
        "kit.host.environment",
        "kit.images",
    }
    assert "click" in loaded and not loaded & heavy, sorted(loaded & heavy)


def test_importing_the_runner_loads_no_renderer():
    """Every `kit run` imports the runner, which measures and never lays out: no module of the
    report, nor matplotlib or WeasyPrint, is imported before a report is drawn."""
    probe = "import sys, kit.runner; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    )
    assert not {name for name in loaded if name.startswith(("kit.report", "matplotlib", "weasyprint"))}


def test_list_reads_as_aligned_columns_in_a_pipe():
    lines = kit("list", "--profile", "paper").stdout.splitlines()
    header = next(line for line in lines if line.startswith("case "))
    row = next(line for line in lines if line.startswith("pretrain.llama2-70b.z3+o.g8 "))
    assert row[header.index("model") :].startswith("llama2-70b  ")
    assert row[header.index("on this host") :].startswith("skipped: needs 8 GPUs, host has 0")


def test_list_json_is_the_same_from_one_call_to_the_next():
    first, second = kit("list", "--profile", "paper", "--json"), kit("list", "--profile", "paper", "--json")
    assert first.returncode == 0
    listed = [json.loads(done.stdout) for done in (first, second)]
    for plan in listed:  # the free disk is this moment's: the one figure that may differ
        assert plan["host"]["resources"].pop("disk_free_bytes") > 0
    assert listed[0] == listed[1]
    cases = listed[0]["cases"]
    assert "pretrain.llama2-70b.z3+o.g8" in {c["id"] for c in cases}


def test_run_without_a_selection_is_refused():
    done = kit("run", "--profile", "smoke")
    assert done.returncode == 2 and "--all" in done.stderr


def test_run_of_an_unknown_case_is_refused():
    done = kit("run", "--profile", "smoke", "--case", "pretrain.tiny-llama.z7.g2")
    assert done.returncode == 2 and "no case" in done.stderr


def test_dry_run_shows_the_cases_and_writes_nothing(tmp_path):
    done = kit("run", "--all", "--profile", "smoke", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    from kit.plan.protocol import build_plan, load_protocol

    lines = done.stdout.splitlines()
    listed = {line.split()[0] for line in lines[lines.index(next(x for x in lines if x.startswith("case "))) + 1 :]}
    assert listed == {case.id for case in build_plan(load_protocol(), "smoke").cases}
    assert list(tmp_path.iterdir()) == []
    # the preflight at least is first-run work, said apart from the cases' estimate (kit.plan.first_run)
    assert " + first-run work " in lines[0] or " + first-run work " in lines[1], lines[:2]


def test_dry_run_with_runs_shows_every_case_at_least_that_many_times(tmp_path):
    """--runs 4: the smoke profile's serving and collective cases, once each by the profile, four
    times, as every case; the max-batch search one search."""
    done = kit("run", "--all", "--profile", "smoke", "--runs", "4", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    runs = {
        line.split()[0]: line.split()[4]
        for line in done.stdout.splitlines()
        if line.startswith(("serve.", "comm.", "maxbatch."))
    }
    assert runs["serve.tiny-llama.vllm.g1"] == "4" and runs["comm.all_reduce.g2"] == "4"
    assert runs["maxbatch.tiny-llama.naive.g1"] == "1"


def test_resume_needs_a_run_directory(tmp_path):
    done = kit("run", "--resume", str(tmp_path))
    assert done.returncode == 2 and "not a run directory" in done.stderr


def test_a_resume_goes_on_with_the_executor_its_run_json_records(tmp_path):
    """The recorded one-H100 run (tests/fixtures/h100x1-run), made with --executor local."""
    import tarfile

    with tarfile.open(FIXTURES / "h100x1-run" / "run.tgz") as archive:
        archive.extractall(tmp_path, filter="data")
    run = tmp_path / "runh100"
    same = kit("run", "--resume", str(run), "--executor", "local", "--dry-run")
    assert same.returncode == 0, same.stderr
    assert f"executor: local, as {run / 'run.json'} records" in same.stderr.replace("\n", "")
    other = kit("run", "--resume", str(run), "--executor", "docker", "--dry-run")
    assert other.returncode == 2
    assert "runs its cases with the executor its run.json records (local)" in other.stderr


def test_without_a_docker_engine_preflight_and_a_docker_run_say_so_in_one_line(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    for args in (
        ["preflight", "--executor", "docker"],
        ["run", "--all", "--executor", "docker", "--out", str(tmp_path / "run")],
    ):
        done = subprocess.run([sys.executable, "-m", "kit.cli", *args], capture_output=True, text=True, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "the docker engine does not answer" in done.stderr and "--executor local" in done.stderr
    assert not (tmp_path / "run").exists()


def test_the_eta_counts_the_cases_left_to_run():
    from kit.console import RichProgress
    from kit.plan.estimate import Estimate

    estimates = {case: Estimate(seconds=60, basis="x") for case in "abc"}
    progress = RichProgress(total=5, finished={"a"}, estimates=estimates)  # d and e are skipped: no estimate
    assert progress.pending == {"b", "c"} and progress.eta_text() == "ETA 2 min 00 s"


def test_doctor_passes_on_this_host_for_the_profile_it_would_run():
    done = kit("doctor")
    assert done.returncode == 0, done.stderr
    assert "gpu_count_matches_profile" in done.stdout


def test_doctor_fails_when_the_profile_needs_gpus_the_host_lacks():
    done = kit("doctor", "--profile", "paper", "--json")
    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["gpu_count_matches_profile"]["status"] == "fail"
    assert checks["gpu_count_matches_profile"]["expected"].startswith("8 GPUs")


def test_run_refuses_to_start_on_a_failing_check_and_creates_nothing(tmp_path):
    done = kit("run", "--all", "--profile", "paper", "--out", str(tmp_path / "run"))
    assert done.returncode == 1
    assert "refusing to start" in done.stderr and "gpu_count_matches_profile" in done.stderr
    assert not (tmp_path / "run").exists()


def test_forced_run_records_the_force_both_fingerprints_and_skips_what_cannot_run(tmp_path):
    run = tmp_path / "run"
    done = kit("run", "--stage", "pretrain", "--profile", "paper", "--out", str(run), "--force")
    assert done.returncode == 0, done.stderr[-2000:]
    info = json.loads((run / "run.json").read_text())
    assert info["forced"] is True and info["status"] == "finished"
    assert any(c["name"] == "gpu_count_matches_profile" and c["status"] == "fail" for c in info["checks"])
    assert (run / "fingerprint.json").is_file() and (run / "fingerprint-after.json").is_file()
    result = json.loads((run / "cases" / "pretrain.llama2-7b.naive.g8" / "result.json").read_text())
    assert result["status"] == "skipped" and "needs 8 GPUs" in result["reason"]


def test_run_exits_non_zero_and_counts_statuses_when_a_case_fails(tmp_path, manifests_copy):
    protocol = manifests_copy / "protocol.yaml"
    text = protocol.read_text()
    comm_params = "iters: 10, runs: 1, timeout_s: 300}"
    assert comm_params in text
    protocol.write_text(text.replace(comm_params, "iters: 10, runs: 1, timeout_s: 1}"))  # a run cannot finish
    done = kit(
        "run",
        "--profile",
        "smoke",
        "--case",
        "comm.all_reduce.g2",
        "--case",
        "profile.tiny-llama.f.g1",
        "--out",
        str(tmp_path / "run"),
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "2 cases: 1 unavailable, 1 timeout"


def test_run_exits_zero_when_every_case_is_an_answer(tmp_path):
    done = kit("run", "--profile", "smoke", "--case", "profile.tiny-llama.f.g1", "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "1 case: 1 unavailable"


# --- where output goes: results on stdout, progress and logs on stderr ------------------------------


def test_doctor_redirected_to_a_file_holds_the_whole_table(tmp_path):
    """`kit doctor > f`, with no terminal and no COLUMNS: each check on its line, nothing cut to 80 columns."""
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    with open(tmp_path / "checks.txt", "w") as table:
        done = subprocess.run(
            [sys.executable, "-m", "kit.cli", "doctor"], stdout=table, stderr=subprocess.PIPE, text=True, env=env
        )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = (tmp_path / "checks.txt").read_text().splitlines()
    checks = json.loads(kit("doctor", "--json").stdout)["checks"]
    for check in checks:
        assert any(line.startswith(f"│ {check['name']} ") and f" {check['status']} " in line for line in lines), check[
            "name"
        ]
    assert "…" not in "".join(lines) and "\x1b[" not in "".join(lines)


def test_quiet_says_the_results_alone(tmp_path):
    done = kit(
        "-q",
        "run",
        "--profile",
        "smoke",
        "--case",
        "profile.tiny-llama.f.g1",
        "--no-preflight",
        "--out",
        str(tmp_path / "run"),
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "Results" in done.stdout and done.stdout.strip().splitlines()[-1] == "1 case: 1 unavailable"


def test_verbose_shows_the_traceback_behind_a_one_line_error(tmp_path):
    env = {**os.environ, "KIT_MANIFESTS": str(tmp_path)}  # no protocol.yaml there
    plain, verbose = (
        subprocess.run([sys.executable, "-m", "kit.cli", *flags, "list"], capture_output=True, text=True, env=env)
        for flags in ([], ["-v"])
    )
    assert plain.returncode == verbose.returncode == 2
    assert "Traceback" not in plain.stderr and "Traceback" in verbose.stderr
    assert (
        plain.stderr.splitlines()[-1]
        == verbose.stderr.splitlines()[-1]
        == f"error: {tmp_path / 'protocol.yaml'}: (top level): file not found"
    )


def test_no_progress_draws_no_bar():
    from kit import output
    from kit.console import RichProgress

    try:
        output.configure(quiet=False, verbose=False, progress=False)
        assert RichProgress(total=1, finished=set()).bar.disable
    finally:
        output.configure(quiet=False, verbose=False, progress=True)


@pytest.mark.parametrize(
    "words, offered",
    [
        ("kit list --profile ", {"paper", "quick", "acceptance", "smoke", "cluster"}),
        ("kit run --all --profile q", {"quick"}),
        ("kit report --format ", {"html", "pdf", "json", "csv"}),
        ("kit report --format html,", {"html,pdf", "html,json", "html,csv"}),
        ("kit report --format json,c", {"json,csv"}),
    ],
)
def test_the_shell_completes_profiles_and_formats(words, offered):
    from click.shell_completion import ShellComplete

    from kit.cli import cli

    *args, incomplete = words.split(" ")[1:]
    completions = ShellComplete(cli, {}, "kit", "_KIT_COMPLETE").get_completions(args, incomplete)
    assert {item.value for item in completions} == offered


# --- what a user can get wrong: one line, exit 2, never a traceback ----------------------------------

A_FILE = "a-file"  # made in the test's folder


@pytest.mark.parametrize(
    "args, said",
    [
        (["report", "/nonexistent"], "not a run directory"),
        (["report", "--verify", "/nonexistent"], "not a run directory"),
        (["report", "--verify", "RUN", "--expect-digest", "zz"], "16 to 64 hexadecimal characters"),
        (["report", "RUN", "--gpu-hour-price", "nan"], "a positive number is needed"),
        (["report", "RUN", "--gpu-hour-price", "inf"], "a positive number is needed"),
        (["report", "RUN", "--gpu-hour-price", "-1"], "a positive number is needed"),
        (["report", "RUN", "--slo-ttft-ms", "nan"], "a positive number is needed"),
        (["report", "RUN", "--slo-tpot-ms", "0"], "a positive number is needed"),
        (["report", "RUN", "--format", "doc"], "report formats are"),
        (["report", "RUN", "--out", "/dev/null"], "is there and is not a folder"),
        (["report", "RUN", "--out", A_FILE], "is there and is not a folder"),
        (["report", "RUN", "--out", "/proc/kit-report"], "cannot make or write the folder"),
        (["report", "--fleet", "RUN", "RUN/", "--tolerance", "nan"], "--tolerance is a percentage"),
        (["run", "--all", "--out", "/dev/null"], "is there and is not a folder"),
        (["run", "--all", "--out", A_FILE], "is there and is not a folder"),
        (["run", "--all", "--out", "/proc/kit-run"], "cannot make or write the folder"),
        (["run", "--all", "--out", f"{A_FILE}/run"], "cannot make or write the folder"),
        (["run", "--resume", "/dev/null"], "not a run directory"),
        (
            ["run", "--all", "--profile", "smoke", "--out", "a-stranger"],
            "holds files that are not a kit run (notes.tex)",
        ),
        (
            ["run", "--all", "--profile", "smoke", "--out", "a-run-without-run-json"],
            "holds an earlier run's cases without its run.json",
        ),
        (["run", "--all", "--nodes", "0"], "--nodes"),
        (
            ["run", "--all", "--profile", "smoke", "--out", "r\udcffun"],
            "--out r\\udcffun: a name that is not printable",
        ),
        (["list", "--profile", "sm\udcffoke"], "'sm\\xffoke' is not a profile name"),  # a byte that is not UTF-8
        # paths past the file system's limits: one short line, the path by its ends
        (["report", "--verify", "/tmp/" + "z" * 6000], "a name longer than the file system allows"),
        (["run", "--resume", "/tmp/" + "/".join(["y" * 250] * 20)], "a name longer than the file system allows"),
        (["run", "--all", "--profile", "smoke", "--out", "/tmp/" + "q" * 300], "a name longer than the file system"),
        (["list", "--fingerprint", "/tmp/" + "f" * 9000], "--fingerprint"),
        (["k8s", "manifests", "--pvc", "c", "--out", "/dev/null"], "is there and is not a folder"),
        (["k8s", "manifests", "--pvc", "c", "--out", A_FILE], "is there and is not a folder"),
        (["k8s", "manifests", "--pvc", "c", "--out", "/proc/kit-k8s"], "cannot make or write the folder"),
        (["list", "--fingerprint", "/dev/null"], "not a regular file"),
        (["list", "--fingerprint", A_FILE], "is not a fingerprint"),
        (["list", "--fingerprint", "RUN/run.json"], "collected_at: Field required"),
        (["list", "--fingerprint", "a-list.json"], "valid dictionary"),
        (["list", "--fingerprint", "not-utf8.json"], "is not a fingerprint"),
        (["list", "--fingerprint", "deep.json"], "nested more than 64 levels deep"),
        (["run", "--all", "--soak", "nan", "--dry-run"], "a positive number is needed"),
        (["sign", "RUN", "--key", "a-fifo"], "is not a regular file"),
        (["run", "--all", "--runs", "0", "--dry-run"], "--runs"),
        (["report", "RUN", "--baseline", "a-list.json"], "--baseline goes with --accept SPEC"),
        (["report", "RUN", "--accept", "a-fifo"], "is not a regular file"),
        (["report", "RUN", "--accept", "a-list.json", "--baseline", "a-list.json"], "a-list.json: (top level)"),
        (["baseline", "RUN", "--out", "b.json", "--expectation"], "the kit has no expectation for the cases of"),
        (["baseline", "--out", "b.json"], "Missing argument"),
        (["report", "RUN", "--verify", "--allowed-signers", "a-fifo"], "is not a regular file"),
        (["list", "--bogus"], "No such option"),
        (["reprt"], "No such command"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(real_smoke_run, tmp_path, monkeypatch, kit_in_process, args, said):
    monkeypatch.chdir(tmp_path)
    (tmp_path / A_FILE).write_bytes(bytes(range(256)))
    (tmp_path / "a-list.json").write_text("[1, 2]")
    (tmp_path / "not-utf8.json").write_bytes(b"\xff\xfe{}")
    (tmp_path / "deep.json").write_text('{"a": ' * 20_000 + "1" + "}" * 20_000)
    os.mkfifo(tmp_path / "a-fifo")  # read as a key, it kept ssh-keygen waiting for ever
    (tmp_path / "a-stranger").mkdir()  # a folder of someone's own: never sealed into a run's evidence
    (tmp_path / "a-stranger" / "notes.tex").write_text("\\section{mine}\n")
    (tmp_path / "a-run-without-run-json" / "cases" / "comm.reduce.g2").mkdir(parents=True)  # never adopted
    before = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))
    code, out, err = kit_in_process(*[arg.replace("RUN", str(real_smoke_run)) for arg in args])
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1 and len(err) < 800, out + err
    assert (
        not (tmp_path / "kit-run").exists()
        and sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")) == before
    ), "a refused command left something behind"


def test_ctrl_c_at_a_terminal_stops_the_run_with_130_and_says_how_to_resume(tmp_path):
    """A terminal's Ctrl-C signals the whole foreground process group, the kit's fork server
    among them: the server must outlive it, for the kit to stop the launch and say so."""
    run = tmp_path / "run"
    case = "pretrain.tiny-llama.naive.g2"  # its ranks train for seconds after the fork: the signal finds them running
    started = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kit.cli",
            "run",
            "--profile",
            "smoke",
            "--case",
            case,
            "--executor",
            "local",
            "--no-preflight",
            "--out",
            str(run),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    log = run / "cases" / case / "log.txt"
    deadline = time.monotonic() + 300
    while not (log.is_file() and "forked by the fork server" in log.read_text()):
        assert started.poll() is None and time.monotonic() < deadline, "the case's ranks never started"
        time.sleep(0.1)
    os.killpg(started.pid, signal.SIGINT)
    out, err = started.communicate(timeout=120)
    assert started.returncode == 130, err[-3000:]
    assert f"finish it with `kit run --resume {run}`" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["r[/]x", "[bold]run[/bold]", "[link=https://x.example]y", "a :smile: [red]z"])
def test_a_path_is_shown_as_it_is_never_read_as_markup(real_smoke_run, tmp_path, kit_in_process, name):
    """A folder's name is data: `[/]` once stopped a run from starting or resuming, and `[bold]`
    made the kit print an evidence path that does not exist."""
    import shutil

    run = tmp_path / name
    shutil.copytree(real_smoke_run, run)
    code, out, err = kit_in_process("report", "--verify", run)
    assert code == 0 and f"{run}: every file matches SHA256SUMS" in out, out + err
    code, out, err = kit_in_process("run", "--resume", run)
    assert code == 0 and "Traceback" not in err and str(run) in out + err, out + err
