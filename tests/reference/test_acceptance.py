"""Acceptance against a spec and a baseline (kit.reference.acceptance, `kit baseline`, `kit report
--accept`): two synthetic runs of one plan written by tests/support/paper_size_run.py, the second
with every throughput 1 / 1.1 of the first (each step 10 % slower); a baseline made from the first
accepts it and rejects the second, naming each failing line; runs of one run per case decide
nothing; a malformed spec or baseline is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.faulty_host import faulty_copy
from support.paper_size_run import write_run

from kit.manifest import ManifestError
from kit.plan.protocol import build_plan, load_protocol, with_runs
from kit.reference.acceptance import EXIT_STATUS, default_spec_path, load_spec
from kit.reference.baseline import load_baseline

CASES = [
    "pretrain.llama2-7b.z3.g8",
    "pretrain.llama2-7b.q.g8",
    "finetune.llama2-7b.l.g8",
    "maxbatch.llama2-7b.q.g8",
    "serve.llama2-7b.vllm.g8",
    "comm.all_reduce.g8",
]
SLOWER = 1 / 1.1  # every step takes 10 % longer


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """As measured (3 runs a case), 10 % slower (3 runs a case), and as measured with one run a case."""
    root = tmp_path_factory.mktemp("acceptance")
    paper = build_plan(load_protocol(), "paper")
    three = with_runs(paper, 3)
    once = paper.model_copy(
        update={
            "cases": [
                case.model_copy(update={"params": case.params.model_copy(update={"runs": 1})}) for case in paper.cases
            ]
        }
    )
    return {
        "measured": write_run(root / "measured", three, cases=CASES, checked=True),
        "slower": write_run(root / "slower", three, cases=CASES, speed=SLOWER, checked=True),
        "once": write_run(root / "once", once, cases=CASES, checked=True),
        "unchecked": write_run(root / "unchecked", three, cases=CASES),
    }


@pytest.fixture(scope="module")
def baseline(runs, tmp_path_factory) -> Path:
    from kit.reference.baseline_runs import write_baseline

    out = tmp_path_factory.mktemp("baseline") / "a800.json"
    write_baseline([runs["measured"]], out, "8 x A800, as measured", None, "2026-03-02T09:00:00+00:00")
    return out


def decided(kit_in_process, run: Path, baseline: Path, out: Path, spec: Path | None = None) -> tuple[int, dict, str]:
    code, shown, err = kit_in_process(
        "report",
        run,
        "--accept",
        spec or default_spec_path(),
        "--baseline",
        baseline,
        "--format",
        "json",
        "--out",
        out,
    )
    document = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
    return code, document.get("acceptance") or {}, shown + err


def test_kit_baseline_records_each_quantity_per_gpu_with_its_runs_and_their_evidence(kit_in_process, runs, tmp_path):
    out = tmp_path / "baseline.json"
    code, shown, err = kit_in_process("baseline", runs["measured"], runs["slower"], "--out", out)
    assert code == 0, err
    made = load_baseline(out)
    assert f"wrote {out}" in shown and made.digest in shown
    assert made.gpu_model == "NVIDIA A800-SXM4-80GB" and made.kind == "runs"
    assert [run.run_id for run in made.runs] == ["measured", "slower"]
    assert all(len(run.evidence_digest) == 64 for run in made.runs)
    training = next(
        f for f in made.figures if f.case_id == "pretrain.llama2-7b.z3.g8" and f.quantity.startswith("training")
    )
    assert training.unit == "tokens/s/GPU" and len(training.values) == 6  # three runs of each
    assert training.workload.startswith("llama2-7b pre-train z3, seq 350, mb 1, bf16, ZeRO-3")
    assert {f.quantity for f in made.figures} == {
        "training_tokens_per_s",
        "serving_output_tokens_per_s",
        "serving_capacity_tokens_per_s",
        "all_reduce_bus_bandwidth",
        "max_micro_batch",
        "joules_per_token",
    }
    capacity = next(f for f in made.figures if f.quantity == "serving_capacity_tokens_per_s")
    # each run's own sweep held to the default objectives: one value a run, per GPU
    assert capacity.objectives == "p99 TTFT ≤ 2000 ms, TPOT ≤ 200 ms" and len(capacity.values) == 6
    assert capacity.unit == "tokens/s/GPU"


def test_the_baseline_accepts_its_own_run_and_rejects_one_ten_percent_slower(kit_in_process, runs, baseline, tmp_path):
    code, decision, _ = decided(kit_in_process, runs["measured"], baseline, tmp_path / "measured")
    assert (code, decision["decided"]) == (EXIT_STATUS["ACCEPT"], "ACCEPT")
    assert {line["outcome"] for line in decision["lines"]} == {"pass"}

    code, decision, shown = decided(kit_in_process, runs["slower"], baseline, tmp_path / "slower")
    assert (code, decision["decided"]) == (EXIT_STATUS["REJECT"], "REJECT")
    failing = {(line["quantity"], line["case_id"]) for line in decision["lines"] if line["outcome"] == "fail"}
    # every throughput 10 % short of 95 %, and energy per token 10 % more; the largest micro-batch is memory's
    assert failing == {
        (quantity, case)
        for case in CASES
        if not case.startswith("maxbatch")
        for quantity in (
            "training_tokens_per_s",
            "serving_output_tokens_per_s",
            "serving_capacity_tokens_per_s",
            "all_reduce_bus_bandwidth",
            "joules_per_token",
        )
        if (quantity, case) in {(line["quantity"], line["case_id"]) for line in decision["lines"]}
    }
    assert len(failing) == 10
    for line in decision["lines"]:
        if line["outcome"] == "fail":
            assert line["margin"] < 0 and f"fail: {line['label']}, {line['case_id']}" in shown


def test_one_run_per_case_is_inconclusive_and_says_why(kit_in_process, runs, baseline, tmp_path):
    code, decision, shown = decided(kit_in_process, runs["once"], baseline, tmp_path / "once")
    assert (code, decision["decided"]) == (EXIT_STATUS["INCONCLUSIVE"], "INCONCLUSIVE") and code == 3
    undecided = [line for line in decision["lines"] if line["outcome"] == "inconclusive"]
    assert undecided and all(line["why"] == "too few runs: 1 of the 3 the spec asks" for line in undecided)
    assert "INCONCLUSIVE" in shown
    out = tmp_path / "html"
    kit_in_process("report", runs["once"], "--accept", default_spec_path(), "--baseline", baseline, "--out", out)
    page = (out / "report.html").read_text()
    assert "A decisive run: `kit run --all --runs-for acceptance.yaml` (3 runs of each case the spec reads" in page


def one_line(kit_in_process, run: Path, baseline: Path, folder: Path, spec_text: str) -> tuple[int, dict]:
    """The exit status and the one line of a spec of one requirement, written into `folder`."""
    folder.mkdir()
    (folder / "spec.yaml").write_text(spec_text)
    code, decision, _ = decided(kit_in_process, run, baseline, folder / "report", folder / "spec.yaml")
    (line,) = decision["lines"]
    return code, line


def test_a_straddling_interval_is_inconclusive(kit_in_process, runs, baseline, tmp_path):
    """At 91 % of the baseline, the slower run (about 90.9 %) lies within its runs' interval of the threshold."""
    code, line = one_line(
        kit_in_process,
        runs["slower"],
        baseline,
        tmp_path / "close",
        "name: close\nmin_runs: 3\nrequirements:\n"
        "  - {quantity: training_tokens_per_s, fraction: 0.909, cases: ['pretrain.llama2-7b.z3.*']}\n",
    )
    assert (code, line["outcome"]) == (3, "inconclusive")
    assert line["why"].startswith("the interval straddles the required value")


