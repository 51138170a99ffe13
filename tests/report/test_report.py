"""kit.report: evidence checks, statistics, the report model, and the rendered HTML and PDF.

Run directories are written here with kit.rundir.schema the way the runner writes them: run.json, one
folder per case with case.json, log.txt, rank samples and result.json (metrics from the case's
stage unit, kit/measure/), then SHA256SUMS.
"""

from __future__ import annotations

import hashlib
import math
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kit.host.fingerprint import (
    ContainerRuntime,
    CpuInfo,
    Fingerprint,
    Gpu,
    GpuInventory,
    HostInfo,
    ImageProbe,
    KitInfo,
    NetworkInfo,
    Topology,
    TopologyClass,
)
from kit.host.kit_source import PACKAGE_DIR, measuring_sources, sources_sha256
from kit.measure.training import train_case_metrics
from kit.plan.protocol import Plan
from kit.reference.published import load_reference
from kit.report import stats
from kit.report.build import build_report
from kit.report.load import load_run
from kit.report.render import render, render_html
from kit.report.sections.environment import peak_figures
from kit.rundir.directory import RunDir, UnreadableRun, atomic_write_model
from kit.rundir.evidence import EvidenceError, newest_run, verify
from kit.rundir.schema import (
    ContainerRun,
    PeakMemory,
    RankSample,
    Result,
    RunInfo,
    RunSample,
)
from kit.theory.hardware import load_hardware

KIT = KitInfo(version="0.1.0", workload_sources_sha256="ab" * 32)
A800 = "NVIDIA A800-SXM4-80GB"


def rank_samples(case, index: int, step_s: float, device_name: str) -> list[RankSample]:
    device = "cpu" if case.device == "cpu" else "cuda"
    memory = PeakMemory(host_rss_bytes=600 * 2**20, device_allocated_bytes=None if device == "cpu" else 30 * 2**30)
    return [
        RankSample(
            rank=r,
            world_size=case.gpus,
            status="ok",
            device=device,
            device_name=device_name,
            step_s=[step_s * (1 + 0.01 * index)] * 5,
            tokens_per_step=350 * case.params.micro_batch,
            peak_memory=memory,
            versions={"torch": "2.13.0"},
            started_at="2026-01-01T00:00:00+00:00",
            finished_at="2026-01-01T00:00:05+00:00",
        )
        for r in range(case.gpus)
    ]


def write_run(
    root: Path,
    plan: Plan,
    cases: dict[str, str | float],
    gpus: list[str] = (),
    fingerprint: Fingerprint | None = None,
    started: str = "2026-01-01T00:00:00+00:00",
    fingerprint_after: Fingerprint | None = None,
    image_digests: tuple[str, ...] = (),
) -> Path:
    """A finished run directory: each case is a step time (ok) or a status with a reason."""
    run = RunDir(root)
    run.write_info(
        RunInfo(
            run_id=root.name,
            kit=KIT,
            profile=plan.profile,
            plan=plan,
            selected=list(cases),
            executor="local",
            host={"hostname": "bench-host-01", "os": "Linux-6.1", "python": "3.11.7", "gpus": list(gpus)},
            argv=["kit", "run"],
            started_at=started,
            finished_at="2026-01-01T01:00:00+00:00",
            status="finished",
        )
    )
    device_name = gpus[0] if gpus else "x86_64"
    for case_id, outcome in cases.items():
        case = next(c for c in plan.cases if c.id == case_id)
        folder = run.prepare_case(case)
        (folder / "log.txt").write_text(f"log of {case_id}\n")
        if isinstance(outcome, float):
            samples = [
                RunSample(
                    index=k,
                    status="ok",
                    exit_code=0,
                    wall_s=5.0,
                    ranks=rank_samples(case, k, outcome, device_name),
                    container=ContainerRun(
                        image="kit-train:1",
                        image_digest=image_digests[k - 1],
                        container_id=f"c{k}",
                        exit_code=0,
                        oom_killed=False,
                    )
                    if image_digests
                    else None,
                )
                for k in (1, 2, 3)
            ]
            metrics, notes = train_case_metrics(case, samples)
            status, reason = "ok", None
        else:
            status, reason, metrics, notes = outcome, f"{outcome} in this test", {}, []
            samples = [RunSample(index=1, status=outcome, reason=reason, exit_code=1, wall_s=1.0, ranks=[])]
        for sample in samples:
            for rank in sample.ranks:
                atomic_write_model(folder / "runs" / str(sample.index) / f"rank-{rank.rank}.json", rank)
        run.write_result(
            Result(
                case_id=case_id,
                stage=case.stage,
                status=status,
                reason=reason,
                case=case,
                metrics=metrics,
                notes=notes,
                samples=samples,
                executor="local",
                started_at=started,
                finished_at=started,
            )
        )
    for name, recorded in (("fingerprint.json", fingerprint), ("fingerprint-after.json", fingerprint_after)):
        if recorded is not None:
            (root / name).write_text(recorded.model_dump_json())
    run.write_sums()
    return root


SMOKE_CASES = {
    "pretrain.tiny-llama.naive.g2": 0.1,
    "pretrain.tiny-llama.z2.g2": "oom",
    "pretrain.tiny-llama.f.g2": "unavailable",
    "scaling.tiny-llama.q.g1.b2": 0.1,
    "scaling.tiny-llama.q.g2.b2": 0.125,
}


