"""A plan that fits the host: the paper profile on 1, 2, 4, 8 and 16 GPUs, from the host's
fingerprint (never by pretending a GPU is present in a workload)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from paper_size_run import synthetic_fingerprint

from kit.protocol import build_plan, fitted_gpu_counts, load_protocol

KIT = [sys.executable, "-m", "kit.cli"]


def fingerprint_with(gpus: int, path) -> None:
    """A fingerprint of an A800 host as kit doctor writes one, with `gpus` GPUs."""
    plan = build_plan(load_protocol(), "paper")
    found = synthetic_fingerprint(plan, "NVIDIA A800-SXM4-80GB", datetime(2026, 11, 23, tzinfo=timezone.utc))
    found.gpus.gpus = [gpu.model_copy(update={"index": i}) for i, gpu in enumerate((found.gpus.gpus * 2)[:gpus])]
    path.write_text(json.dumps({"fingerprint": found.model_dump(mode="json"), "checks": []}))


@pytest.mark.parametrize(
    "gpus, scaling, comm",
    [(1, [1], 2), (2, [1, 2], 2), (4, [1, 2, 4], 4), (8, [1, 2, 4, 8], 8), (16, [1, 2, 4, 8, 16], 16)],
)
def test_kit_list_fits_the_paper_profile_to_the_hosts_gpus(tmp_path, gpus, scaling, comm):
    fingerprint_with(gpus, tmp_path / "fp.json")
    done = subprocess.run([*KIT, "list", "--profile", "paper", "--json", "--fingerprint", str(tmp_path / "fp.json")],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert listed["fitted_to_gpus"] == gpus and listed["host"]["gpus"] == gpus
    cases = {case["id"]: case for case in listed["cases"]}
    assert sorted(c["gpus"] for c in cases.values() if c["stage"] == "scaling" and not c["variant"]) == scaling
    assert {c["gpus"] for c in cases.values() if c["stage"] == "comm"} == {comm}
    skipped = listed["host"]["skipped"]
    if gpus < 8:  # the paper's 8-GPU cases say why they cannot run here
        assert skipped["pretrain.llama2-7b.naive.g8"] == f"needs 8 GPUs, host has {gpus}"
        assert all(cases[case_id]["gpus"] > gpus for case_id in skipped)
    else:  # more than 8: the paper's cases run on 8 of them
        assert skipped == {} and cases["pretrain.llama2-7b.naive.g8"]["gpus"] == 8
    if gpus == 1:
        assert set(skipped) >= {case_id for case_id in cases if case_id.startswith("comm.")}


def test_a_profile_keeps_its_written_counts_without_a_gpu_host():
    assert fitted_gpu_counts("sweep", (1, 2, 4, 8), None) == (1, 2, 4, 8)
    assert fitted_gpu_counts("fixed", (8,), 4) == (8,)
    assert fitted_gpu_counts("sweep", (1, 2, 4, 8), 6) == (1, 2, 4, 6)
    smoke = build_plan(load_protocol(), "smoke", host_gpus=4)  # a CPU profile is not fitted
    assert smoke.fitted_to_gpus is None and {c.gpus for c in smoke.cases if c.stage == "comm"} == {2}