def test_a_capacity_held_to_other_objectives_than_the_baselines_is_not_measured(
    kit_in_process, runs, baseline, tmp_path
):
    """The spec's objectives hold the run's sweeps; the baseline's capacity was held to the default:
    two capacities under two objectives are not compared."""
    code, line = one_line(
        kit_in_process,
        runs["measured"],
        baseline,
        tmp_path / "other",
        "name: interactive\nmin_runs: 3\nlatency: {ttft_ms: 450, tpot_ms: 40}\nrequirements:\n"
        "  - {quantity: serving_capacity_tokens_per_s, fraction: 0.95}\n",
    )
    assert (code, line["outcome"]) == (3, "not measured")
    assert line["why"].startswith(
        "objectives differ: the baseline's figure is held to p99 TTFT ≤ 2000 ms, TPOT ≤ 200 ms, the spec's to "
        "p99 TTFT ≤ 450 ms, TPOT ≤ 40 ms"
    )


@pytest.mark.parametrize(
    "text, key, reason",
    [
        ("name: x\nmin_runs: 3\nrequirements: []\n", "requirements", "at least 1 item"),
        ("name: x\nmin_runs: '3'\nrequirements: [{quantity: max_micro_batch, fraction: 1.0}]\n", "min_runs", "integer"),
        (
            "name: x\nmin_runs: 3\nrequirements: [{quantity: flops, fraction: 1.0}]\n",
            "requirements.0.quantity",
            "Input should be",
        ),
        (
            "name: x\nmin_runs: 3\nminruns: 3\nrequirements: [{quantity: max_micro_batch, fraction: 1.0}]\n",
            "minruns",
            "Extra inputs",
        ),
        (
            "name: x\nmin_runs: 3\nrequirements: [{quantity: max_micro_batch, fraction: -1}]\n",
            "requirements.0.fraction",
            "greater than 0",
        ),
        ("name: [x\n", "line 2", "invalid YAML"),
    ],
)
def test_a_malformed_spec_is_one_line_and_exit_2(kit_in_process, runs, baseline, tmp_path, text, key, reason):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    code, out, err = kit_in_process(
        "report",
        runs["measured"],
        "--accept",
        spec,
        "--baseline",
        baseline,
        "--format",
        "json",
        "--out",
        tmp_path / "r",
    )
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {spec}: {key}") and reason in line


