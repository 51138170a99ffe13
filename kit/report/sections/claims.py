"""The reference claims section: each claim's verdict beside the published value, its relations
and what was expected of this host, and the paper's tables beside the measured values.
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.reference.claims import (
    MIN_RUNS,
    SPREAD_FACTOR,
    ClaimOutcome,
    RelationOutcome,
    TableComparison,
    Verdict,
    verdict_counts,
)
from kit.reference.expectation import (
    ClaimExpectation,
    RelationExpectation,
    expectation_counts,
)
from kit.reference.measured_run import MeasuredRun
from kit.reference.published import Reference, reference_path
from kit.report.cells import VERDICT_TONES, one_line_cause
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Section, Table
from kit.units import metric_label


def expected_cell(expectation: RelationExpectation | None) -> Cell:
    """The value expected on this host's GPUs (its basis is said under the relation)."""
    if expectation is None:
        return Cell(text="—", tone="muted")
    return Cell(text=expectation.expected or "no expectation", tone="plain" if expectation.expected else "muted")


def against_expectation(verdict: str, finding: str = "") -> str | None:
    """The verdict against the expectation, said as such so it is never read as the paper's."""
    if verdict == "paper verdict":
        return None
    return f"vs expectation: {verdict}" + (f" ({finding})" if finding else "")


def claims_table(outcomes: Sequence[ClaimOutcome], expectations: Sequence[ClaimExpectation] = ()) -> Table:
    """One heading row per claim (its verdict, and why under the statement), then two rows per
    relation it makes: the paper's value, the value expected on this host's GPUs and the measured
    one; then, across the table's width, why the verdict is what it is and what the expectation
    rests on. Long explanations in narrow columns made each claim a page tall (and slow to print)."""
    expected = {e.id: e for e in expectations}
    rows = []
    for claim in outcomes:
        meta = f"{claim.section}, {claim.source}; platform: {claim.platforms}."
        extra = [
            text
            for text in (
                claim.interpretation and f"Kit's reading: {claim.interpretation}",
                claim.note and f"Note: {claim.note}",
                claim.reason and f"Verdict: {claim.reason}.",
            )
            if text
        ]
        mine = expected.get(claim.id)
        rows.append(
            Row(
                heading=True,
                cells=[
                    Cell(text=claim.id, tone="strong"),
                    Cell(text=claim.statement, detail=" ".join([meta, *extra]), colspan=4),
                    Cell(
                        text=claim.verdict,
                        tone=VERDICT_TONES[claim.verdict],
                        detail=mine and against_expectation(mine.verdict),
                    ),
                ],
            )
        )
        relation_expectations = mine.relations if mine else [None] * len(claim.relations)
        for relation, expectation in zip(claim.relations, relation_expectations):
            rows += relation_rows(relation, expectation, claim.caveats)
    return Table(
        caption="The paper's published findings against this run, and what the kit expects of this host's GPUs",
        header=["Claim", "Relation", "Paper", "Expected on this host", "Measured", "Verdict"],
        widths=[5, 35, 14, 16, 14, 16],
        rows=rows,
        notes=[
            "Tolerances are the kit's choice: the paper states none.",
            f"Inconclusive: measured, but the runs cannot decide. A relation deviates only from at least {MIN_RUNS} "
            "runs of each case it reads, and only beyond the wider of its tolerance and its runs' spread "
            f"({SPREAD_FACTOR:g} standard errors of its value); with fewer runs, or within that spread, it is "
            "inconclusive and says which runs it lacks. A value inside the bound from fewer runs is consistent only "
            "when inside by more than its runs' spread, which a single run does not give.",
            "A verdict is not applicable when the claim is about other hardware, needs two platforms, or the "
            "run is not comparable to the reference; what the run measured is still shown, for information. "
            "In a run not comparable to the reference, a case of the same stage and method stands in for a "
            "case the run lacks, and is named.",
            "Expected on this host: the kit's expectation for this run's GPUs (kit/reference/expectation.py), with its basis "
            "in the row under the relation: a relation of configurations on one platform carries the paper's value on the paper's "
            "platform most like these GPUs; an absolute figure or a ratio of two platforms scales the paper's "
            "number by manifests/hardware.yaml (dense bf16 peak for training, memory bandwidth for serving, link "
            "bandwidth for communication). Where this host is not the claim's platform, the verdict against that "
            'expectation is marked "vs expectation" and never counted as agreement with the paper. Where this '
            "host is the claim's platform, or the claim is of any GPU, the expectation is the paper's own value and "
            "its verdict the paper's.",
        ],
    )


def relation_rows(
    relation: RelationOutcome, expectation: RelationExpectation | None, claim_caveats: Sequence[str] = ()
) -> list[Row]:
    """A relation's values and verdicts, then a row across the table: why, and the expectation's
    basis (caveats the whole claim shares are said once, with it)."""
    own = [caveat for caveat in relation.caveats if caveat not in claim_caveats]
    stand_ins = [f"{used} stands in for {case}" for case, used in relation.stand_ins.items()]
    finding = relation.finding
    if relation.caveats and relation.finding:
        finding = f"for information: {relation.finding}"
    measured = relation.measured or (expectation.measured if expectation else None)
    values = Row(
        cells=[
            Cell(text=""),
            Cell(text=relation.relation),
            Cell(text=relation.published),
            expected_cell(expectation),
            Cell(text=measured or "—", tone="plain" if measured else "muted"),
            Cell(
                text=relation.verdict,
                tone=VERDICT_TONES[relation.verdict],
                detail=expectation and against_expectation(expectation.verdict),
            ),
        ]
    )
    against = expectation and against_expectation(expectation.verdict, expectation.finding)
    # where the expectation is the paper's own value (this host is the claim's platform, or the claim is
    # of any GPU), its basis would repeat the table's note on every relation
    basis = expectation and expectation.verdict != "paper verdict" and f"Expected on this host: {expectation.basis}"
    why = [*own, *stand_ins, *([basis] if basis else []), *([against] if against else [])]
    why_cell = (
        Cell(text=f"Why: {finding}", detail="; ".join(why) or None) if finding else Cell(text="; ".join(why) or "—")
    )
    return [values, Row(cells=[Cell(text=""), why_cell.model_copy(update={"colspan": 5})])]


