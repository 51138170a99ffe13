"""What each claim should show on a host that is none of the paper's platforms (kit/reference/expectation.py).

Runs are built in memory from the paper plan's cases with the metric names their stages write
(tokens_per_s, output_throughput, the breakdown's shares), as tests/reference/test_published.py builds
them; the H200 runs read the recorded real results in tests/fixtures/gpu_results/ (SOURCE).
"""

from __future__ import annotations

import re

import pytest
import support
import yaml
from support.calibration import h100_calibration
from support.claims import RTX4090, claim, result, run_on

from kit.reference.claims import evaluate_claims
from kit.reference.expectation import expect_claims, expectation_counts
from kit.reference.published import load_reference, reference_path
from kit.report.sections.claims import claims_table
from kit.rundir.schema import Result

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
FIXTURES = support.FIXTURES / "gpu_results"
# H100 SXM5 / A800 SXM4 and / RTX 4090, dense bf16 peaks in manifests/hardware.yaml.
H100_OVER_A800 = 989.4 / 312
H100_OVER_RTX4090 = 989.4 / 165.2


@pytest.fixture(scope="module")
def reference():
    return load_reference()


def expectation(reference, runs, claim_id):
    return next(e for e in expect_claims(reference, runs) if e.id == claim_id)


def recorded(case_id: str) -> Result:
    return Result.model_validate_json((FIXTURES / f"h200x1-{case_id}.json").read_text())


def h200_run():
    cases = ["profile.llama2-7b.base.g1", "profile.llama2-7b.r.g1.b16", "scaling.llama2-7b.q.g1.b2"]
    return run_on(H200, [recorded(case) for case in cases], label="h200")


# --- Within one platform: the paper's value on the platform most like the host --------------


def test_a_scaling_claim_about_rtx4090_expects_the_a800s_efficiency_on_an_h100(reference, paper_plan):
    run = run_on(
        H100,
        [
            result(paper_plan, "scaling.llama2-7b.q.g1.b2", tokens_per_s=1000),
            result(paper_plan, "scaling.llama2-7b.q.g8.b2", tokens_per_s=8 * 1000 * 0.98),
        ],
    )
    c1, c2 = (expectation(reference, [run], claim_id) for claim_id in ("C1", "C2"))
    [relation] = c2.relations
    assert relation.expected == "100 % ± 5 points"  # C1's value with C1's tolerance: one expectation
    assert relation.basis.startswith("the paper's value on 8 × A800-80G, NVLink, from C1, a scaling efficiency")
    assert "of A800, RTX3090, RTX4090, the one most like H100 SXM5 80GB" in relation.basis
    # The one measurement is judged once, by C1, the first claim that states it; C2 points there.
    assert (c1.verdict, c1.relations[0].measured, c1.relations[0].expected) == (
        "consistent",
        "98.0 %",
        "100 % ± 5 points",
    )
    assert (c2.verdict, relation.judged_in, relation.measured) == ("judged in another claim", "C1", "98.0 %")
    assert relation.finding == "C1: the same measurement, judged there once"
    # The paper's verdict is untouched: the claim is about RTX4090s.
    paper = next(o for o in evaluate_claims(reference, [run]) if o.id == "C2")
    assert paper.verdict == "not applicable"


def test_a_quantity_measured_on_the_claims_own_platform_is_judged_by_that_claim_alone(reference, paper_plan):
    """On an A800, C1's paper verdict judges the scaling efficiency; C2 and C3, the same relation
    stated for other GPUs, point to it rather than judge it again against other tolerances."""
    run = run_on(
        "NVIDIA A800-SXM4-80GB",
        [
            result(paper_plan, "scaling.llama2-7b.q.g1.b2", tokens_per_s=1000),
            result(paper_plan, "scaling.llama2-7b.q.g8.b2", tokens_per_s=8 * 1000 * 0.873),
        ],
    )
    by_id = {e.id: e for e in expect_claims(reference, [run])}
    assert by_id["C1"].verdict == "paper verdict"
    assert {
        claim_id: (by_id[claim_id].verdict, by_id[claim_id].relations[0].judged_in) for claim_id in ("C2", "C3")
    } == {"C2": ("judged in another claim", "C1"), "C3": ("judged in another claim", "C1")}
    assert expectation_counts(list(by_id.values()))["deviates"] == 0
    paper = {o.id: o.verdict for o in evaluate_claims(reference, [run])}
    assert paper["C1"] == "deviates" and paper["C2"] == paper["C3"] == "not applicable"