def test_a_malformed_or_changed_baseline_is_one_line_and_exit_2(kit_in_process, runs, baseline, tmp_path):
    changed = tmp_path / "changed.json"
    changed.write_text(baseline.read_text().replace('"8 x A800, as measured"', '"8 x A800, better"'))
    truncated = tmp_path / "truncated.json"
    truncated.write_text(baseline.read_text()[:200])
    for path, said in ((changed, "digest: the content's digest is"), (truncated, "Invalid JSON")):
        code, out, err = kit_in_process(
            "report",
            runs["measured"],
            "--accept",
            default_spec_path(),
            "--baseline",
            path,
            "--format",
            "json",
            "--out",
            tmp_path / "r",
        )
        (line,) = err.strip().splitlines()
        assert code == 2 and line.startswith(f"error: {path}: ") and said in line


def test_the_default_spec_reads_and_names_its_quantities():
    spec = load_spec(default_spec_path()).spec
    assert spec.min_runs == 3
    assert {r.quantity for r in spec.requirements} == {
        "training_tokens_per_s",
        "serving_output_tokens_per_s",
        "serving_capacity_tokens_per_s",
        "all_reduce_bus_bandwidth",
        "max_micro_batch",
        "joules_per_token",
    }


def test_a_spec_without_a_baseline_is_refused(kit_in_process, runs):
    code, out, err = kit_in_process("report", runs["measured"], "--accept", default_spec_path(), "--format", "json")
    assert code == 2 and "names no baseline: give one with --baseline FILE" in err


