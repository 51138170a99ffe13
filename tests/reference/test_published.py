"""kit.reference.published: the paper's claims as typed relations, and their verdicts on measured runs.

Runs are built in memory from the protocol's own cases (paper and smoke profiles), with metric
means chosen per test; GPU names are the ones NVML reports for the paper's platforms.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from support.claims import A800, RTX3090, RTX4090, claim, result, run_on

from kit.host.fingerprint import (
    ContainerRuntime,
    Fingerprint,
    Gpu,
    GpuInventory,
    HostInfo,
    KitInfo,
    NetworkInfo,
    Topology,
    TopologyClass,
)
from kit.manifest import ManifestError
from kit.reference.claims import (
    evaluate_claim,
    evaluate_claims,
    evaluate_tables,
    stand_in_case,
)
from kit.reference.measured_run import (
    MeasuredRun,
    measured_run,
    parse_case_id,
    platform_mismatch,
)
from kit.reference.published import Reference, load_reference, reference_path
from kit.rundir.schema import PeakMemory, RankSample, RunInfo, RunSample


@pytest.fixture(scope="module")
def reference() -> Reference:
    return load_reference()


# --- The manifest -----------------------------------------------------------------------------


def test_the_reference_holds_the_27_published_claims_in_order(reference):
    assert [c.id for c in reference.claims] == [f"C{n}" for n in range(1, 28)]
    assert reference.tables == ()
    assert {c.source for c in reference.claims} <= {"seed", "2nd-hand", "seed + 2nd-hand"}
    assert claim(reference, "C25").source == "seed + 2nd-hand"


def test_for_each_expands_a_relation_once_per_model(reference):
    numerators = [r.numerator.case for r in claim(reference, "C16").relations]
    assert numerators == ["finetune.llama2-7b.l.g8", "finetune.llama2-13b.l.g8", "finetune.llama2-70b.l.g8"]


def test_case_ids_parse_into_their_axes():
    assert parse_case_id("scaling.llama2-7b.q.g8.b2") == ("scaling", "llama2-7b", "q", 8, 2, None)
    assert parse_case_id("comm.all_gather.g8") == ("comm", None, "all_gather", 8, None, None)
    assert parse_case_id("pretrain.llama2-70b.z3+o+r+f.g8") == ("pretrain", "llama2-70b", "z3+o+r+f", 8, None, None)
    assert parse_case_id("scaling.llama2-7b.q.g8.b2.p2p-off") == ("scaling", "llama2-7b", "q", 8, 2, "p2p-off")
    assert parse_case_id("comm.all_gather.g8.p2p-off") == ("comm", None, "all_gather", 8, None, "p2p-off")


@pytest.mark.parametrize(
    "old, new, key, reason",
    [
        (
            "published: {value: 0.908, tolerance: 0.03}",
            "published: {value: 0.908}",
            "published",
            "value and tolerance go together",
        ),
        ("platforms: [RTX4090]\n", "platforms: [RTX4091]\n", "claim C2", "unknown platform 'RTX4091'"),
        ('case: "finetune.{model}.l.g8"', 'case: "finetune.{modell}.l.g8"', "claims.15", "placeholder {modell}"),
        ("base: scaling.llama2-7b.q.g1.b2", "base: scaling.llama2-7b.q.g2.b2", "claims.0", "one GPU"),
        (
            'statement: "LoRA throughput is about twice QLoRA throughput"',
            'statement: "LoRA throughput is about twice QLoRA throughput"\n    colour: red',
            "colour",
            "Extra inputs",
        ),
    ],
)
def test_a_malformed_reference_is_one_line_naming_file_key_and_reason(tmp_path, old, new, key, reason):
    text = reference_path().read_text()
    assert old in text
    broken = tmp_path / "reference.yaml"
    broken.write_text(text.replace(old, new, 1))
    with pytest.raises(ManifestError) as caught:
        load_reference(broken)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(broken))
    assert key in message and reason in message


# --- Platforms --------------------------------------------------------------------------------


def fingerprint(gpu: str, interconnect: str) -> Fingerprint:
    return Fingerprint(
        collected_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        host=HostInfo(hostname="h"),
        gpus=GpuInventory(gpus=[Gpu(index=i, name=gpu) for i in range(8)]),
        topology=Topology(topology_class=TopologyClass(gpu_count=8, interconnect=interconnect, label="8 GPUs")),
        network=NetworkInfo(),
        container_runtime=ContainerRuntime(),
        kit=KitInfo(version="0.1.0", workload_sources_sha256="0" * 64),
    )


def test_a_runs_platform_comes_from_rank_samples_and_the_fingerprints_topology(paper_plan):
    sample = RankSample(
        rank=0,
        world_size=8,
        status="ok",
        device="cuda",
        device_name=RTX3090,
        peak_memory=PeakMemory(host_rss_bytes=1),
        started_at="t",
        finished_at="t",
    )
    done = result(paper_plan, "pretrain.llama2-7b.q.g8", tokens_per_s=1000).model_copy(
        update={"samples": [RunSample(index=1, status="ok", exit_code=0, wall_s=1.0, ranks=[sample])]}
    )
    info = RunInfo(
        run_id="r",
        kit=KitInfo(version="0.1.0", workload_sources_sha256="0" * 64),
        profile="paper",
        plan=paper_plan,
        selected=[done.case_id],
        executor="local",
        host={"gpus": []},
        argv=[],
        started_at="t",
    )
    without = measured_run(info, [done])
    assert without.gpu_names == (RTX3090,) and without.interconnect is None
    assert measured_run(info, [done], fingerprint(RTX3090, "pcie-only")).interconnect == "pcie"
    # A serving case's one process names all its GPUs in one string (kit/serve/session.py).
    server = sample.model_copy(update={"device_name": ", ".join([RTX3090] * 8), "world_size": 1})
    served = done.model_copy(
        update={"samples": [RunSample(index=1, status="ok", exit_code=0, wall_s=1.0, ranks=[server])]}
    )
    assert measured_run(info, [done, served]).gpu_names == (RTX3090,)


# --- Verdicts ---------------------------------------------------------------------------------


def test_a_ratio_within_its_tolerance_is_consistent_and_unmeasured_models_are_named(reference, paper_plan):
    run = run_on(
        A800,
        [
            result(paper_plan, "finetune.llama2-7b.l.g8", tokens_per_s=2100),
            result(paper_plan, "finetune.llama2-7b.ql.g8", tokens_per_s=1000),
        ],
    )
    outcome = evaluate_claim(claim(reference, "C16"), reference, [run])
    assert outcome.verdict == "consistent"
    assert outcome.reason == "1 of 3 relations hold; 2 not evaluated"
    seven, thirteen, _ = outcome.relations
    assert (seven.measured, seven.published) == ("2.10 ×", "2 × ± 0.3")
    assert thirteen.verdict == "not measured"
    assert "finetune.llama2-13b.l.g8 (not in run run-a)" in thirteen.finding


def test_a_ratio_outside_its_tolerance_deviates_by_how_much_and_which_way(reference, paper_plan):
    run = run_on(
        A800,
        [
            result(paper_plan, "finetune.llama2-7b.l.g8", tokens_per_s=1200),
            result(paper_plan, "finetune.llama2-7b.ql.g8", tokens_per_s=1000),
        ],
    )
    outcome = evaluate_claim(claim(reference, "C16"), reference, [run])
    assert outcome.verdict == "deviates"
    assert outcome.relations[0].finding == "0.800 below the published 2 × (−40 %), outside ± 0.3"


def test_a_zero_denominator_is_not_measured_rather_than_a_deviation(reference, paper_plan):
    run = run_on(
        A800,
        [
            result(paper_plan, "finetune.llama2-7b.l.g8", tokens_per_s=100),
            result(paper_plan, "finetune.llama2-7b.ql.g8", tokens_per_s=0),
        ],
    )
    outcome = evaluate_claim(claim(reference, "C16"), reference, [run])
    assert outcome.relations[0].verdict == "not measured"
    assert outcome.relations[0].finding == "missing: a computable value (a denominator is 0)"


def test_an_out_of_memory_case_leaves_the_claim_not_measured_and_says_so(reference, paper_plan):
    run = run_on(
        A800,
        [
            result(paper_plan, "finetune.llama2-7b.l.g8", status="oom"),
            result(paper_plan, "finetune.llama2-7b.ql.g8", tokens_per_s=1000),
        ],
    )
    outcome = evaluate_claim(claim(reference, "C16"), reference, [run])
    assert outcome.verdict == "not measured"
    assert "finetune.llama2-7b.l.g8 (oom)" in outcome.relations[0].finding


def scaling_run(gpu: str, one: float, eight: float, plan) -> MeasuredRun:
    return run_on(
        gpu,
        [
            result(plan, "scaling.llama2-7b.q.g1.b2", tokens_per_s=one),
            result(plan, "scaling.llama2-7b.q.g8.b2", tokens_per_s=eight),
        ],
    )


def test_a_claim_this_host_could_not_evaluate_says_why(reference, paper_plan):
    from kit.host.this_host import Host
    from kit.plan.fit import skip_reason

    four = Host(gpu_names=[A800] * 4)
    skipped = result(paper_plan, "finetune.llama2-7b.l.g8", status="skipped")
    skipped.reason = skip_reason(skipped.case, four)  # what the runner writes for this host
    run = run_on(A800, [skipped, result(paper_plan, "finetune.llama2-7b.ql.g8", tokens_per_s=1000)])
    outcome = evaluate_claim(claim(reference, "C16"), reference, [run])
    assert outcome.verdict == "not measured"
    assert "finetune.llama2-7b.l.g8 (skipped: needs 8 GPUs, host has 4)" in outcome.relations[0].finding


def test_scaling_efficiency_is_judged_on_the_platform_the_claim_is_about(reference, paper_plan):
    rtx = scaling_run(RTX4090, 1000, 8 * 1000 * 0.91, paper_plan)
    judged = evaluate_claim(claim(reference, "C2"), reference, [rtx])
    assert judged.verdict == "consistent" and judged.relations[0].measured == "91.0 %"
    elsewhere = evaluate_claim(claim(reference, "C1"), reference, [rtx])
    assert elsewhere.verdict == "not applicable"
    assert elsewhere.reason.startswith("the claim is about 8 × A800-80G, NVLink; run run-a has NVIDIA GeForce RTX 4090")
    assert elsewhere.relations[0].measured == "91.0 %"


def test_a_run_not_comparable_to_the_reference_shows_stand_ins_for_information(reference, smoke_plan):
    smoke = run_on(
        None,
        [
            result(smoke_plan, "finetune.tiny-llama.l.g2", tokens_per_s=900),
            result(smoke_plan, "finetune.tiny-llama.ql.g2", tokens_per_s=1000),
        ],
        comparable=False,
    )
    outcome = evaluate_claim(claim(reference, "C16"), reference, [smoke])
    assert outcome.verdict == "not applicable"
    assert outcome.reason == "run run-a (profile smoke) is not comparable to the reference"
    first, second, _ = outcome.relations
    assert first.measured == "0.900 ×" and first.finding.startswith("1.10 below the published 2 × (−55 %)")
    assert first.stand_ins == {
        "finetune.llama2-7b.l.g8": "finetune.tiny-llama.l.g2",
        "finetune.llama2-7b.ql.g8": "finetune.tiny-llama.ql.g2",
    }
    assert second.measured is None and "same stand-in cases" in second.finding


def test_one_stand_in_never_plays_both_sides_of_a_comparison(reference, smoke_plan):
    smoke = run_on(None, [result(smoke_plan, "finetune.tiny-llama.l.g2", tokens_per_s=900)], comparable=False)
    outcome = evaluate_claim(claim(reference, "C20"), reference, [smoke])
    assert outcome.verdict == "not applicable"
    assert "finetune.tiny-llama.l.g2 would play two" in outcome.relations[0].finding


def test_stand_ins_take_the_largest_multi_process_count_and_keep_one_gpu(smoke_plan):
    smoke = run_on(
        None,
        [result(smoke_plan, c, tokens_per_s=1) for c in ("scaling.tiny-llama.q.g1.b2", "scaling.tiny-llama.q.g2.b2")],
        comparable=False,
    )
    assert stand_in_case("scaling.llama2-7b.q.g8.b2", smoke) == "scaling.tiny-llama.q.g2.b2"
    assert stand_in_case("scaling.llama2-7b.q.g1.b2", smoke) == "scaling.tiny-llama.q.g1.b2"
    assert stand_in_case("scaling.llama2-7b.q.g8", smoke) is None


def test_cross_platform_claims_need_a_run_on_each_platform(reference, paper_plan):
    cases = ["pretrain.llama2-7b.z3+o.g8", "pretrain.llama2-7b.r.g8"]
    a800 = run_on(A800, [result(paper_plan, c, tokens_per_s=50_000) for c in cases], label="a800")
    rtx = run_on(RTX4090, [result(paper_plan, c, tokens_per_s=v) for c, v in zip(cases, (800, 1200))], label="rtx")
    alone = evaluate_claim(claim(reference, "C5"), reference, [a800])
    assert alone.verdict == "not applicable" and alone.reason.startswith(
        "needs a run on RTX4090, which no run of this report is on"
    )
    both = evaluate_claim(claim(reference, "C5"), reference, [a800, rtx])
    assert both.verdict == "consistent"
    assert both.relations[0].measured == "52.1 ×"
    assert (
        "2 cases, the same case on both: pretrain.llama2-7b.r.g8, pretrain.llama2-7b.z3+o.g8; ratios 41.7 to 62.5"
        in both.relations[0].finding
    )


def test_c5_compares_like_with_like_and_leaves_quantised_cases_to_c6(reference, paper_plan):
    """Quantised cases run at about half the A800's speed on RTX GPUs (C6); mixed into C5's
    median of about 50 × they would drag it to 26 ×."""
    plain, quantised = (
        ["pretrain.llama2-7b.z3+o.g8", "pretrain.llama2-7b.r.g8"],
        ["pretrain.llama2-7b.q.g8", "pretrain.llama2-7b.q+r.g8"],
    )
    a800 = run_on(A800, [result(paper_plan, c, tokens_per_s=50_000) for c in plain + quantised], label="a800")
    rtx = run_on(
        RTX4090,
        [result(paper_plan, c, tokens_per_s=1_000) for c in plain]
        + [result(paper_plan, c, tokens_per_s=25_000) for c in quantised],
        label="rtx",
    )
    outcome = evaluate_claim(claim(reference, "C5"), reference, [a800, rtx])
    assert outcome.verdict == "consistent"
    relation = outcome.relations[0]
    assert relation.measured == "50.0 ×" and relation.relation.startswith(
        "median over every non-quantised pretrain case"
    )
    assert "pretrain.llama2-7b.r.g8, pretrain.llama2-7b.z3+o.g8;" in relation.finding
    assert "q.g8" not in relation.finding and "q+r" not in relation.finding
    # C7 reads both kinds, each on its own: the quantised median is never mixed with the rest.
    rtx3090 = run_on(
        RTX3090,
        [result(paper_plan, c, tokens_per_s=v) for c, v in zip(plain + quantised, (700, 700, 16_000, 16_000))],
        label="rtx3090",
        interconnect="nvlink",
    )
    c7 = evaluate_claim(claim(reference, "C7"), reference, [rtx, rtx3090])
    assert [r.measured for r in c7.relations] == ["1.43 ×", "1.56 ×"]


def test_a_stage_wide_platform_ratio_must_say_which_kind_of_case_it_takes(tmp_path):
    text = reference_path().read_text(encoding="utf-8").replace("        quantised: false\n", "", 1)
    (tmp_path / "reference.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ManifestError, match="quantised: true` or `false`; the two are not mixed"):
        load_reference(tmp_path / "reference.yaml")


def profile_run(plan, with_flash: float, without: float) -> MeasuredRun:
    cases = {"profile.llama2-7b.f.g1": with_flash, "profile.llama2-7b.base.g1": without}
    return run_on(A800, [result(plan, c, attention_forward_s=v, attention_backward_s=v) for c, v in cases.items()])


@pytest.mark.parametrize(
    "ratio, verdict, under_each",
    [
        (0.65, "consistent", ["consistent", "deviates"]),  # 35 % less time
        (0.74, "consistent", ["deviates", "consistent"]),  # 1.35 x the speed
        (0.70, "consistent", ["consistent", "consistent"]),
        (0.90, "deviates", ["deviates", "deviates"]),
    ],
)
def test_c13_is_judged_under_both_readings_and_deviates_only_when_both_do(
    reference, paper_plan, ratio, verdict, under_each
):
    outcome = evaluate_claim(claim(reference, "C13"), reference, [profile_run(paper_plan, ratio, 1.0)])
    relation = outcome.relations[0]
    assert outcome.verdict == relation.verdict == verdict
    assert [(r.label, r.verdict) for r in relation.readings] == list(
        zip(["34.9 % less time", "1.349 × the speed"], under_each)
    )
    assert (
        relation.published == "0.651 × ± 0.05 (read as 34.9 % less time) or 0.741 × ± 0.05 (read as 1.349 × the speed)"
    )
    assert relation.finding.startswith("read as 34.9 % less time: ")


def test_c14_has_the_same_two_readings(reference, paper_plan):
    relation = evaluate_claim(claim(reference, "C14"), reference, [profile_run(paper_plan, 0.84, 1.0)]).relations[0]
    assert [(r.label, r.verdict) for r in relation.readings] == [
        ("24.7 % less time", "deviates"),
        ("1.247 × the speed", "consistent"),
    ]


@pytest.mark.parametrize(
    "seconds_70b, verdict, under_each",
    [
        (400, "consistent", ["consistent", "deviates"]),  # 3.3 x: within "up to 13 x", far from 13.3 x
        (1700, "consistent", ["deviates", "consistent"]),  # 14.2 x: past the bound, near 120 s -> 1600 s
        (2000, "deviates", ["deviates", "deviates"]),  # 16.7 x
    ],
)
def test_c25_is_judged_as_a_bound_and_as_the_example_durations(reference, paper_plan, seconds_70b, verdict, under_each):
    run = run_on(
        RTX4090,
        [
            result(paper_plan, "serve.llama2-7b.vllm.g8", duration_s=120),
            result(paper_plan, "serve.llama2-70b.vllm.g8", duration_s=seconds_70b),
        ],
    )
    relation = evaluate_claim(claim(reference, "C25"), reference, [run]).relations[0]
    assert relation.verdict == verdict
    assert [r.verdict for r in relation.readings] == under_each


@pytest.mark.parametrize(
    "gpu, platform, paper",
    [
        ("NVIDIA GeForce RTX 4090 D", "RTX4090", "8 × RTX4090-24G"),
        ("NVIDIA GeForce RTX 3090 Ti", "RTX3090", "8 × RTX3090-24G, NVLink"),
        ("NVIDIA A800 80GB PCIe", "A800", "8 × A800-80G, NVLink"),
    ],
)
def test_a_similar_gpu_is_not_the_papers_platform_and_is_called_similar(reference, gpu, platform, paper):
    run = run_on(gpu, [], interconnect="nvlink")
    mismatch = platform_mismatch(reference.platforms[platform], run)
    assert mismatch is not None and f"{gpu}: a similar platform, not the paper's {paper}" in mismatch
    exact = {"RTX4090": RTX4090, "RTX3090": RTX3090, "A800": A800}[platform]
    assert platform_mismatch(reference.platforms[platform], run_on(exact, [], interconnect="nvlink")) is None
    assert "similar" not in platform_mismatch(reference.platforms[platform], run_on("NVIDIA H100 80GB HBM3", []))


def test_nvlink_and_pcie_runs_of_one_gpu_model_are_different_platforms(reference, paper_plan):
    def comm(label, interconnect, bandwidth):
        return run_on(
            RTX3090,
            [
                result(paper_plan, f"comm.{c}.g8", bus_bandwidth_gb_s=bandwidth)
                for c in ("all_gather", "reduce_scatter")
            ],
            interconnect=interconnect,
            label=label,
        )

    outcome = evaluate_claim(claim(reference, "C27"), reference, [comm("nv", "nvlink", 90), comm("pcie", "pcie", 12)])
    assert outcome.verdict == "consistent"
    assert outcome.relations[0].measured == "on RTX3090 90.0 > on RTX3090-PCIe 12.0"
    unknown = evaluate_claim(claim(reference, "C27"), reference, [comm("nv", None, 90)])
    assert unknown.verdict == "not applicable"


def test_an_ordering_names_every_pair_out_of_order(reference, paper_plan):
    engines = {"tgi": 900, "vllm": 1000, "lightllm": 500}
    run = run_on(
        RTX4090, [result(paper_plan, f"serve.llama2-7b.{e}.g8", output_throughput=v) for e, v in engines.items()]
    )
    outcome = evaluate_claim(claim(reference, "C22"), reference, [run])
    assert outcome.verdict == "deviates"
    seven = outcome.relations[0]
    assert seven.finding == "serve.llama2-7b.tgi.g8 (900) is not > serve.llama2-7b.vllm.g8 (1000)"
    assert outcome.relations[-1].verdict == "not applicable"  # the A800 ordering, on an RTX4090 run


def test_a_share_of_a_step_is_judged_in_per_cent(reference, paper_plan):
    run = run_on(A800, [result(paper_plan, "profile.llama2-7b.base.g1", optimizer_s=0.35, step_s=1.0)])
    outcome = evaluate_claim(claim(reference, "C10"), reference, [run])
    assert outcome.verdict == "consistent"
    assert (outcome.relations[0].measured, outcome.relations[0].published) == ("35.0 %", "37 % ± 5 points")


def test_the_claims_of_stages_that_did_not_run_are_not_measured(reference, paper_plan):
    outcomes = evaluate_claims(reference, [run_on(A800, [])])
    by_id = {o.id: o for o in outcomes}
    assert by_id["C10"].verdict == "not measured"
    assert "profile.llama2-7b.base.g1 (not in run run-a)" in by_id["C10"].relations[0].finding
    assert by_id["C2"].verdict == "not applicable"


def test_a_transcribed_table_value_is_compared_in_the_runs_unit(reference, paper_plan, tmp_path):
    data = yaml.safe_load(reference_path().read_text())
    data["tables"] = [
        {
            "table": "III",
            "platform": "A800",
            "case": "pretrain.llama2-7b.z3.g8",
            "metric": "tokens_per_s",
            "mean": 10.0,
            "std": 0.1,
            "unit": "10^3 tokens/s",
        }
    ]
    path = tmp_path / "reference.yaml"
    path.write_text(yaml.safe_dump(data))
    with_table = load_reference(Path(path))
    run = run_on(A800, [result(paper_plan, "pretrain.llama2-7b.z3.g8", tokens_per_s=8_000)])
    [row] = evaluate_tables(with_table, [run])
    assert (row.verdict, row.ratio) == ("deviates", "0.800 ×")
    assert row.detail == "20% below the published value, outside ± 10%"
    [elsewhere] = evaluate_tables(with_table, [run_on(RTX4090, [])])
    assert elsewhere.verdict == "not applicable"