def test_a_scaling_efficiency_far_below_the_expectation_deviates_against_it(reference, paper_plan):
    run = run_on(
        H100,
        [
            result(paper_plan, "scaling.llama2-7b.q.g1.b2", tokens_per_s=1000),
            result(paper_plan, "scaling.llama2-7b.q.g8.b2", tokens_per_s=8 * 1000 * 0.70),
        ],
    )
    c1 = expectation(reference, [run], "C1")
    assert c1.verdict == "deviates" and c1.relations[0].finding.startswith(
        "measured 0.700 × expected; 30.0 points below"
    )


def test_a_serving_order_on_an_h100_is_held_to_the_a800s_order(reference, paper_plan):
    throughputs = {"lightllm": 900.0, "tgi": 500.0, "vllm": 450.0}
    run = run_on(
        H100,
        [
            result(paper_plan, f"serve.llama2-7b.{engine}.g8", output_throughput=value)
            for engine, value in throughputs.items()
        ],
    )
    c22 = expectation(reference, [run], "C22")
    seven_b = [r for r in c22.relations if r.expected and "llama2-7b" in r.expected]
    assert len(seven_b) == 3  # the RTX4090, RTX3090 and A800 relations of Llama2-7B
    assert {r.expected for r in seven_b} == {
        "serve.llama2-7b.lightllm.g8 > serve.llama2-7b.tgi.g8, serve.llama2-7b.vllm.g8"
    }
    assert {r.verdict for r in seven_b} == {"consistent"}
    assert c22.verdict == "consistent"  # the 13B and 70B relations are not measured


def test_an_h200s_recorded_breakdown_is_judged_by_the_paper_since_the_claims_are_of_any_gpu(reference):
    by_id = {e.id: e for e in expect_claims(reference, [h200_run()])}
    c10 = by_id["C10"].relations[0]
    assert (by_id["C10"].verdict, c10.expected, c10.measured) == ("paper verdict", "37 % ± 5 points", "38.8 %")
    assert c10.basis.startswith("the paper's value, which the claim makes of any GPU") and "H200 SXM 141GB" in c10.basis
    # The recorded one-GPU scaling case: C1 expects the A800's efficiency, and lacks the 8-GPU case.
    c1 = by_id["C1"]
    assert c1.verdict == "not measured" and "scaling.llama2-7b.q.g8.b2 (not in run h200)" in c1.relations[0].finding
    assert not by_id["C10"].judged and c1.judged


# --- Absolute figures and ratios of platforms: scaled by the GPUs' figures ----------------------


def test_an_absolute_throughput_is_scaled_by_the_dense_bf16_peaks(reference, paper_plan):
    run = run_on(H100, [result(paper_plan, "finetune.llama2-70b.ql+z3+o+r+f.g8", tokens_per_s=1100)])
    [relation] = expectation(reference, [run], "C21").relations
    expected = 200 * H100_OVER_RTX4090
    assert relation.expected == f"{expected:.0f} tokens/s ± {40 * H100_OVER_RTX4090:.0f} tokens/s"
    assert relation.basis == (
        "the paper's value on 8 × RTX4090-24G, PCIe 4.0 x16 (NCCL_P2P_DISABLE=1) × "
        "H100 SXM5 80GB/GeForce RTX 4090 dense bf16 peak 989.4/165.2 TFLOPS"
    )
    assert relation.verdict == "consistent"
    assert relation.finding.startswith(f"measured {1100 / expected:.3f} × expected")


