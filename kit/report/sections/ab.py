"""The A/B section (`kit report --compare RUN`): each case of both runs, its throughput and peak
memory side by side with Welch's t-test on their runs.
"""

from __future__ import annotations

from pydantic import BaseModel

from kit.host.environment import comparable, load_expectations
from kit.report import charts
from kit.report.cells import mean_std, metric_of, signature_cell, status_cell
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Chart, Row, Section, Table, Tone, html_id
from kit.report.sections.environment import machine
from kit.report.stats import SIGNIFICANCE_LEVEL, WelchTest, welch_t_test
from kit.units import format_value, metric_label

AB_METRICS = ("tokens_per_s", "peak_memory_gib")


def _p_value(test: WelchTest) -> tuple[Cell, Cell]:
    if test.p_value is None:
        return Cell(text="—", detail=test.reason, tone="muted"), Cell(text="not testable", tone="muted")
    significant = "yes" if test.significant else "no"
    return (
        Cell(text=f"{test.p_value:.3g}", detail=f"t = {test.t:.2f}, df = {test.df:.1f}"),
        Cell(text=significant, tone="strong" if test.significant else "plain"),
    )


class AbSection(BaseModel):
    """An A/B section and the sentence the executive summary gives it."""

    section: Section
    summary: str


def comparison_section(run: LoadedRun, other: LoadedRun) -> AbSection:
    """Every case both runs have: A and B side by side, B / A, and Welch's test on per-run values."""
    a, b = run, other
    section = Section(
        anchor=html_id(f"ab-{b.info.run_id}"),
        title=f"A/B: this run against {b.info.run_id}",
        paragraphs=[
            f"A = {a.info.run_id} (profile {a.info.profile}, {machine(a)}). "
            f"B = {b.info.run_id} (profile {b.info.profile}, {machine(b)}), evidence digest {b.evidence_digest}."
        ],
    )
    section.tables.append(
        Table(
            caption="Who signed each run",
            header=["Run", "Signature"],
            widths=[25, 75],
            rows=[
                Row(cells=[Cell(text=f"{side} = {loaded.info.run_id}"), signature_cell(loaded.signature)])
                for side, loaded in (("A", a), ("B", b))
            ],
        )
    )
    common = [cid for cid in a.info.selected if cid in a.results and cid in b.results]
    stages = list(dict.fromkeys(a.results[cid].stage for cid in common))
    fa, fb = a.before.fingerprint, b.before.fingerprint
    differing: list[str] = []  # stages whose environments differ: no difference there is significant
    if fa is None or fb is None:
        sides = "; ".join(
            f"{name}: {loaded.missing}"
            for name, loaded in (("A", a.before), ("B", b.before))
            if loaded.fingerprint is None
        )
        section.paragraphs.append(f"Comparability of the environments: fingerprints not recorded ({sides}).")
        environments = "fingerprints not recorded, so the environments' comparability is unknown"
    else:
        rules = load_expectations().comparability
        answers: dict[str, tuple[str, list[str]]] = {}
        for stage in stages:
            if stage not in rules.stages:
                answers[stage] = ("unknown", [f"environment.yaml has no comparability rules for stage {stage}"])
            else:
                verdict = comparable(fa, fb, stage, rules)
                answers[stage] = ("yes" if verdict.comparable else "no", list(verdict.reasons))
        # the reasons every stage that is not comparable shares are said once, in a row of their own
        refused = [reasons for answer, reasons in answers.values() if answer == "no"]
        shared = (
            [reason for reason in refused[0] if all(reason in reasons for reasons in refused)]
            if len(refused) > 1
            else []
        )
        said: dict[tuple[str, str], list[str]] = {}  # (comparable, why) -> its stages: each answer once
        if shared:
            said[("no", "; ".join(shared))] = [stage for stage, (answer, _) in answers.items() if answer == "no"]
        for stage, (answer, reasons) in answers.items():
            own = [reason for reason in reasons if reason not in shared]
            if answer == "yes":
                said.setdefault(("yes", "every aspect equal"), []).append(stage)
            elif own:
                said.setdefault((answer, ("and: " if shared else "") + "; ".join(own)), []).append(stage)
        tones: dict[str, Tone] = {"yes": "good", "no": "bad", "unknown": "warn"}
        rows = [
            Row(cells=[Cell(text=", ".join(named)), Cell(text=answer, tone=tones[answer]), Cell(text=why)])
            for (answer, why), named in said.items()
        ]
        section.tables.append(
            Table(
                caption="May the two runs' numbers be compared? (fingerprints; stages with one answer share a row)",
                header=["Stages", "Comparable", "Why not"],
                widths=[15, 12, 73],
                rows=rows,
            )
        )
        differing = [stage for (answer, _), named in said.items() if answer != "yes" for stage in named]
        environments = (
            f"environments not comparable for {', '.join(differing)}"
            if differing
            else "environments comparable for every common stage"
        )
    rows, bars, tested = [], [], []
    for cid in common:
        left, right = a.results[cid], b.results[cid]
        if left.status != "ok" or right.status != "ok":
            rows.append(
                Row(
                    cells=[
                        Cell(text=cid, tone="mono"),
                        Cell(text="status"),
                        status_cell(left, True),
                        status_cell(right, True),
                        Cell(text="—", tone="muted"),
                        Cell(text="—", tone="muted"),
                        Cell(text="no comparison", tone="muted"),
                    ]
                )
            )
            continue
        names = [n for n in AB_METRICS if left.metrics.get(n) and right.metrics.get(n)] or [
            n for n in left.metrics if left.metrics.get(n) and right.metrics.get(n)
        ]
        apart = left.stage in differing
        for name in names:
            ma, mb = metric_of(left, name), metric_of(right, name)
            test = welch_t_test(ma.per_run, mb.per_run)
            ratio = mb.mean / ma.mean if ma.mean else None
            p_value, significant = _p_value(test)
            if apart and test.p_value is not None:  # a difference between unlike environments says nothing of the runs
                significant = Cell(
                    text="not comparable", detail=f"the environments differ for {left.stage}", tone="muted"
                )
            rows.append(
                Row(
                    cells=[
                        Cell(text=cid, tone="mono"),
                        Cell(text=metric_label(name)),
                        Cell(text=mean_std(ma)),
                        Cell(text=mean_std(mb)),
                        Cell(text=f"{format_value(ratio)} ×" if ratio is not None else "—"),
                        p_value,
                        significant,
                    ]
                )
            )
            if name == "tokens_per_s" and ratio is not None:
                bars.append(charts.RatioBar(label=cid, ratio=ratio, significant=test.significant and not apart))
                if not apart:
                    tested.append(test.significant)
    only_a = [cid for cid in a.results if cid not in b.results]
    only_b = [cid for cid in b.results if cid not in a.results]
    notes = [
        f"Welch's t-test on the per-run values, two-sided, α = {SIGNIFICANCE_LEVEL}; units as in the run "
        "(tokens/s, GiB)."
    ]
    if only_a:
        notes.append(f"Only in A: {', '.join(only_a)}.")
    if only_b:
        notes.append(f"Only in B: {', '.join(only_b)}.")
    if rows:
        section.tables.append(
            Table(
                caption=f"Cases of both runs ({len(common)})",
                header=["Case", "Metric", "A", "B", "B / A", "p", "Significant"],
                widths=[26, 10, 14, 14, 8, 17, 11],
                rows=rows,
                notes=notes,
            )
        )
    else:
        section.paragraphs.append("The two runs have no case in common. " + " ".join(notes[1:]))
    if bars:
        section.charts.append(
            Chart(
                title="Throughput B / A",
                svg=charts.ratio_chart(f"ab-{b.info.run_id}", bars, "tokens/s"),
                caption=f"Ratio of mean throughputs; dark bars: Welch's test p < {SIGNIFICANCE_LEVEL}.",
            )
        )
    summary = (
        f"Against run {b.info.run_id}: {len(common)} cases in common; throughput differs significantly "
        f"(Welch, α = {SIGNIFICANCE_LEVEL}) in {sum(1 for t in tested if t)} of the {len(tested)} measured in "
        f"both in comparable environments; {environments}."
    )
    return AbSection(section=section, summary=summary)
