"""The health gate as a user meets it: `kit doctor` and `kit run` on a host whose `nvidia-smi -q`
answers with a recorded output of a real faulty machine (tests/fixtures/health: an A100 with a
row remapping pending). nvidia-smi on PATH replays that recording; every other nvidia-smi
command fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support import FIXTURES

HEALTH = FIXTURES / "health"


def kit_with_recorded_nvidia_smi(tmp_path: Path, recording: str, *args: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    replay = bin_dir / "nvidia-smi"
    replay.write_text(f'#!/bin/sh\nif [ "$*" = "-q" ]; then cat "{HEALTH / recording}"; exit 0; fi\nexit 9\n')
    replay.chmod(0o755)
    env = {**os.environ, "COLUMNS": "400", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "kit.cli", *args], capture_output=True, text=True, env=env)


def test_doctor_fails_a_host_with_a_pending_row_remap(tmp_path):
    done = kit_with_recorded_nvidia_smi(
        tmp_path, "nvidia-smi-q-a100-sxm4x4-row-remap-pending.txt", "doctor", "--profile", "smoke", "--json"
    )
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    gate = next(check for check in report["checks"] if check["name"] == "gpus_healthy")
    assert (gate["status"], gate["observed"]) == (
        "fail",
        "unhealthy: remapped_rows_pending on GPU1 (00000000:9E:00.0): yes",
    )
    health = report["fingerprint"]["health"]
    assert len(health["gpus"]) == 4
    failed = [(c["name"], c["scope"]) for c in health["checks"] if c["status"] == "fail"]
    assert failed == [("remapped_rows_pending", "GPU1 (00000000:9E:00.0)")]


def test_doctor_shows_the_health_table(tmp_path):
    done = kit_with_recorded_nvidia_smi(tmp_path, "nvidia-smi-q-a100x8-healthy.txt", "doctor", "--profile", "smoke")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Health (manifests/health.yaml version 1): warnings" in done.stdout
    assert "persistence_mode_off" in done.stdout


def test_run_stops_before_measuring_with_one_line(tmp_path):
    out = tmp_path / "run"
    done = kit_with_recorded_nvidia_smi(
        tmp_path,
        "nvidia-smi-q-a100-sxm4x4-row-remap-pending.txt",
        "run",
        "--all",
        "--profile",
        "smoke",
        "--out",
        str(out),
    )
    assert done.returncode == 1
    (line,) = [line for line in done.stderr.splitlines() if "refusing to start" in line]
    assert "gpus_healthy: unhealthy: remapped_rows_pending on GPU1 (00000000:9E:00.0): yes" in line
    assert "--force" in line
    assert not out.exists()


def test_slurm_nodes_are_gated_each_on_its_own_fingerprint(tmp_path):
    """Under Slurm each node fingerprints itself into the run directory; the recorded H100 host's
    fingerprint stands for a node, once with a healthy A100 reading and once with the faulty one."""
    from kit.host.fingerprint import Fingerprint
    from kit.host.health import HostHealth, XidLog
    from kit.host.health_checks import judged
    from kit.host.nvidia_smi_query import parse_query
    from kit.runner import unhealthy_nodes

    node = Fingerprint.model_validate(json.loads((FIXTURES / "h100x1-run" / "doctor.json").read_text())["fingerprint"])
    files = {}
    for name, recording in (
        ("n1", "nvidia-smi-q-a100x8-healthy.txt"),
        ("n2", "nvidia-smi-q-a100-sxm4x4-row-remap-pending.txt"),
    ):
        driver, gpus = parse_query((HEALTH / recording).read_text())
        health = judged(HostHealth(catalog="", driver_version=driver, gpus=gpus, xid=XidLog(source="dmesg -T")))
        (tmp_path / f"{name}.json").write_text(node.model_copy(update={"health": health}).model_dump_json())
        files[name] = f"{name}.json"
    assert unhealthy_nodes(tmp_path, files) == [
        "node n2 unhealthy: remapped_rows_pending on GPU1 (00000000:9E:00.0): yes"
    ]


def test_a_forced_run_records_the_unhealthy_host_and_its_report_says_so(tmp_path):
    from kit.report.build import build_report

    out = tmp_path / "run"
    done = kit_with_recorded_nvidia_smi(
        tmp_path,
        "nvidia-smi-q-a100-sxm4x4-row-remap-pending.txt",
        "run",
        "--case",
        "comm.all_reduce.g2",
        "--profile",
        "smoke",
        "--executor",
        "local",
        "--no-preflight",
        "--force",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--force: starting despite failing checks (gpus_healthy)" in done.stderr
    assert json.loads((out / "run.json").read_text())["forced"] is True
    lines = {fact.label: fact for fact in build_report(out, compare=()).page_one.host}
    assert lines["Health"].value == "fail: unhealthy: remapped_rows_pending on GPU1 (00000000:9E:00.0): yes"
    assert lines["Health"].tone == "bad"