def test_a_matmul_measured_below_the_datasheet_scales_the_expectation_and_says_so(reference, paper_plan):
    """The preflight measured this H100's bf16 matmul at 700 TFLOPS (an input of the test): C21's
    RTX 4090 figure is scaled by it, not by the datasheet's 989.4, and the basis says which."""

    run = run_on(H100, [result(paper_plan, "finetune.llama2-70b.ql+z3+o+r+f.g8", tokens_per_s=1100)])
    run = run.model_copy(update={"calibration": h100_calibration(700.0, 3000.0)})
    [relation] = expectation(reference, [run], "C21").relations
    assert relation.expected == f"{200 * 700 / 165.2:.0f} tokens/s ± {40 * 700 / 165.2:.0f} tokens/s"
    assert relation.basis.endswith(
        "dense bf16 peak 700/165.2 TFLOPS (this host's measured in preflight, below its datasheet's)"
    )


PLAIN = ["pretrain.llama2-7b.z3+o.g8", "pretrain.llama2-7b.r.g8"]


def test_a_platform_ratio_puts_the_host_in_place_of_its_likest_platform(reference, paper_plan):
    h100 = run_on(H100, [result(paper_plan, c, tokens_per_s=150_000) for c in PLAIN], label="h100")
    rtx = run_on(RTX4090, [result(paper_plan, c, tokens_per_s=1_000) for c in PLAIN], label="rtx")
    c5 = expectation(reference, [h100, rtx], "C5").relations[0]
    assert c5.expected == f"{50 * H100_OVER_A800:.0f} × ± {10 * H100_OVER_A800:.1f}"
    assert c5.basis.startswith(
        "the paper's A800/RTX4090 ratio with this host in place of A800: × H100 SXM5 80GB/"
        "A800 SXM4 80GB dense bf16 peak 989.4/312 TFLOPS; this host/RTX4090"
    )
    assert (c5.verdict, c5.measured) == ("consistent", "150 ×")
    assert "2 cases (pretrain.llama2-7b.r.g8, pretrain.llama2-7b.z3+o.g8), RTX4090 from run rtx" in c5.finding


def test_without_the_other_platform_a_platform_ratio_says_why_there_is_no_verdict(reference, paper_plan):
    h100 = run_on(H100, [result(paper_plan, c, tokens_per_s=150_000) for c in PLAIN])
    c5 = expectation(reference, [h100], "C5").relations[0]
    assert c5.verdict == "no expectation" and c5.expected is not None
    assert c5.finding == (
        "no RTX4090 tokens/s of the cases this host measured: no run of this report is on RTX4090, "
        "and the reference transcribes no table value of it (tables: none)"
    )


def test_a_transcribed_table_value_stands_for_the_other_platform(paper_plan, tmp_path):
    data = yaml.safe_load(reference_path().read_text())
    data["tables"] = [
        {
            "table": "III",
            "platform": "RTX4090",
            "case": "pretrain.llama2-7b.r.g8",
            "metric": "tokens_per_s",
            "mean": 1.0,
            "unit": "10^3 tokens/s",
        }
    ]
    (tmp_path / "reference.yaml").write_text(yaml.safe_dump(data))
    with_table = load_reference(tmp_path / "reference.yaml")
    h100 = run_on(H100, [result(paper_plan, c, tokens_per_s=150_000) for c in PLAIN])
    c5, c5_rtx3090 = expectation(with_table, [h100], "C5").relations
    assert (c5.verdict, c5.measured) == ("consistent", "150 ×")
    assert "1 case (pretrain.llama2-7b.r.g8), RTX4090 from the paper's Table III" in c5.finding
    assert c5_rtx3090.finding.endswith("and the reference transcribes no table value of it")


def test_the_same_gpus_with_and_without_nvlink_are_measured_by_the_p2p_off_variants(reference, paper_plan):
    cases = {
        "scaling.llama2-7b.q.g1.b2": 1000,
        "scaling.llama2-7b.q.g8.b2": 7600,
        "scaling.llama2-7b.q.g8.b2.p2p-off": 6900,
    }
    results = [result(paper_plan, c, tokens_per_s=v) for c, v in cases.items()]
    linked = run_on(H100, results, interconnect="nvlink")
    [c4] = expectation(reference, [linked], "C4").relations
    assert (c4.verdict, c4.measured, c4.expected) == ("consistent", "1.10 ×", "1.1 × ± 0.05")
    assert "this host's H100 SXM5 80GB NVLink cases against their p2p-off variants" in c4.basis
    unknown_link = expectation(reference, [run_on(H100, results)], "C4").relations[0]
    assert unknown_link.verdict == "no expectation" and unknown_link.basis.endswith(
        "the link is not recorded (no fingerprint)"
    )