@pytest.fixture(scope="module")
def reference():
    return load_reference()


TRAINING_STAGES = ("pretrain", "finetune", "scaling")


@pytest.fixture(scope="module")
def training_plan(smoke_plan) -> Plan:
    """The smoke plan's training stages only, so that the other stages are absent from it."""
    return smoke_plan.model_copy(update={"cases": [c for c in smoke_plan.cases if c.stage in TRAINING_STAGES]})


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory, training_plan) -> Path:
    """One smoke run for the tests that only read it."""
    return write_run(tmp_path_factory.mktemp("runs") / "smoke-run", training_plan, SMOKE_CASES)


@pytest.fixture(scope="module")
def smoke_report(smoke_dir, reference, protocol):
    return build_report(smoke_dir, ["reference"], reference=reference, protocol=protocol)


@pytest.fixture
def smoke_run(tmp_path, smoke_dir) -> Path:
    """A private copy, for tests that change it."""
    return Path(shutil.copytree(smoke_dir, tmp_path / "smoke-run"))


@pytest.fixture
def report_of(reference, protocol):
    def build(run: Path, compare=("reference",), redact: bool = False):
        return build_report(run, list(compare), redact, reference=reference, protocol=protocol)

    return build


def a800_fingerprint(torch: str = "2.4.0") -> Fingerprint:
    return Fingerprint(
        collected_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        host=HostInfo(hostname="bench-host-01", cpu=CpuInfo(model="AMD EPYC 7402")),
        gpus=GpuInventory(
            driver_version="550.54.15", gpus=[Gpu(index=i, name=A800, uuid=f"GPU-uuid-{i}") for i in range(8)]
        ),
        topology=Topology(
            topology_class=TopologyClass(
                gpu_count=8, interconnect="nvlink-all-pairs", label="8 GPUs, all pairs NVLink (NV8)"
            )
        ),
        network=NetworkInfo(),
        container_runtime=ContainerRuntime(),
        image=ImageProbe(python="3.11.7", torch=torch, cuda_runtime="12.4"),
        kit=KIT,
    )


def section(report, anchor: str):
    return next(s for s in report.sections if s.anchor == anchor)


def texts(table) -> list[list[str]]:
    return [[cell.text for cell in row.cells] for row in table.rows]


# --- Evidence -----------------------------------------------------------------------------------


def test_a_run_as_written_verifies(smoke_dir):
    assert verify(smoke_dir) == []


def test_verify_names_every_changed_missing_and_added_file(smoke_run):
    (smoke_run / "cases/pretrain.tiny-llama.naive.g2/log.txt").write_text("edited\n")
    (smoke_run / "cases/pretrain.tiny-llama.naive.g2/runs/1/rank-0.json").unlink()
    (smoke_run / "notes.txt").write_text("added later\n")
    assert sorted(verify(smoke_run)) == [
        "added: notes.txt (not in SHA256SUMS)",
        "changed: cases/pretrain.tiny-llama.naive.g2/log.txt",
        "missing: cases/pretrain.tiny-llama.naive.g2/runs/1/rank-0.json",
    ]


def test_verify_holds_the_run_to_the_digest_its_report_printed(smoke_run):
    digest = hashlib.sha256((smoke_run / "SHA256SUMS").read_bytes()).hexdigest()

    def verify_with(expected: str):
        return subprocess.run(
            [sys.executable, "-m", "kit.cli", "report", str(smoke_run), "--verify", "--expect-digest", expected],
            capture_output=True,
            text=True,
        )

    assert verify_with(digest).returncode == 0
    assert verify_with(digest[:16] + "…").returncode == 0  # as the page footer prints it
    other = verify_with("0" * 16)
    assert other.returncode == 1 and f"evidence digest {digest}, not the expected" in other.stdout
    malformed = verify_with("xyz")
    assert malformed.returncode == 2 and "16 to 64 hexadecimal characters" in malformed.stderr


def test_a_run_without_evidence_is_named_with_its_status(smoke_run):
    (smoke_run / "SHA256SUMS").unlink()
    [problem] = verify(smoke_run)
    assert problem.startswith("SHA256SUMS missing") and "status: finished" in problem


def test_rendering_refuses_a_tampered_run_and_writes_nothing(smoke_run, tmp_path):
    result = smoke_run / "cases/pretrain.tiny-llama.naive.g2/result.json"
    result.write_text(result.read_text().replace('"mean": ', '"mean": 1', 1))
    with pytest.raises(EvidenceError, match="changed: cases/pretrain.tiny-llama.naive.g2/result.json"):
        render(smoke_run, ["reference"], ["html", "pdf"], tmp_path / "out", False)
    assert not (tmp_path / "out").exists()


def test_a_report_is_never_written_into_the_run_it_reports(smoke_run):
    with pytest.raises(ValueError, match="inside the run directory"):
        render(smoke_run, ["reference"], ["html"], smoke_run / "report", False)
    assert verify(smoke_run) == []


