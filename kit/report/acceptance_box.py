"""Page one's decision (`kit report RUN --accept SPEC`): its first line ACCEPT, REJECT or
INCONCLUSIVE, why, the sign-off block a reviewer signs (the spec's, the baseline's and the
evidence's digests, lines for a name, a date and the decision), then each line of the spec:
required, observed per GPU with its interval, margin and outcome. The decision itself is
kit.reference.acceptance's; this module only lays it out."""

from __future__ import annotations

from pathlib import Path

from kit.reference.acceptance import Decision, DecisionLine, reasons_inconclusive
from kit.reference.health_requirements import ConditionLine
from kit.report.model import AcceptanceBox, Cell, Fact, Row, Table, Tone
from kit.report.sections.health import HEALTH_ANCHOR
from kit.rundir.signing import SignatureCheck
from kit.units import format_value

DECISION_TONES: dict[str, Tone] = {"ACCEPT": "good", "REJECT": "bad", "INCONCLUSIVE": "unsure"}
OUTCOME_TONES: dict[str, Tone] = {
    "pass": "good",
    "fail": "bad",
    "inconclusive": "unsure",
    "not measured": "warn",
    "not applicable": "muted",
}
# what decides first
ORDER: dict[str, int] = {"fail": 0, "inconclusive": 1, "not measured": 2, "pass": 3, "not applicable": 4}
BASELINE_KINDS = {"runs": "made from measured runs", "expectation": "the kit's expectation, standing in for a baseline"}
BLANK = "_" * 40  # a line to write on, in the printed page


def _summary(decision: Decision) -> str:
    counts = ", ".join(
        f"{decision.counted(outcome)} {outcome}"
        for outcome in ORDER
        if decision.counted(outcome) or outcome in ("pass", "fail")
    )
    lines = len(decision.lines) + len(decision.conditions)
    said = f"{lines} lines of the spec “{decision.spec_name}” against the baseline “{decision.baseline_name}”: {counts}"
    if decision.decided == "REJECT":
        failing = [f"{line.label}: {line.observed}" for line in decision.conditions if line.outcome == "fail"]
        failing += [f"{line.label}, {line.case_id}" for line in decision.lines if line.outcome == "fail"]
        said += ". Failing: " + "; ".join(failing)
    elif decision.decided == "INCONCLUSIVE":
        said += ". Undecided: " + "; ".join(reasons_inconclusive(decision))
        if any(line.why and line.why.startswith(("too few runs", "the interval straddles")) for line in decision.lines):
            said += (
                f". A decisive run: `kit run --all --runs-for {Path(decision.spec_path).name}` ({decision.min_runs} runs "
                "of each case the spec reads, then more until each interval is narrow, where the spec says `repeat:`)"
            )
    if decision.unread:
        said += ". Not in the baseline: " + "; ".join(decision.unread)
    return said + "."


def _observed(line: DecisionLine) -> Cell:
    if line.observed is None:
        return Cell(text="not measured", tone="warn")
    interval = (
        f"95 % interval {format_value(line.interval[0])}–{format_value(line.interval[1])}"
        if line.interval
        else "no interval (one value)"
    )
    return Cell(text=f"{format_value(line.observed)} {line.unit}", detail=f"{interval}; {line.runs} run(s)")


def _row(line: DecisionLine) -> Row:
    relation = "≥" if line.higher_is_better else "≤"
    return Row(
        cells=[
            Cell(text=line.label, detail=f"{line.case_id}: {line.workload}", link=f"#{line.case_id.split('.')[0]}"),
            Cell(
                text=f"{relation} {format_value(line.required)} {line.unit}",
                detail=f"baseline median {format_value(line.baseline_median)}",
            ),
            _observed(line),
            Cell(text="" if line.margin is None else f"{line.margin:+.1%}"),
            Cell(text=line.outcome, detail=line.why, tone=OUTCOME_TONES[line.outcome]),
        ]
    )


def _condition_row(line: ConditionLine) -> Row:
    return Row(
        cells=[
            Cell(text=line.label, link=f"#{HEALTH_ANCHOR}"),
            Cell(text=line.required),
            Cell(text=line.observed),
            Cell(text=""),
            Cell(text=line.outcome, detail=line.why, tone=OUTCOME_TONES[line.outcome]),
        ]
    )


def acceptance_box(decision: Decision, baseline_signature: SignatureCheck) -> AcceptanceBox:
    """The decision as page one prints it: the word, the reasons, the sign-off block, the lines."""
    ordered = sorted(decision.lines, key=lambda line: ORDER[line.outcome])
    conditions = sorted(decision.conditions, key=lambda line: ORDER[line.outcome])
    return AcceptanceBox(
        decided=decision.decided,
        tone=DECISION_TONES[decision.decided],
        summary=_summary(decision),
        sign_off=[
            Fact(label="Spec", value=f"{decision.spec_name} ({decision.spec_path}); {decision.spec_digest}"),
            Fact(
                label="Baseline",
                value=f"{decision.baseline_name} ({BASELINE_KINDS[decision.baseline_kind]}); {decision.baseline_digest}; "
                + baseline_signature.summary,
                tone="bad" if baseline_signature.failed else "plain",
            ),
            Fact(label="Evidence", value=f"SHA-256 of SHA256SUMS: {decision.evidence_digest}"),
            Fact(label="Reviewer", value=BLANK),
            Fact(label="Date", value=BLANK),
            Fact(label="Decision", value="☐ accept   ☐ reject   ☐ repeat the run      Signature: " + "_" * 20),
        ],
        lines=Table(
            caption="Acceptance: each line of the spec (failing and undecided first)",
            header=["Requirement (case: workload)", "Required", "Observed (mean per GPU)", "Margin", "Outcome"],
            widths=[36, 18, 22, 8, 16],
            rows=[_condition_row(line) for line in conditions] + [_row(line) for line in ordered],
            dense=True,
            notes=[
                "Required: the spec's fraction of the baseline's median over its runs. Observed: this run's mean over "
                "its runs, per GPU where the quantity is (on CPU, per process), with the 95 % Student-t interval of the "
                "mean. A line passes where the whole interval clears the required value, fails where the whole of it "
                "falls short, and is inconclusive where it straddles it or the case made fewer runs than the spec asks. "
                "Health and correctness lines come first: a failing one rejects however fast the host is. "
                "Exit status: 0 accept, 1 reject, 3 inconclusive."
            ],
        ),
    )


def node_decision_fact(node: str, decision: Decision) -> Fact:
    """A fleet report's line for one node: its decision under the spec, and why."""
    return Fact(label=node, value=f"{decision.decided}: {_summary(decision)}", tone=DECISION_TONES[decision.decided])