def test_a_baseline_of_signed_runs_is_signed(kit_in_process, runs, tmp_path):
    import shutil
    import subprocess

    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    signed = tmp_path / "signed-run"
    shutil.copytree(runs["measured"], signed)
    assert kit_in_process("sign", signed, "--key", key)[0] == 0
    out = tmp_path / "baseline.json"
    code, _, err = kit_in_process("baseline", signed, "--out", out)
    assert code == 2 and "is signed: sign its baseline too (--sign-key KEY)" in err and not out.exists()
    assert kit_in_process("baseline", signed, "--out", out, "--sign-key", key)[0] == 0
    assert out.with_name("baseline.json.sig").is_file()
    code, decision, shown = decided(kit_in_process, signed, out, tmp_path / "r")
    assert code == 0 and f"{out}: signed by ssh-ed25519" in shown
    out.write_text(out.read_text().replace("\n", "\n ", 1))  # the same JSON, other bytes: the signature fails
    code, decision, shown = decided(kit_in_process, signed, out, tmp_path / "r2")
    assert code == 1 and "signature fails" in shown


def test_a_spec_error_is_a_manifest_error(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\n")
    with pytest.raises(ManifestError, match="min_runs"):
        load_spec(spec)


def test_page_one_opens_with_the_decision_and_the_sign_off_block(kit_in_process, runs, baseline, tmp_path):
    code, _, err = kit_in_process(
        "report",
        runs["slower"],
        "--accept",
        default_spec_path(),
        "--baseline",
        baseline,
        "--format",
        "html",
        "--out",
        tmp_path,
    )
    assert code == 1, err
    html = (tmp_path / "report.html").read_text()
    page_one = html[html.index('<section class="page-one">') : html.index("<h1>")]
    assert '<p class="decision tone-bad">REJECT</p>' in page_one
    assert "Failing: training tokens/s per GPU, pretrain.llama2-7b.z3.g8" in page_one
    for label in ("Spec", "Baseline", "Evidence", "Reviewer", "Date", "Decision"):
        assert f"<th>{label}</th>" in page_one
    assert load_spec(default_spec_path()).digest in page_one and load_baseline(baseline).digest in page_one


def test_a_fleet_report_accepts_or_rejects_each_node(kit_in_process, runs, baseline, tmp_path):
    code, shown, err = kit_in_process(
        "report",
        "--fleet",
        runs["measured"],
        runs["slower"],
        "--accept",
        default_spec_path(),
        "--baseline",
        baseline,
        "--format",
        "html",
        "--out",
        tmp_path,
    )
    assert code == EXIT_STATUS["REJECT"], err
    assert f"{runs['measured']}: ACCEPT" in shown and f"{runs['slower']}: REJECT" in shown
    html = (tmp_path / "fleet-report.html").read_text()
    assert '<th>measured</th><td class="tone-good">ACCEPT: ' in html
    assert '<th>slower</th><td class="tone-bad">REJECT: ' in html


def test_the_kits_expectation_stands_in_for_a_baseline_named_as_such(kit_in_process, runs, tmp_path):
    out = tmp_path / "expected.json"
    assert kit_in_process("baseline", runs["measured"], "--expectation", "--out", out)[0] == 0
    expected = load_baseline(out)
    assert expected.kind == "expectation" and expected.name.startswith(
        "the kit's expectation for NVIDIA A800-SXM4-80GB"
    )
    assert "no machine measured it" in expected.name
    training = {f.case_id: f.median for f in expected.figures if f.quantity == "training_tokens_per_s"}
    assert set(training) == {"pretrain.llama2-7b.z3.g8", "pretrain.llama2-7b.q.g8", "finetune.llama2-7b.l.g8"}
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: a tenth of the bound\nmin_runs: 3\nrequirements: [{quantity: training_tokens_per_s, fraction: 0.1}]\n"
    )
    code, decision, _ = decided(kit_in_process, runs["measured"], out, tmp_path / "r", spec)
    assert (code, decision["decided"], decision["baseline_kind"]) == (0, "ACCEPT", "expectation")
    code, _, err = kit_in_process("baseline", runs["measured"], runs["slower"], "--expectation", "--out", out)
    assert code == 2 and "--expectation takes one run" in err