def test_the_newest_run_is_the_one_that_started_last(tmp_path, smoke_plan):
    case = {"pretrain.tiny-llama.naive.g2": 0.1}
    write_run(tmp_path / "runs" / "b", smoke_plan, case, started="2026-01-01T00:00:00+00:00")
    write_run(tmp_path / "runs" / "a", smoke_plan, case, started="2026-02-01T00:00:00+00:00")
    assert newest_run(tmp_path / "runs") == tmp_path / "runs" / "a"
    with pytest.raises(FileNotFoundError):
        newest_run(tmp_path / "empty")


# --- Statistics ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, a, b, exact",
    [
        (0.3, 1.0, 1.0, 0.3),  # I_x(1, 1) = x
        (0.3, 2.5, 1.0, 0.3**2.5),  # I_x(a, 1) = x^a
        (0.3, 1.0, 4.0, 1 - 0.7**4),  # I_x(1, b) = 1 - (1 - x)^b
        (0.5, 7.0, 7.0, 0.5),  # symmetric
        (0.9, 30.0, 0.5, None),
    ],
)
def test_the_incomplete_beta_matches_closed_forms(x, a, b, exact):
    value = stats.regularized_incomplete_beta(x, a, b)
    if exact is None:  # only the identity I_x(a, b) = 1 - I_{1-x}(b, a)
        exact = 1 - stats.regularized_incomplete_beta(1 - x, b, a)
    assert value == pytest.approx(exact, rel=1e-12)


def test_the_p_value_without_scipy_is_the_cauchy_tail_at_one_degree_of_freedom(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy.special", None)
    p_value, method = stats.two_sided_p_value(2.0, 1.0)
    assert method == "continued fraction"
    assert p_value == pytest.approx(1 - 2 * math.atan(2.0) / math.pi, rel=1e-12)


@pytest.mark.parametrize("t, df", [(0.3, 2.0), (2.0, 3.96), (4.7, 3.96), (-1.5, 10.5), (12.0, 4.0), (0.05, 1.0)])
def test_the_p_value_without_scipy_is_scipys(monkeypatch, t, df):
    from scipy.stats import t as student_t

    monkeypatch.setitem(sys.modules, "scipy.special", None)  # the kit's continued fraction, as without scipy
    p_value, method = stats.two_sided_p_value(t, df)
    assert method == "continued fraction"
    assert p_value == pytest.approx(2 * student_t.sf(abs(t), df), rel=1e-9)


def test_welchs_test_finds_a_clear_difference_and_its_degrees_of_freedom():
    test = stats.welch_t_test([1.0, 1.2, 0.9], [1.5, 1.7, 1.4, 1.6])
    assert test.t == pytest.approx(4.7274557, rel=1e-6)
    assert test.df == pytest.approx(3.9593148, rel=1e-6)
    assert test.p_value == pytest.approx(0.0093519, rel=1e-4) and test.significant


@pytest.mark.parametrize(
    "a, b, reason",
    [
        ([1.0], [1.0, 2.0], "needs at least 2 runs on each side (A: 1, B: 2)"),
        ([1.0, 1.0], [2.0, 2.0], "no run-to-run variation on either side: the test is undefined"),
    ],
)
def test_welchs_test_says_why_it_cannot_answer(a, b, reason):
    test = stats.welch_t_test(a, b)
    assert test.p_value is None and test.reason == reason


# --- The report model ---------------------------------------------------------------------------


def test_a_smoke_report_says_it_is_not_comparable_on_the_cover_and_every_page(smoke_report):
    report = smoke_report
    assert report.banner.startswith("Not comparable to the reference: profile smoke")
    assert report.footer.endswith("NOT COMPARABLE TO THE REFERENCE")
    counts = {c.label: c.count for c in report.cover.claim_counts}
    assert counts == {"consistent": 0, "deviates": 0, "not applicable": 27}  # consistent and deviates even at 0


def test_pre_training_uses_the_papers_layout_with_status_words(smoke_report):
    table, effective = section(smoke_report, "pretrain").tables
    assert table.header == ["Method", "10^3 tokens/s", "peak memory (GiB)"]
    assert effective.header == ["Case", "Option: observed", "allocated", "reserved", "device used (NVML)"]
    rows = {row[0]: row[1:] for row in texts(table)}
    assert rows["Naive"] == ["6.86 ± 0.07", "0.586 ± 0.000"]  # 700 tokens / 0.101, 0.102, 0.103 s
    assert rows["Z2"] == ["-", "-"]
    assert rows["F"] == ["unavailable"]
    assert rows["Z3"] == ["not run"]


def test_the_scaling_section_gives_the_efficiency_from_one_process(smoke_report):
    scaling = section(smoke_report, "scaling")
    assert [row[0] for row in texts(scaling.tables[0])] == ["1", "2"]
    assert texts(scaling.tables[0])[1][3] == "80.0 %"  # 2 processes at 1.25x the step time
    assert scaling.charts and scaling.charts[0].svg.startswith("<svg")


def test_stages_that_did_not_run_say_why(smoke_report, training_plan):
    report = smoke_report
    assert section(report, "serve").not_run.startswith("Not run: the smoke profile has no serve stage.")
    finetune = len([c for c in training_plan.cases if c.stage == "finetune"])
    assert f"none of the {finetune} finetune cases of the profile was selected" in section(report, "finetune").not_run
    appendix = section(report, "appendix")
    images = next(s for s in appendix.subsections if s.anchor == "images")
    assert images.not_run.startswith("Not recorded: the local executor ran the workloads in the host's Python")


def test_an_ok_result_whose_figures_its_raw_samples_cannot_give_is_refused(tmp_path, paper_plan, report_of):
    """An ok result with no rank samples (which the runner never writes) has nothing behind it."""
    run = write_run(tmp_path / "a", paper_plan, {"profile.llama2-7b.base.g1": "ok"})
    with pytest.raises(EvidenceError, match="profile.llama2-7b.base.g1: its raw samples give no figures"):
        report_of(run, [])


def test_a_stored_figure_that_its_raw_samples_do_not_give_refuses_the_report_even_re_hashed(tmp_path, training_plan):
    """A mean edited in result.json and SHA256SUMS written again: the hashes agree, the figures do not."""
    run = write_run(tmp_path / "a", training_plan, {"pretrain.tiny-llama.naive.g2": 0.1})
    run_dir = RunDir(run)
    result = run_dir.read_result("pretrain.tiny-llama.naive.g2")
    result.metrics["tokens_per_s"].mean *= 1.5
    run_dir.write_result(result)
    run_dir.write_sums()
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "report", str(run), "--format", "html"], capture_output=True, text=True
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    said = " ".join(done.stderr.split())
    assert "pretrain.tiny-llama.naive.g2: tokens_per_s stored" in said and "the raw samples give" in said