UNJUDGED: tuple[Verdict, ...] = ("not applicable", "not measured")
JUDGED_EXPECTATIONS = ("consistent", "deviates", "inconclusive")


def split_judged(
    outcomes: Sequence[ClaimOutcome], expectations: Sequence[ClaimExpectation]
) -> tuple[list[ClaimOutcome], list[ClaimOutcome]]:
    """The claims this run judged (against the paper, or against the kit's expectation on this
    host), and those it could not: a reviewer reads the first relation by relation, the second
    as a list of what this run cannot tell."""
    expected = {e.id: e.verdict for e in expectations}
    judged = [c for c in outcomes if c.verdict not in UNJUDGED or expected.get(c.id) in JUDGED_EXPECTATIONS]
    return judged, [c for c in outcomes if c not in judged]


def unjudged_tables(unjudged: Sequence[ClaimOutcome], expectations: Sequence[ClaimExpectation]) -> list[Table]:
    """The claims not judged, one line each in print (its statement and why); relation by
    relation, with what the run measured for information, on screen."""
    listed = Table(
        caption=f"Claims this run does not judge ({len(unjudged)}): one line each",
        header=["Claim", "Statement", "Verdict", "Why"],
        widths=[6, 46, 12, 36],
        dense=True,
        rows=[
            Row(
                cells=[
                    Cell(text=claim.id, tone="strong"),
                    Cell(text=claim.statement),
                    Cell(text=claim.verdict, tone=VERDICT_TONES[claim.verdict]),
                    Cell(text=one_line_cause(claim.reason or _first_finding(claim))),
                ]
            )
            for claim in unjudged
        ],
    )
    detailed = claims_table(unjudged, expectations).model_copy(
        update={"caption": "Claims this run does not judge, relation by relation", "media": "screen"}
    )
    return [listed, detailed]


def _first_finding(claim: ClaimOutcome) -> str:
    return next((relation.finding for relation in claim.relations if relation.finding), "no finding recorded")


def tables_table(comparisons: Sequence[TableComparison]) -> Table:
    return Table(
        caption="Values transcribed from the paper's tables, case by case",
        header=["Table", "Platform", "Case", "Metric", "Published", "Measured", "Ratio", "Verdict", "Why"],
        widths=[6, 12, 16, 9, 11, 11, 7, 9, 19],
        rows=[
            Row(
                cells=[
                    Cell(text=c.table),
                    Cell(text=c.platform),
                    Cell(text=c.case, tone="mono"),
                    Cell(text=metric_label(c.metric)),
                    Cell(text=c.published),
                    Cell(text=c.measured or "—"),
                    Cell(text=c.ratio or "—"),
                    Cell(text=c.verdict, tone=VERDICT_TONES[c.verdict]),
                    Cell(text=c.detail),
                ]
            )
            for c in comparisons
        ],
    )


def claims_section(
    reference: Reference | None,
    outcomes: Sequence[ClaimOutcome],
    comparisons: Sequence[TableComparison],
    run: LoadedRun,
    runs: Sequence[MeasuredRun],
    expectations: Sequence[ClaimExpectation] = (),
) -> Section:
    section = Section(anchor="claims", title="Reference claims (arXiv:2311.03687)")
    if reference is None:
        section.not_run = (
            "Not requested: this report compares no reference. Render it with "
            "`--compare reference` to judge the run against the paper's published findings."
        )
        return section
    counts = verdict_counts(outcome.verdict for outcome in outcomes)
    section.paragraphs.append(
        f"{reference.title}. {len(outcomes)} published findings (PROTOCOL.md), from "
        f"{reference_path().name}: " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items()) + "."
    )
    section.paragraphs.append(
        "Runs this report judges the claims on: "
        + "; ".join(f"{measured.label} (profile {measured.profile}) on {measured.devices}" for measured in runs)
        + "."
    )
    if not run.measured.comparable_to_reference:
        section.paragraphs.append(
            f"Profile {run.info.profile} is not comparable to the reference (comparable_to_reference: false), "
            "so no claim is judged on it: each is not applicable, with what this run measured beside it for "
            "information."
        )
    against = expectation_counts(expectations)
    if any(against.values()):
        section.paragraphs.append(
            f"Against the kit's expectation on this host's GPUs ({runs[0].gpus}), for the claims about other "
            "hardware: " + ", ".join(f"{count} {verdict}" for verdict, count in against.items()) + ". These are not "
            "the paper's verdicts: the expected value and its basis stand beside each relation."
        )
    judged, unjudged = split_judged(outcomes, expectations)
    if judged:
        section.tables.append(claims_table(judged, expectations))
    if unjudged:
        section.tables += unjudged_tables(unjudged, expectations)
    if comparisons:
        section.tables.append(tables_table(comparisons))
    else:
        section.paragraphs.append(
            f"Table values: none transcribed yet in {reference_path().name} (its tables list is empty); the paper's "
            "full tables are not published here. A transcribed value is compared case by case once added there."
        )
    return section
