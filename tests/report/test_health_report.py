"""The report's health and correctness: the Health and correctness section and page one's pass,
warn and fail lines, from the real smoke run (health not applicable on a CPU host, the
silent-data-corruption check on two CPU ranks, the real vLLM CPU build's output checked), and from
a copy of it whose fingerprint holds a recorded faulty GPU (tests/fixtures/health: an A100 with a
row remapping pending) and whose serving check failed. The PDF's first page is read back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.faulty_host import faulty_copy

from kit.host.fingerprint import Fingerprint
from kit.measure.validity import invalid_reasons
from kit.report.build import build_report
from kit.report.printer import write_pdf
from kit.report.render import print_parts
from kit.rundir.directory import read_model
from kit.rundir.schema import Result
from kit.rundir.serving import ServeDetails

pytestmark = pytest.mark.e2e


def lines_of(report) -> dict[str, tuple[str, str]]:
    return {fact.label: (fact.value, fact.tone) for fact in report.page_one.host}


def test_the_smoke_runs_health_sdc_and_serving_output(real_smoke_run):
    fingerprint = read_model(real_smoke_run / "fingerprint.json", Fingerprint)
    health = fingerprint.health
    assert health is not None and health.verdict == "not_applicable"
    assert health.not_applicable and {check.status for check in health.checks} == {"not_applicable"}
    corruption = health.silent_data_corruption
    assert corruption is not None and corruption.status == "pass"
    assert [device.device for device in corruption.devices] == ["CPU rank 0", "CPU rank 1"]
    assert corruption.raw_samples and (real_smoke_run / corruption.raw_samples).is_dir()
    (serve,) = real_smoke_run.glob("cases/serve.*/result.json")
    details = read_model(serve, Result).samples[0].ranks[0].details_as(ServeDetails)
    assert details is not None and details.correctness is not None and details.correctness.status == "pass"

    report = build_report(real_smoke_run, compare=())
    lines = lines_of(report)
    assert lines["Health"][0].startswith("not applicable: no NVIDIA GPU")
    assert lines["Silent data corruption"] == (f"pass: {corruption.summary}", "good")
    assert lines["Serving output"][0].startswith("pass: 1 of 1 serving cases' greedy output equals transformers'")
    section = next(section for section in report.sections if section.anchor == "health")
    captions = [table.caption for table in section.tables]
    assert any(caption.startswith("Silent data corruption, per device: pass") for caption in captions)
    assert any(caption.startswith("Serving output against transformers") for caption in captions)


@pytest.fixture
def faulty_run(real_smoke_run, tmp_path) -> Path:
    return faulty_copy(real_smoke_run, tmp_path / "run")


def test_an_unhealthy_host_and_a_wrong_output_fail_on_page_one(faulty_run, tmp_path):
    report = build_report(faulty_run, compare=())
    lines = lines_of(report)
    assert lines["Health"] == ("fail: unhealthy: remapped_rows_pending on GPU1 (00000000:9E:00.0): yes", "bad")
    assert lines["Serving output"] == (
        "fail: output wrong in serve.tiny-llama.vllm.g1; their figures are invalid",
        "bad",
    )
    (serve,) = faulty_run.glob("cases/serve.*/result.json")
    assert any(reason.startswith("output wrong in run 1") for reason in invalid_reasons(read_model(serve, Result)))
    section = next(section for section in report.sections if section.anchor == "health")
    checks = section.tables[0]
    failed = [row for row in checks.rows if row.cells[2].text == "fail"]
    assert [(row.cells[0].text, row.cells[1].text) for row in failed] == [
        ("remapped_rows_pending", "GPU1 (00000000:9E:00.0)")
    ]
    assert "docs.nvidia.com" in (failed[0].cells[5].detail or "")  # the threshold's source
    pdf = tmp_path / "report.pdf"
    write_pdf(print_parts(report), pdf)
    page = subprocess.run(["pdftotext", "-f", "1", "-l", "1", str(pdf), "-"], capture_output=True, text=True).stdout
    assert "unhealthy: remapped_rows_pending" in " ".join(page.split())