def test_a_run_without_a_figure_its_measuring_code_did_not_compute_is_sent_to_the_kit_that_made_it(
    tmp_path, training_plan
):
    """A figure this kit computes and the run lacks: with other measuring code it is a newer figure
    (render with the run's kit); with this kit's own code it was removed, and is refused as such."""
    run = write_run(tmp_path / "a", training_plan, {"pretrain.tiny-llama.naive.g2": 0.1})
    run_dir = RunDir(run)
    result = run_dir.read_result("pretrain.tiny-llama.naive.g2")
    del result.metrics["tokens_per_s"]
    run_dir.write_result(result)
    run_dir.write_sums()
    with pytest.raises(UnreadableRun, match="render it with the kit that made it"):
        load_run(run, redact=False)
    info = run_dir.read_info()
    measuring = sources_sha256(PACKAGE_DIR, measuring_sources())
    run_dir.write_info(
        info.model_copy(update={"kit": info.kit.model_copy(update={"workload_sources_sha256": measuring})})
    )
    run_dir.write_sums()
    with pytest.raises(EvidenceError, match="pretrain.tiny-llama.naive.g2: tokens_per_s is not stored"):
        load_run(run, redact=False)


def test_every_protocol_parameter_says_where_its_value_comes_from(smoke_report):
    parameters = next(s for s in section(smoke_report, "appendix").subsections if s.anchor == "parameters")
    pretrain = {row[0]: row[1:] for row in texts(parameters.tables[0])}
    assert pretrain["seq_len"] == ["64", "profile smoke (protocol: 350)"]
    assert pretrain["micro_batch"] == ["1", "paper"]
    assert pretrain["warmup_steps"] == ["2", "profile smoke (protocol: 30)"]
    assert pretrain["seed"] == ["1234", "kit's choice (not published)"]
    assert pretrain["zero_stage"][1] == "set by the method"


def test_image_digests_come_from_each_runs_container_and_a_second_digest_is_marked(tmp_path, training_plan, report_of):
    run = write_run(
        tmp_path / "a",
        training_plan,
        {"pretrain.tiny-llama.naive.g2": 0.1},
        image_digests=("sha256:aa", "sha256:aa", "sha256:bb"),
    )
    images = next(s for s in section(report_of(run, []), "appendix").subsections if s.anchor == "images")
    [table] = images.tables
    assert texts(table) == [
        ["kit-train:1", "sha256:aa", "pretrain.tiny-llama.naive.g2"],
        ["kit-train:1", "sha256:bb", "pretrain.tiny-llama.naive.g2"],
    ]
    assert table.notes and table.rows[0].cells[1].tone == "bad"


def test_without_the_reference_the_claims_section_says_how_to_ask_for_it(smoke_dir, report_of):
    report = report_of(smoke_dir, [])
    assert "--compare reference" in section(report, "claims").not_run
    assert report.cover.claim_counts == []


def test_the_raw_data_index_lists_every_file_with_its_digest(smoke_report, smoke_dir):
    raw = next(s for s in section(smoke_report, "appendix").subsections if s.anchor == "raw-data")
    listed = {row[0]: row[2] for row in texts(raw.tables[0])}
    assert listed == dict(reversed(line.split("  ")) for line in (smoke_dir / "SHA256SUMS").read_text().splitlines())


def test_the_printed_index_pins_each_case_folder_by_the_digest_of_its_sums_lines(smoke_report, smoke_dir):
    raw = next(s for s in section(smoke_report, "appendix").subsections if s.anchor == "raw-data")
    by_folder = {row[0]: row for row in texts(raw.tables[1])}
    lines = (smoke_dir / "SHA256SUMS").read_text().splitlines()
    folder = "cases/pretrain.tiny-llama.naive.g2/"
    mine = [line for line in lines if f"  {folder}" in line]  # grep -F '  <folder>' SHA256SUMS
    assert by_folder[folder][1:] == [
        str(len(mine)),
        str(sum((smoke_dir / line.split("  ", 1)[1]).stat().st_size for line in mine)),
        hashlib.sha256("".join(line + "\n" for line in mine).encode()).hexdigest(),  # ... | sha256sum
    ]
    assert by_folder["run.json"][3] == next(line.split("  ")[0] for line in lines if line.endswith("  run.json"))
    assert raw.tables[0].media == "screen" and raw.tables[1].media == "all"
    assert "Raw data, file by file" in render_html(smoke_report) and "Raw data by case folder" in render_html(
        smoke_report
    )
    assert "Raw data, file by file" not in render_html(smoke_report, "print")