def test_an_ordering_of_two_other_gpu_models_has_no_expectation_and_says_why(reference, paper_plan):
    c26 = expectation(reference, [run_on(H100, [])], "C26")
    assert c26.verdict == "no expectation"
    assert c26.relations[0].basis.startswith("relates RTX3090 and RTX4090, two GPU models this host (H100 SXM5 80GB)")


def test_a_gpu_not_in_the_hardware_table_is_named_and_not_scaled(reference, paper_plan):
    run = run_on("NVIDIA Imaginary GPU", [result(paper_plan, "finetune.llama2-70b.ql+z3+o+r+f.g8", tokens_per_s=900)])
    [c21] = expectation(reference, [run], "C21").relations
    assert c21.verdict == "no expectation"
    assert "NVIDIA Imaginary GPU is not in manifests/hardware.yaml: no peak figures to scale by" in c21.basis
    on_cpu = expect_claims(reference, [run_on(None, [])])
    assert {e.verdict for e in on_cpu} == {"paper verdict"} and "no GPU to expect of" in on_cpu[0].relations[0].basis
    assert not any(expectation_counts(on_cpu).values())  # nothing to count on page one


def test_a_host_of_mixed_gpus_is_expected_to_run_at_the_pace_of_its_slowest(reference, paper_plan):
    """A synchronous step waits for the slowest GPU: an H100 beside an RTX 4090 is expected to
    run C21 at the RTX 4090's pace (the paper's own value), and a GPU hardware.yaml lacks leaves
    nothing to scale by."""
    mixed = run_on(H100, [result(paper_plan, "finetune.llama2-70b.ql+z3+o+r+f.g8", tokens_per_s=200)])
    mixed = mixed.model_copy(update={"gpu_names": (H100, H100, RTX4090, RTX4090)})
    [c21] = expectation(reference, [mixed], "C21").relations
    assert c21.expected == "200 tokens/s ± 40 tokens/s" and "GeForce RTX 4090" in c21.basis
    unknown = mixed.model_copy(update={"gpu_names": (H100, "NVIDIA Imaginary GPU")})
    [c21] = expectation(reference, [unknown], "C21").relations
    assert c21.verdict == "no expectation" and "NVIDIA Imaginary GPU is not in manifests/hardware.yaml" in c21.basis


# --- Shown and counted apart from the paper's verdicts ----------------------------------------


def test_the_claims_table_shows_the_expectation_beside_the_paper_and_counts_it_apart(reference, paper_plan):
    run = run_on(
        H100,
        [
            result(paper_plan, "scaling.llama2-7b.q.g1.b2", tokens_per_s=1000),
            result(paper_plan, "scaling.llama2-7b.q.g8.b2", tokens_per_s=8 * 1000 * 0.98),
        ],
    )
    outcomes, expectations = evaluate_claims(reference, [run]), expect_claims(reference, [run])
    table = claims_table(outcomes, expectations)
    assert table.header[2:5] == ["Paper", "Expected on this host", "Measured"]
    c2, why = [row for row in table.rows if not row.heading][2:4]  # C1's relation and its why, then C2's
    assert c2.cells[2].text == "90.8 % ± 3 points" and c2.cells[3].text == "100 % ± 5 points"
    assert (c2.cells[5].text, c2.cells[5].detail) == ("not applicable", "vs expectation: judged in another claim")
    assert why.cells[1].colspan == 5 and why.cells[1].text.startswith("Why: for information: ")
    assert "Expected on this host: the paper's value on 8 × A800-80G, NVLink, from C1" in why.cells[1].detail
    assert why.cells[1].detail.endswith(
        "vs expectation: judged in another claim (C1: the same measurement, judged there once)"
    )
    counts = expectation_counts(expectations)
    # C1 against the A800's efficiency; C2 and C3 state the same measurement and point to it
    assert (counts["consistent"], counts["judged in another claim"]) == (1, 2)
    assert sum(o.verdict == "consistent" for o in outcomes) == 0
    assert claim(reference, "C10").platforms == "any" and "paper verdict" not in counts