# the smoke run's serving case makes one run: its figures against themselves decide, whatever the CPU's spread
ONE_RUN_SPEC = (
    "name: one run\nmin_runs: 1\nrequirements:\n"
    "  - {quantity: serving_output_tokens_per_s, fraction: 0.95}\n"
    "  - {quantity: serving_capacity_tokens_per_s, fraction: 0.95}\n"
)


@pytest.mark.e2e
def test_a_real_smoke_run_passes_its_health_lines_and_a_faulty_copy_is_rejected_for_them(
    kit_in_process, real_smoke_run, tmp_path
):
    """The real smoke run: GPU health not applicable on a CPU host, the preflight's silent-data-
    corruption check and the real vLLM CPU build's output check passed, so it is accepted against a
    baseline of itself; a copy with a recorded faulty GPU and a wrong serving output is rejected for
    those two lines, however fast."""
    baseline, spec = tmp_path / "smoke.json", tmp_path / "spec.yaml"
    spec.write_text(ONE_RUN_SPEC)
    code, _, err = kit_in_process("baseline", real_smoke_run, "--out", baseline)
    assert code == 0, err
    code, decision, shown = decided(kit_in_process, real_smoke_run, baseline, tmp_path / "self", spec)
    assert (code, decision["decided"]) == (0, "ACCEPT"), shown
    assert {line["requirement"]: line["outcome"] for line in decision["conditions"]} == {
        "gpus_healthy": "not applicable",
        "silent_data_corruption": "pass",
        "serving_output": "pass",
    }
    assert {line["quantity"] for line in decision["lines"]} == {
        "serving_output_tokens_per_s",
        "serving_capacity_tokens_per_s",
    }

    faulty = faulty_copy(real_smoke_run, tmp_path / "faulty")
    code, decision, shown = decided(kit_in_process, faulty, baseline, tmp_path / "faulty-report", spec)
    assert (code, decision["decided"]) == (1, "REJECT")
    failing = {line["requirement"]: line["observed"] for line in decision["conditions"] if line["outcome"] == "fail"}
    assert failing.keys() == {"gpus_healthy", "serving_output"}
    assert "remapped_rows_pending on GPU1" in failing["gpus_healthy"]
    assert failing["serving_output"] == "wrong in serve.tiny-llama.vllm.g1"
    assert "  fail: GPU health: " in shown and "  fail: Serving output: wrong in serve.tiny-llama.vllm.g1" in shown


def test_a_run_that_recorded_no_health_is_inconclusive_unless_the_spec_waives_it(
    kit_in_process, runs, baseline, tmp_path
):
    code, decision, _ = decided(kit_in_process, runs["unchecked"], baseline, tmp_path / "unchecked")
    assert (code, decision["decided"]) == (3, "INCONCLUSIVE")
    assert {line["requirement"]: (line["outcome"], line["why"]) for line in decision["conditions"]} == {
        "gpus_healthy": ("not measured", "the run's fingerprint has no health section"),
        "silent_data_corruption": (
            "not measured",
            "no preflight ran the check (kit run runs it unless --no-preflight)",
        ),
        "serving_output": ("not measured", "not checked: serve.llama2-7b.vllm.g8"),
    }
    spec = tmp_path / "waived.yaml"
    text = (
        default_spec_path()
        .read_text()
        .replace(
            "health: {gpus_healthy: true, no_warnings: false, silent_data_corruption: true, serving_output: true}",
            "health: {gpus_healthy: false, silent_data_corruption: false, serving_output: false}",
        )
    )
    assert "gpus_healthy: false" in text
    spec.write_text(text)
    code, decision, _ = decided(kit_in_process, runs["unchecked"], baseline, tmp_path / "waived", spec)
    assert (code, decision["decided"], decision["conditions"]) == (0, "ACCEPT", [])