def test_the_pdf_prints_the_case_folder_index_as_lines_of_the_same_cells(smoke_report):
    """A long per-case listing prints as aligned monospace lines (a table cell is costly to print):
    every row of the HTML's table on one line, its cells in column order, nothing dropped."""
    from markupsafe import escape

    from kit.report.listing import listing_lines

    raw = next(s for s in section(smoke_report, "appendix").subsections if s.anchor == "raw-data")
    table = raw.tables[1]
    lines = listing_lines(table)
    assert table.print_as_listing and len(lines) == len(table.rows) + 2
    assert [re.split(r"\s{2,}", line.strip()) for line in lines[2:]] == texts(table)
    assert re.split(r"\s{2,}", lines[0]) == table.header and set(lines[1]) == {"-"}
    printed, screen = render_html(smoke_report, "print"), render_html(smoke_report)
    assert str(escape("\n".join(lines))) in printed and "\n".join(lines[2:]) not in screen


def test_a_listing_sets_each_case_over_its_metrics_and_runs_a_spanning_cell_on():
    from kit.report.listing import listing_lines
    from kit.report.model import Cell, Row, Table

    table = Table(
        caption="c",
        header=["Case, then each metric", "Mean ± std, unit"],
        rows=[
            Row(cells=[Cell(text="serve.a.vllm.g8", colspan=2)], heading=True),
            Row(cells=[Cell(text="ttft_p99_s"), Cell(text="1.54 (1 run) s")]),
            Row(cells=[Cell(text="output tokens/s"), Cell(text="34614 ± 12 tokens/s", detail="3 runs")]),
            Row(cells=[Cell(text="serve.b.sglang.g8"), Cell(text="oom")]),
        ],
    )
    first = len("  Case, then each metric")  # the widest first cell, with room for the indent
    assert listing_lines(table) == [
        f"{'Case, then each metric':{first}}  Mean ± std, unit",
        "-" * (first + 2 + len("Mean ± std, unit")),
        "serve.a.vllm.g8",
        f"{'  ttft_p99_s':{first}}  1.54 (1 run) s",
        f"{'  output tokens/s':{first}}  34614 ± 12 tokens/s (3 runs)",
        f"{'  serve.b.sglang.g8':{first}}  oom",
    ]


def test_a_listing_wider_than_the_page_wraps_its_widest_column_under_itself():
    """A parameter's value can list every method of a stage: its column is narrowed to the line
    and the rest of the value goes on below it, every word kept, the next column still aligned."""
    from kit.report.listing import LINE_CHARS, listing_lines
    from kit.report.model import Cell, Row, Table

    methods = ", ".join(f"z{n}+o+r+f" for n in range(40))  # longer than a printed line
    table = Table(
        caption="c",
        header=["Parameter", "Value", "Origin"],
        rows=[
            Row(cells=[Cell(text="runs"), Cell(text="3"), Cell(text="paper")]),
            Row(cells=[Cell(text="recompute"), Cell(text=f"true: {methods}"), Cell(text="set by the method")]),
        ],
    )
    lines = listing_lines(table)
    assert max(len(line) for line in lines) <= LINE_CHARS
    origin = lines[0].index("Origin")
    assert lines[2][origin:] == "paper" and lines[3][origin:] == "set by the method"
    value = lines[0].index("Value")
    continued = lines[4:]
    assert continued and all(line[:value].strip() == "" and len(line) < origin for line in continued)
    assert " ".join(line.strip() for line in [lines[3][value:origin], *continued]).split() == f"true: {methods}".split()


def test_the_pdf_draws_each_chart_from_the_svg_the_html_inlines(smoke_report):
    """The PDF's source holds each chart as an <img> of the very SVG the HTML inlines (WeasyPrint
    parses it once that way), so both show the same drawing."""
    import base64

    screen, printed = render_html(smoke_report), render_html(smoke_report, "print")
    inline = re.findall(r"<svg.*?</svg>", screen, re.S)
    embedded = re.findall(r'<img src="data:image/svg\+xml;base64,([^"]+)"', printed)
    assert inline and [base64.b64decode(uri).decode() for uri in embedded] == inline
    assert "<svg" not in printed


def test_a_comparable_run_is_judged_against_the_claims(tmp_path, paper_plan, report_of):
    run = write_run(
        tmp_path / "a800",
        paper_plan,
        {"finetune.llama2-7b.l.g8": 0.05, "finetune.llama2-7b.ql.g8": 0.1},
        gpus=[A800] * 8,
    )
    report = report_of(run)
    assert report.banner is None
    [c16] = [row for row in section(report, "claims").tables[0].rows if row.cells[0].text == "C16"]
    assert c16.cells[2].text == "consistent"
    assert c16.cells[1].detail.endswith("Verdict: 1 of 3 relations hold; 2 not evaluated.")


