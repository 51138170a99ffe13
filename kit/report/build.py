"""Run directory + manifests -> the report model, section by section."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import NamedTuple, TypeVar

from kit import __version__
from kit.measure.energy import DEFAULT_CURRENCY
from kit.measure.slo import DEFAULT_SLO, Slo
from kit.plan.protocol import Protocol, load_protocol
from kit.reference.acceptance import Judgement
from kit.reference.claims import ClaimOutcome, TableComparison, evaluate_claims, evaluate_tables, verdict_counts
from kit.reference.expectation import ClaimExpectation, expect_claims, expectation_counts
from kit.reference.measured_run import MeasuredRun
from kit.reference.published import Reference, load_reference
from kit.report.acceptance_box import acceptance_box
from kit.report.cells import EXPECTATION_TONES, VERDICT_TONES
from kit.report.forked import both_in_parallel
from kit.report.headline_workload import with_workloads
from kit.report.load import load_run
from kit.report.loaded_run import LoadedRun
from kit.report.model import Count, Cover, Fact, Report, Tone
from kit.report.page_one import page_one
from kit.report.sections.ab import comparison_section
from kit.report.sections.appendix import appendix_section
from kit.report.sections.capacity import capacity_part
from kit.report.sections.claims import claims_section
from kit.report.sections.energy import energy_section
from kit.report.sections.environment import environment_section, machine, node_fingerprints_section
from kit.report.sections.health import health_section
from kit.report.sections.prefix import prefix_section
from kit.report.sections.rates import rates_section
from kit.report.sections.stages import stage_sections
from kit.report.sections.startup import startup_section
from kit.report.sections.summary import TALLY_TONES, case_tally, issues_section, summary_section

REFERENCE = "reference"
SYNTHETIC_BANNER = "Synthetic run: its numbers were measured on no machine (run.json, synthetic)."
K = TypeVar("K", bound=str)  # a count's label: a verdict of either kind


def _counts(values: dict[K, int], tones: dict[K, Tone]) -> list[Count]:
    return [Count(label=label, count=count, tone=tones.get(label, "plain")) for label, count in values.items()]


def cover_of(
    run: LoadedRun,
    others: Sequence[LoadedRun],
    outcomes: Sequence[ClaimOutcome] | None,
    protocol: Protocol,
    expectations: Sequence[ClaimExpectation] = (),
) -> Cover:
    """The first page: the verdict in counts, the machine, the date, the profile and the evidence digest."""
    info = run.info
    if outcomes is None:
        claim_counts, claims_summary = [], "Reference not compared (no --compare reference)."
    else:
        # consistent and deviates always (a reviewer looks for "0 deviates"), the rest where there are any
        counted = verdict_counts(o.verdict for o in outcomes)
        shown = {v: n for v, n in counted.items() if n or v in ("consistent", "deviates")}
        claim_counts = _counts(shown, VERDICT_TONES)
        claims_summary = f"{len(outcomes)} published findings of {protocol.paper}"
        if not info.plan.comparable_to_reference:
            claims_summary += ": none judged, the run is not comparable to the reference"
    against = expectation_counts(expectations)
    expected_counts = _counts({v: n for v, n in against.items() if n}, EXPECTATION_TONES)
    compared = (["the paper's published findings"] if outcomes is not None else []) + [
        f"run {other.info.run_id}" for other in others
    ]
    fingerprint = run.before.fingerprint
    return Cover(
        title="LLM runtime benchmark report",
        subtitle=f"Reproduction of the benchmarks of {protocol.paper}: Dissecting the Runtime Performance of the "
        "Training, Fine-tuning, and Inference of Large Language Models",
        facts=[
            Fact(label="Run", value=info.run_id),
            Fact(
                label="Profile",
                value=f"{info.profile}: {info.plan.description}",
                tone="plain" if info.plan.comparable_to_reference else "bad",
            ),
            Fact(label="Machine", value=machine(run)),
            Fact(
                label="CPU",
                value=(fingerprint.host.cpu.model or "not in the fingerprint") if fingerprint else run.before.missing,
            ),
            Fact(label="Operating system", value=info.host.os or "not recorded"),
            Fact(label="Date (UTC)", value=f"{info.started_at} to {info.finished_at or 'not recorded'}"),
            Fact(label="Kit", value=f"{info.kit.version} (report by kit {__version__})"),
            Fact(
                label="Evidence digest",
                value=f"SHA-256 of SHA256SUMS ({len(run.evidence)} files): {run.evidence_digest}",
            ),
            Fact(label="Compared with", value=", ".join(compared) or "nothing"),
            Fact(label="Rendered (UTC)", value=datetime.now(timezone.utc).isoformat(timespec="seconds")),
        ],
        claim_counts=claim_counts,
        claims_summary=claims_summary,
        expectation_counts=expected_counts,
        expectation_summary=f"{sum(against.values())} about other GPUs, vs the kit's expectation"
        if expected_counts
        else "",
        case_counts=_counts(case_tally(run), TALLY_TONES),
        case_counts_title=f"Cases of this run ({len(info.selected)} selected)",
    )


class Assessment(NamedTuple):
    """The runs of a report and what the reference says of them, read and evaluated once for
    every output (HTML, PDF, CSV, JSON)."""

    run: LoadedRun
    others: list[LoadedRun]
    reference: Reference | None
    outcomes: list[ClaimOutcome] | None  # None: the reference is not compared
    tables: list[TableComparison]
    expectations: list[ClaimExpectation] | None = None  # the claims on this host's GPUs (kit.reference.expectation)
    acceptance: Judgement | None = None  # kit report --accept SPEC (kit.reference.acceptance)

    @property
    def runs(self) -> list[MeasuredRun]:
        return [self.run.measured] + [other.measured for other in self.others]


def assess(
    run_dir: Path,
    compare: Sequence[str] = (REFERENCE,),
    redact: bool = False,
    reference: Reference | None = None,
    allowed_signers: Path | None = None,
) -> Assessment:
    """A (verified) run directory and the runs it is compared with, the claims evaluated on them
    where the reference is compared. The reference is read from manifests/ unless given; each
    run's signature is checked against `allowed_signers` where given."""
    run = load_run(Path(run_dir), redact, allowed_signers)
    others = [load_run(Path(item), redact, allowed_signers) for item in compare if item != REFERENCE]
    unjudged = Assessment(run, others, None, None, [])
    if REFERENCE not in compare:
        return unjudged
    reference, runs = reference or load_reference(), unjudged.runs
    return unjudged._replace(
        reference=reference,
        outcomes=evaluate_claims(reference, runs),
        tables=evaluate_tables(reference, runs),
        expectations=expect_claims(reference, runs),
    )