def test_a_report_of_an_h100_run_labels_the_expectation_apart_from_the_paper(paper_plan, tmp_path):
    """tests/support/paper_size_run.py's synthetic run in the real layout, on eight H100s linked by NVLink."""
    from support.paper_size_run import write_run

    from kit.report.build import build_report

    cases = [
        "scaling.llama2-7b.q.g1.b2",
        "scaling.llama2-7b.q.g8.b2",
        "scaling.llama2-7b.q.g8.b2.p2p-off",
        "serve.llama2-7b.vllm.g8",
        "serve.llama2-7b.tgi.g8",
        "serve.llama2-7b.lightllm.g8",
        "finetune.llama2-70b.ql+z3+o+r+f.g8",
    ]
    report = build_report(write_run(tmp_path / "h100", paper_plan, gpu_name=H100, cases=cases))
    claims = next(s for s in report.sections if s.anchor == "claims")
    against = next(p for p in claims.paragraphs if p.startswith("Against the kit's expectation"))
    assert "(NVIDIA H100 80GB HBM3)" in against and "These are not the paper's verdicts" in against
    cover = report.cover
    assert cover.expectation_summary.endswith(" about other GPUs, vs the kit's expectation")
    assert {c.label for c in cover.expectation_counts} <= {
        "deviates",
        "consistent",
        "not measured",
        "no expectation",
        "judged in another claim",
    }
    assert sum(c.count for c in cover.expectation_counts) == int(cover.expectation_summary.split()[0])
    rows = {row.cells[0].text: row for table in claims.tables for row in table.rows if row.heading}
    assert rows["C1"].cells[2].text == "not applicable" and rows["C1"].cells[2].detail.startswith("vs expectation: ")
    assert rows["C10"].cells[2].detail is None  # a claim of any GPU: the paper's verdict only
    # Page one: the fine-tuning figure under its roofline bound (QLoRA's frozen base skips its weight
    # gradients), and beside it C21's figure scaled to H100s.
    [seventy_b] = [row for row in report.page_one.headline.rows if row.cells[0].text.startswith("llama2-70b")]
    expected = seventy_b.cells[3]
    assert expected.text.startswith("≤ ") and re.match(r"[\d.]+ × bound; ", expected.detail)
    claimed = expected.detail.split("; ", 1)[1]
    assert claimed.startswith(
        f"C21 on this host: {200 * H100_OVER_RTX4090:.0f} tokens/s ± {40 * H100_OVER_RTX4090:.0f} tokens/s: measured "
    )
    # how it was scaled is said where the claim is judged
    listed = claims.tables[0].rows
    start = next(index for index, row in enumerate(listed) if row.heading and row.cells[0].text == "C21")
    end = next((index for index in range(start + 1, len(listed)) if listed[index].heading), len(listed))
    assert "dense bf16 peak 989.4/165.2 TFLOPS" in " ".join(
        cell.detail or "" for row in listed[start:end] for cell in row.cells
    )


def test_a_sentence_read_two_ways_is_set_against_the_reading_that_gives_a_value(reference, paper_plan):
    """C25: "up to 13 ×" is a bound, "about 120 s → 1600 s" a ratio of about 13.3 ×, the yardstick."""
    durations = {"serve.llama2-70b.vllm.g8": 1500.0, "serve.llama2-7b.vllm.g8": 120.0}
    run = run_on(H100, [result(paper_plan, case, duration_s=value) for case, value in durations.items()])
    vllm = expectation(reference, [run], "C25").relations[0]
    assert (vllm.verdict, vllm.measured, vllm.versus) == (
        "consistent",
        "12.5 ×",
        f"measured {12.5 / 13.3:.3f} × expected",
    )