def test_an_ab_comparison_tests_each_common_case_and_the_fingerprints(tmp_path, paper_plan, report_of):
    cases = {"pretrain.llama2-7b.naive.g8": 0.1, "pretrain.llama2-7b.z2.g8": 0.1}
    a = write_run(tmp_path / "a", paper_plan, cases, gpus=[A800] * 8, fingerprint=a800_fingerprint())
    b = write_run(
        tmp_path / "b",
        paper_plan,
        {**cases, "pretrain.llama2-7b.z2.g8": 0.2},
        gpus=[A800] * 8,
        fingerprint=a800_fingerprint(torch="2.5.0"),
    )
    report = report_of(a, [str(b)])
    ab = section(report, "ab-b")
    signers, comparability, cases_table = ab.tables
    assert texts(signers) == [["A = a", "unsigned (no SHA256SUMS.sig)"], ["B = b", "unsigned (no SHA256SUMS.sig)"]]
    stage, verdict, reasons = texts(comparability)[0]
    assert (stage, verdict) == ("pretrain", "no") and reasons.startswith("torch differs: 2.4.0 vs 2.5.0;")
    rows = {(row[0], row[1]): row[4:] for row in texts(cases_table)}
    assert rows[("pretrain.llama2-7b.z2.g8", "tokens/s")][0] == "0.500 ×"
    # the environments differ for pre-training: a difference there is no significant finding about the runs
    assert rows[("pretrain.llama2-7b.z2.g8", "tokens/s")][2] == "not comparable"
    assert rows[("pretrain.llama2-7b.naive.g8", "tokens/s")][0] == "1.00 ×"
    # page one is about A against B: B named in the verdict, its summary beside it
    [against_b] = [fact.value for fact in report.page_one.verdict if fact.label == "A/B"]
    assert against_b.startswith("Against run b: 2 cases in common; throughput differs significantly")
    assert "in 0 of the 0 measured in both in comparable environments" in against_b


def test_without_fingerprints_an_ab_comparison_says_so(tmp_path, smoke_plan, report_of):
    a = write_run(tmp_path / "a", smoke_plan, {"pretrain.tiny-llama.naive.g2": 0.1})
    b = write_run(tmp_path / "b", smoke_plan, {"pretrain.tiny-llama.naive.g2": 0.1})
    ab = section(report_of(a, [str(b)]), "ab-b")
    assert "fingerprints not recorded" in ab.paragraphs[1]


def test_host_checks_come_from_the_fingerprint_before_the_run(tmp_path, paper_plan, report_of):
    run = write_run(
        tmp_path / "a",
        paper_plan,
        {"pretrain.llama2-7b.naive.g8": 0.1},
        gpus=[A800] * 8,
        fingerprint=a800_fingerprint(),
    )
    before, after = section(report_of(run, []), "environment").subsections[1:3]
    facts, checks = ({row[0]: row[1] for row in texts(table)} for table in before.tables)
    assert facts["GPUs"] == f"8 × {A800}" and facts["CPU"].startswith("AMD EPYC 7402")
    assert checks["gpus_same_model"] == "pass" and checks["gpu_count_matches_profile"] == "pass"
    assert after.not_run.startswith("Not recorded (no fingerprint-after.json in the run directory)")


PEAK_FIGURES = "Peak figures (manifests/hardware.yaml)"


def recorded_facts(report) -> dict[str, str]:
    return {row[0]: row[1] for row in texts(section(report, "environment").subsections[0].tables[0])}


@pytest.mark.parametrize(
    ("gpu", "described"),
    [
        # A real product name (NVIDIA's driver lists it) that hardware.yaml does not list.
        ("NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4090 D: no peak figures: MFU and bounds not computed"),
        (A800, f"{A800}: A800 SXM4 80GB, BF16 312 / FP16 312 TFLOPS dense, 2.039 TB/s"),
    ],
)
def test_the_environment_names_each_gpu_with_the_peak_figures_it_has(tmp_path, smoke_plan, report_of, gpu, described):
    run = write_run(tmp_path / "a", smoke_plan, {"pretrain.tiny-llama.naive.g2": 0.1}, gpus=[gpu] * 2)
    assert recorded_facts(report_of(run, []))[PEAK_FIGURES] == described


def test_a_cpu_run_has_no_peak_figures_row(smoke_report):
    assert PEAK_FIGURES not in recorded_facts(smoke_report)


def test_a_listed_gpu_without_vendor_peaks_says_what_is_not_computed():
    assert peak_figures(["NVIDIA H800"], load_hardware()) == (
        "NVIDIA H800: H800 SXM5 80GB, no tensor peak: MFU not computed, no memory bandwidth: bounds not computed"
    )


def test_redaction_replaces_the_host_name_and_gpu_uuids(tmp_path, paper_plan, report_of):
    before = a800_fingerprint()
    after = before.model_copy(update={"gpus": before.gpus.model_copy(update={"gpus": before.gpus.gpus[:7]})})
    run = write_run(
        tmp_path / "a",
        paper_plan,
        {"pretrain.llama2-7b.naive.g8": 0.1},
        gpus=[A800] * 8,
        fingerprint=before,
        fingerprint_after=after,
    )
    plain = render_html(report_of(run))
    assert "bench-host-01" in plain and "GPU-uuid-7" in plain  # the lost GPU, by UUID
    redacted = render_html(report_of(run, redact=True))
    assert "bench-host-01" not in redacted and "GPU-uuid-" not in redacted
    assert "gpu_missing" in redacted and "redacted-" in redacted