def build_report(
    run_dir: Path,
    compare: Sequence[str] = (REFERENCE,),
    redact: bool = False,
    reference: Reference | None = None,
    protocol: Protocol | None = None,
    gpu_hour_price: float | None = None,
    assessment: Assessment | None = None,
    allowed_signers: Path | None = None,
    currency: str = DEFAULT_CURRENCY,
    slo: Slo = DEFAULT_SLO,
) -> Report:
    """The report of a (verified) run directory, compared with the reference and/or other runs.
    The manifests are read from manifests/ unless given; `gpu_hour_price` prices a million tokens
    in `currency`; each run's signature is checked against `allowed_signers` where given; the
    serving sweeps are held to the latency objectives `slo`."""
    assessment = assessment or assess(run_dir, compare, redact, reference, allowed_signers)
    run, others, reference, outcomes, table_comparisons, expectations, _ = assessment
    runs = assessment.runs
    protocol = protocol or load_protocol()
    # the sweeps' rows are read and their charts drawn while the stages' sections are built
    stages, (capacity, capacities) = both_in_parallel(
        partial(stage_sections, run, protocol), partial(capacity_part, run, slo)
    )
    ab_comparisons = [comparison_section(run, other) for other in others]
    info = run.info
    banners, warnings = [], []
    if info.synthetic:  # a test's run: no figure of it was measured, which every page says
        banners.append(SYNTHETIC_BANNER)
        warnings.append("SYNTHETIC RUN")
    if not info.plan.comparable_to_reference:
        banners.append(
            f"Not comparable to the reference: profile {info.profile} ({info.plan.description}); "
            "its numbers say nothing about the paper's hardware."
        )
        warnings.append("NOT COMPARABLE TO THE REFERENCE")
    banner, footer_warning = " ".join(banners) or None, " · ".join(warnings) or None
    sections = [
        summary_section(run, outcomes, stages, ab_comparisons, expectations or []),
        environment_section(run),
        health_section(run),
        *filter(None, [node_fingerprints_section(run)]),
        *stages,
        capacity,
        rates_section(run),
        prefix_section(run),
        startup_section(run),
        energy_section(run, gpu_hour_price, currency),
        claims_section(reference, outcomes or [], table_comparisons, run, runs, expectations or []),
        *(c.section for c in ab_comparisons),
        issues_section(run, outcomes or [], expectations or []),
        appendix_section(run, protocol),
    ]
    footer = " · ".join(
        part
        for part in (f"kit report · run {info.run_id}", f"evidence {run.evidence_digest[:16]}…", footer_warning)
        if part
    )
    first_page = page_one(
        run,
        reference,
        sections,
        protocol,
        outcomes=outcomes,
        expectations=expectations or [],
        gpu_hour_price=gpu_hour_price,
        currency=currency,
        capacities=capacities,
        slo=slo,
        comparisons=ab_comparisons,
    )
    first_page = first_page.model_copy(update={"headline": with_workloads(first_page.headline, run)})
    if assessment.acceptance is not None:
        decided = acceptance_box(assessment.acceptance.decision, assessment.acceptance.baseline_signature)
        first_page = first_page.model_copy(update={"acceptance": decided})
    return Report(
        run_id=info.run_id,
        banner=banner,
        cover=cover_of(run, others, outcomes, protocol, expectations or []),
        sections=sections,
        page_one=first_page,
        footer=footer,
    )
