"""The prepared GPU check (tests/gpu_check.py): what it chooses within its window, and what it
takes out of the archive. Its whole path (install, doctor, preflight, run, report, archive) is run
on CPU with `--profile smoke` (README, "Verify on a GPU host")."""

from __future__ import annotations

import json
import subprocess
import sys

from gpu_check import chosen_cases, scrub
from support import FIXTURES

DOCTOR = FIXTURES / "h100x1-run" / "doctor.json"


def quick_on_the_recorded_h100() -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "list", "--profile", "quick", "--json", "--fingerprint", str(DOCTOR)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_the_cases_chosen_fit_the_budget_by_their_estimates_and_none_is_predicted_to_fail():
    listed = quick_on_the_recorded_h100()
    estimates, failing = listed["host"]["estimates"], listed["host"]["predicted_failures"]
    for budget_s in (60, 200, 400):
        chosen = chosen_cases(listed, every=False, budget_s=budget_s)
        assert chosen and sum(estimates[case]["seconds"] for case in chosen) <= budget_s
        assert not set(chosen) & set(failing)
    assert chosen_cases(listed, every=False, budget_s=10) == []
    offline = chosen_cases(listed, every=False, serving=False)
    assert offline and not [case for case in offline if case.startswith("serve.")]


def test_the_archive_holds_no_hostname_serial_or_uuid(tmp_path):
    log = tmp_path / "preflight.log"
    log.write_text("host gpu-node-17, GPU-f861d2f1-d6fd-30e1-4e27-09e33fa778b7 serial 1752624008057\n")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    secrets = ["gpu-node-17", "GPU-f861d2f1-d6fd-30e1-4e27-09e33fa778b7", "1752624008057"]
    assert scrub(tmp_path, secrets) == 1
    assert log.read_text() == "host redacted-0, redacted-1 serial redacted-2\n"


def test_on_cpu_the_check_chooses_no_flashattention_case():
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "list", "--profile", "smoke", "--json"], capture_output=True, text=True
    )
    listed = json.loads(done.stdout)
    failing = listed["host"]["predicted_failures"]
    assert failing["profile.tiny-llama.f.g1"] == {"kind": "unavailable", "reason": "FlashAttention-2 needs a CUDA GPU"}
    chosen = chosen_cases(listed, every=False, budget_s=120, serving=False)
    assert chosen and not set(chosen) & set(failing)