# --- Rendering ----------------------------------------------------------------------------------


def test_the_html_is_one_self_contained_file(smoke_dir, tmp_path):
    [path] = render(smoke_dir, ["reference"], ["html"], tmp_path / "out", False)
    html = path.read_text()
    assert "<svg" in html and "<style>" in html
    assert not re.search(r"<link|<script|<img|@import|url\((?!#)|(src|href)=\"(?!#)", html)


def test_the_pdf_has_the_cover_the_claims_and_the_runs_numbers_on_bannered_pages(smoke_dir, tmp_path):
    pdfium = pytest.importorskip("pypdfium2")
    html, pdf = render(smoke_dir, ["reference"], ["html", "pdf"], tmp_path / "out", False)
    assert (html.name, pdf.name) == ("report.html", "report.pdf")
    document = pdfium.PdfDocument(pdf)
    pages = [" ".join(document[i].get_textpage().get_text_range().split()) for i in range(len(document))]
    assert "LLM runtime benchmark report" in pages[0]
    assert any("Reference claims (arXiv:2311.03687)" in page for page in pages[1:])
    assert any("6.86 ± 0.07" in page for page in pages)
    assert all(
        "Not comparable to the reference" in page and "NOT COMPARABLE TO THE REFERENCE" in page for page in pages
    )


def test_a_stacked_chart_draws_each_segment_to_its_length_in_its_labels_colour():
    """The SVG matplotlib writes holds one bar per segment; the same label keeps one colour across
    bars, and an idle (hatched) piece takes the colour of the phase before it."""
    from kit.report import charts

    stacks = [
        charts.Stack(
            label="a",
            segments=[
                charts.Segment(label="forward", value=3.0),
                charts.Segment(label="forward: GPU idle", value=1.0, hatched=True),
                charts.Segment(label="backward", value=6.0),
            ],
        ),
        charts.Stack(
            label="b",
            segments=[charts.Segment(label="forward", value=2.0), charts.Segment(label="backward", value=4.0)],
        ),
    ]
    svg = charts.stacked_chart("t", stacks, "ms")
    assert svg == charts.stacked_chart("t", stacks, "ms")  # the same data, the same bytes
    fills = re.findall(r"fill: (#[0-9a-f]{6})", svg)
    forward, backward = charts.PALETTE[0], charts.PALETTE[1]
    assert fills.count(forward) >= 3 and fills.count(backward) >= 2  # a's forward and idle, b's forward; both backwards
    assert "forward: GPU idle" in svg and "backward" in svg


def test_a_cdf_chart_names_its_panels_series_and_axis():
    from kit.report import charts

    svg = charts.cdf_chart("c", [("TTFT", [charts.CdfSeries(label="vllm", values=[0.3, 0.1, 0.2])])], "s")
    assert "TTFT" in svg and "vllm" in svg and "fraction of requests" in svg


def test_a_chart_draws_each_marker_in_place_and_joins_only_what_draws_the_same():
    """Markers (as matplotlib writes them: a path in <defs>, a <use> per point) become paths at
    their points; neighbouring copies of one marker, and neighbouring unfilled lines drawn alike,
    become one path; filled shapes that are not markers, and anything translucent, stay apart."""
    from kit.report.charts import _flattened

    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
        '<defs><path id="m1" d="M 0 0 L 0 3.5" style="stroke: #000"/></defs>'
        '<g id="tick1"><use xlink:href="#m1" x="10" y="20" style="stroke: #000"/></g>'
        '<g id="tick2"><use xlink:href="#m1" x="30.5" y="20" style="stroke: #000"/></g>'
        '<path d="M 0 0 L 5 5" style="fill: none; stroke: #b0b0b0"/><path d="M 1 1 L 6 6" style="fill: none; stroke: #b0b0b0"/>'
        '<path d="M 0 0 L 1 0 L 1 1 z" style="fill: #1f4e79"/><path d="M 2 0 L 3 0 L 3 1 z" style="fill: #1f4e79"/>'
        '<path d="M 0 0 L 5 5" style="fill: none; stroke-opacity: 0.5"/><path d="M 1 1 L 6 6" style="fill: none; stroke-opacity: 0.5"/>'
        "</svg>"
    )
    paths = re.findall(r'<path d="([^"]+)"', _flattened(svg))
    assert "<use" not in _flattened(svg) and 'id="m1"' not in _flattened(svg)
    assert paths == [
        "M 10 20 L 10 23.5 M 30.5 20 L 30.5 23.5",
        "M 0 0 L 5 5 M 1 1 L 6 6",
        "M 0 0 L 1 0 L 1 1 z",
        "M 2 0 L 3 0 L 3 1 z",
        "M 0 0 L 5 5",
        "M 1 1 L 6 6",
    ]


