"""Named variants of a case (protocol.yaml `variants`): the paper's RTX3090 with and without
NVLink measured on one NVLink host, each p2p-off case paired with its twin (claims C4, C8, C27)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml
from support.paper_size_run import write_run

from kit.host.fingerprint import Fingerprint
from kit.manifest import ManifestError
from kit.plan.protocol import build_plan, load_protocol
from kit.reference.claims import evaluate_claims
from kit.reference.measured_run import measured_run
from kit.reference.published import load_reference
from kit.rundir.directory import RunDir

RTX3090 = "NVIDIA GeForce RTX 3090"
# The synthetic run's figures are an H100's: a third of them keeps an RTX 3090's collectives under its
# links' rate (56 GB/s across its NVLink bridge; PCIe 4.0 x16 without), where kit.measure.validity holds them.
RTX3090_SPEED = 0.33


def test_the_paper_profile_repeats_each_multi_gpu_comm_scaling_and_pretrain_case_with_p2p_off(paper_plan):
    variants = {case.id: case for case in paper_plan.cases if case.variant is not None}
    twins = {case.id: case for case in paper_plan.cases if case.variant is None}
    assert {case.stage for case in variants.values()} == {"comm", "scaling", "pretrain"}
    for case in variants.values():
        twin = twins[case.variant_of]
        assert case.id == f"{twin.id}.p2p-off" and case.gpus == twin.gpus > 1
        assert case.params.env == {**twin.params.env, "NCCL_P2P_DISABLE": "1"}
        assert case.params.model_copy(update={"env": twin.params.env}) == twin.params
    # one GPU has no peer: its variant would measure the case again
    assert "scaling.llama2-7b.q.g1.b2.p2p-off" not in variants and "scaling.llama2-7b.q.g8.b2.p2p-off" in variants
    assert len([c for c in variants.values() if c.stage == "pretrain"]) == len(
        [c for c in twins.values() if c.stage == "pretrain"]
    )


def test_the_smoke_profile_runs_the_comm_variants_and_says_they_change_nothing_on_cpu(smoke_plan):
    variants = [case for case in smoke_plan.cases if case.variant is not None]
    assert [case.id for case in variants] == [
        f"comm.{c}.g2.p2p-off" for c in ("all_reduce", "all_gather", "reduce_scatter", "reduce")
    ]
    assert all(
        "has no effect here: the case runs on CPU over gloo" in case.interpretation["variant"] for case in variants
    )


def test_a_stage_naming_an_unknown_variant_is_one_line(tmp_path):
    from kit.manifest import manifests_dir

    data = yaml.safe_load((manifests_dir() / "protocol.yaml").read_text())
    data["stages"]["comm"]["variants"] = ["nvlink-off"]
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ManifestError, match="unknown variant 'nvlink-off'"):
        load_protocol(path)


# --- C4, C8, C27 on one NVLink host --------------------------------------------------------------

PAIRED = [
    "scaling.llama2-7b.q.g1.b2",
    "scaling.llama2-7b.q.g8.b2",
    "comm.all_gather.g8",
    "comm.reduce_scatter.g8",
    "pretrain.llama2-7b.q.g8",
    "pretrain.llama2-7b.z3.g8",
]


@pytest.fixture(scope="module")
def nvlink_3090_run(tmp_path_factory):
    """A synthetic run (tests/support/paper_size_run.py) on 8 RTX 3090s bridged in pairs, each case and its
    p2p-off variant: the variant trains at 0.9 × and moves collectives at 0.45 × its twin."""
    plan = build_plan(load_protocol(), "paper")
    cases = PAIRED + [f"{c}.p2p-off" for c in PAIRED if not c.startswith("scaling.llama2-7b.q.g1.")]
    return write_run(
        tmp_path_factory.mktemp("runs") / "rtx3090-nvlink",
        plan,
        gpu_name=RTX3090,
        speed=RTX3090_SPEED,
        interconnect="nvlink-partial",
        cases=cases,
    )


def measured(path):
    run = RunDir(path)
    return measured_run(
        run.read_info(), run.results(), Fingerprint.model_validate_json(run.fingerprint_path.read_text())
    )


def test_one_nvlink_host_evaluates_the_nvlink_claims_through_its_variants(nvlink_3090_run):
    measured_3090 = measured(nvlink_3090_run)
    assert measured_3090.interconnect == "nvlink"
    outcomes = {o.id: o for o in evaluate_claims(load_reference(), [measured_3090])}
    c8 = outcomes["C8"]
    assert c8.verdict == "consistent" and c8.relations[0].measured_value == pytest.approx(1 / 0.9, rel=0.02)
    # C8 reads quantised and non-quantised cases apart (kit/reference/claims.py): one pair each here
    assert "1 cases, the same case on both: pretrain.llama2-7b.z3.g8" in c8.relations[0].finding
    assert "pretrain.llama2-7b.q.g8" in c8.relations[1].finding
    c4 = outcomes["C4"]  # efficiency 8 GPUs with / without: the 1-GPU base is one case for both
    # each efficiency is of two cases' means over 3 runs drawn with 1.2 % noise: about 1.4 % on the ratio
    assert c4.verdict == "consistent" and c4.relations[0].measured_value == pytest.approx(1 / 0.9, rel=0.04)
    c27 = outcomes["C27"]
    assert c27.verdict == "inconclusive" and len(c27.relations) == 2  # evaluated, from comm cases run once each
    assert all("on RTX3090 " in r.measured and " > on RTX3090-PCIe " in r.measured for r in c27.relations)


def test_a_run_really_without_nvlink_comes_before_a_variant(nvlink_3090_run, tmp_path):
    plan = build_plan(load_protocol(), "paper")
    pcie = write_run(
        tmp_path / "rtx3090-pcie",
        plan,
        gpu_name=RTX3090,
        interconnect="pcie-only",
        speed=RTX3090_SPEED / 2,
        cases=["comm.all_gather.g8", "comm.reduce_scatter.g8"],
    )
    c27 = next(
        o for o in evaluate_claims(load_reference(), [measured(nvlink_3090_run), measured(pcie)]) if o.id == "C27"
    )
    assert c27.verdict == "inconclusive"  # evaluated, from comm cases run once each (a claim deviates from 3 runs)
    assert all(r.runs == ("rtx3090-nvlink", "rtx3090-pcie") for r in c27.relations)


def test_the_report_pairs_each_variant_with_its_twin_and_judges_the_claims(nvlink_3090_run):
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "report", str(nvlink_3090_run), "--compare", "reference", "--format", "html"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", (nvlink_3090_run / "report.html").read_text()))
    section = text[text.index("Variants beside their twins p2p-off") :]
    for twin in PAIRED[1:]:
        assert re.search(re.escape(twin) + r" \S+ [\d.]+ .*? [\d.]+ .*? (0\.4[0-9]|0\.9[0-9]) ×", section), twin
    # the stage sections lay out the twins only: no variant row among the comm section's collectives
    assert (
        "all_gather.g8.p2p-off"
        not in text[: text.index("Variants beside their twins p2p-off")].split("Communication bandwidth")[-1]
    )