def test_a_chart_keeps_only_what_it_draws_and_every_id_it_refers_to():
    """The PDF printer styles and draws every SVG element, so matplotlib's <metadata> and its
    id-only <g> wrappers are left out, and each marker (a tick) is drawn in place rather than as
    a <use>; each reference left (a clip path, a hatch pattern) still finds its target, under the
    chart's own prefix. The names stay as an HTML parser reads SVG, also in a process that has
    printed a PDF (WeasyPrint's PDF metadata renames XML namespaces process-wide)."""
    import weasyprint.pdf.metadata  # noqa: F401  (as printing a report imports it)

    from kit.report import charts

    stacks = [
        charts.Stack(
            label="a",
            segments=[
                charts.Segment(label="forward", value=3.0),
                charts.Segment(label="forward: GPU idle", value=1.0, hatched=True),
            ],
        )
    ]
    svg = charts.stacked_chart("t", stacks, "ms")
    root = svg[: svg.index(">")]
    assert root.startswith("<svg ") and 'xmlns="http://www.w3.org/2000/svg"' in root
    assert 'xmlns:xlink="http://www.w3.org/1999/xlink"' in root
    assert "<metadata" not in svg and "<g>" not in svg and "<use" not in svg
    referenced = set(re.findall(r'(?:url\(#|href="#)([^)"]+)', svg))
    defined = set(re.findall(r'\bid="([^"]+)"', svg))
    assert referenced and referenced == defined
    assert all(name.startswith("t-") for name in defined)


# Markup a run received from elsewhere may hold in every field a person chooses: its folder's name
# (any name without a '/'), the run id in run.json, the host's name, a case's reason.
MARKUP = ('<img src=x onerror="alert(1)">', "a' onmouseover='alert(2)", "<svg onload=alert(3)>", "[bold]x[/]")


def with_markup(run: Path, markup: str) -> Path:
    """`run` with `markup` in its run id, its host's name and each failed case's reason, resealed."""
    info = RunDir(run).read_info()
    info.run_id = f"{markup}<script>alert(4)</script>"
    info.host.hostname = markup
    RunDir(run).write_info(info)
    for result in RunDir(run).results():
        if result.reason is not None:
            RunDir(run).write_result(result.model_copy(update={"reason": f"{result.reason} {markup}"}))
    RunDir(run).write_sums()
    return run


def elements_and_attributes(html: str) -> tuple[set[str], set[str]]:
    from html.parser import HTMLParser

    class Collect(HTMLParser):
        tags: set[str] = set()
        attributes: set[str] = set()

        def handle_starttag(self, tag, attrs):
            self.tags.add(tag)
            self.attributes.update(name for name, _ in attrs)

    found = Collect()
    found.feed(html)
    return found.tags, found.attributes


@pytest.mark.parametrize("markup", MARKUP)
def test_no_markup_from_a_run_reaches_any_html_report(tmp_path, smoke_plan, markup):
    """The single run's report, the A/B report (the compared run's name in ids, charts and text),
    and the fleet report: markup from a run is text in each, never an element or an attribute."""
    cases = {"pretrain.tiny-llama.naive.g2": 0.1, "pretrain.tiny-llama.z2.g2": "oom"}
    a = with_markup(write_run(tmp_path / "runs" / markup.replace("/", "|"), smoke_plan, cases), markup)
    b = with_markup(write_run(tmp_path / "runs" / f"b {markup.replace('/', '|')}", smoke_plan, cases), markup)
    from kit.report.fleet import render_fleet

    pages = [
        render(a, ["reference"], ["html"], tmp_path / "single", False)[0],
        render(a, ["reference", str(b)], ["html"], tmp_path / "ab", False)[0],
        render_fleet([a, b], ["html"], tmp_path / "fleet")[0],
    ]
    for page in pages:
        html = page.read_text()
        tags, attributes = elements_and_attributes(html)
        assert not {"script", "img", "iframe", "object"} & tags, page
        assert not [name for name in attributes if name.startswith("on")], page
        assert "<script>alert" not in html and 'onerror="alert' not in html and "onmouseover='alert" not in html


def test_links_planted_where_a_report_is_written_are_replaced_never_written_through(smoke_dir, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("someone's file\n")
    out = tmp_path / "out"
    out.mkdir()
    planted = ["report.html", "report.json", "report-claims.csv", ".report.html.partial", ".report.json.partial"]
    for name in planted:
        (out / name).symlink_to(victim)
    written = render(smoke_dir, ["reference"], ["html", "json", "csv"], out, False)
    assert victim.read_text() == "someone's file\n"
    assert [path.name for path in written] == ["report.html", "report.json", "report-claims.csv", "report-metrics.csv"]
    assert not any(path.is_symlink() for path in written)


def test_a_case_the_clock_stepped_back_across_has_no_actual_duration_and_the_report_says_why(smoke_run):
    from kit.report.sections.timing import timing_section

    run = RunDir(smoke_run)
    result = run.read_result("pretrain.tiny-llama.naive.g2")
    run.write_result(result.model_copy(update={"finished_at": "2025-12-31T21:00:00+00:00"}))  # 3 h before its start
    run.write_sums()
    stage_table, case_table = timing_section(load_run(smoke_run, False)).tables[-2:]
    row = next(r for r in texts(case_table) if r[0] == "pretrain.tiny-llama.naive.g2")
    assert row[3] == "clock set back (3 h 00 min)" and "-" not in "".join(r[3] for r in texts(stage_table))
    assert any("clock was set back while 1 case(s) ran" in note for note in stage_table.notes)
