"""The executive summary and the deviations: what a run's cases came to, its best figures, the
claims it disagrees with and the problems a reviewer must know of.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kit.reference.claims import MIN_RUNS, ClaimOutcome, verdict_counts
from kit.reference.expectation import ClaimExpectation, expectation_counts
from kit.report.cells import STATUS_TONES, has_metrics, mean_std, method_label, metric_of, one_line_cause
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Section, Table, Tone, printed_if_short
from kit.report.ranking import KINDS, method_kind, standing
from kit.report.sections.ab import AbSection
from kit.report.sections.common import RANK_PREFIX
from kit.report.sections.environment import machine

GROUPED_STATUSES = ("skipped", "unavailable")  # cases that did not run: listed by reason


NAMED_IDS = 6  # a group of cases that did not run names this many of them: the rest are in the raw-data index


def _some(ids: list[str]) -> str | None:
    if len(ids) == 1:
        return None
    more = f", and {len(ids) - NAMED_IDS} more (each in the raw-data index)" if len(ids) > NAMED_IDS else ""
    return ", ".join(ids[:NAMED_IDS]) + more


def issues_section(
    run: LoadedRun, outcomes: Sequence[ClaimOutcome], expectations: Sequence[ClaimExpectation] = ()
) -> Section:
    section = Section(anchor="deviations", title="Deviations, failures and waivers")
    selected = run.info.selected
    failures = [run.results[cid] for cid in selected if cid in run.results and run.results[cid].status != "ok"]
    unfinished = [cid for cid in selected if cid not in run.results]
    # a case that did not run (skipped, unavailable) is one of many for one reason: one row per reason
    grouped: dict[tuple[str, str], list[str]] = {}
    for r in failures:
        if r.status in GROUPED_STATUSES:
            grouped.setdefault((r.status, RANK_PREFIX.sub("", r.reason or "no reason recorded")), []).append(r.case_id)
    rows = [
        Row(
            cells=[
                Cell(text=r.case_id, tone="mono", detail=r.case.fitted),
                Cell(text=r.status, tone=STATUS_TONES.get(r.status, "plain")),
                Cell(text=r.reason or "no reason recorded"),
            ]
        )
        for r in failures
        if r.status not in GROUPED_STATUSES
    ]
    rows += [
        Row(
            cells=[
                Cell(
                    text=f"{len(ids)} cases" if len(ids) > 1 else ids[0],
                    tone="mono",
                    detail=_some(ids),
                ),
                Cell(text=status, tone=STATUS_TONES.get(status, "plain")),
                Cell(text=reason),
            ]
        )
        for (status, reason), ids in grouped.items()
    ]
    rows += [
        Row(
            cells=[
                Cell(text=cid, tone="mono"),
                Cell(text="no result", tone="bad"),
                Cell(text="the run ended before this case finished"),
            ]
        )
        for cid in unfinished
    ]
    if rows:
        section.tables.append(
            Table(
                caption="Cases that ended without a measurement",
                header=["Case", "Status", "Reason"],
                widths=[36, 10, 54],  # the longest id (pretrain.llama2-70b.z3+o+r+f.g8.p2p-off) on one line
                rows=rows,
                notes=[
                    "Each was recorded as it happened; the run went on. "
                    "The case's log.txt (see the raw-data index) has the details."
                ],
            )
        )
    else:
        section.paragraphs.append("Every selected case finished with a measurement.")
    if run.invalid:
        section.tables.append(
            Table(
                caption="Figures marked invalid: past their physical bound, or their case's own self-check failed",
                header=["Case", "Why it is not a measurement"],
                widths=[36, 64],
                rows=[
                    Row(cells=[Cell(text=cid, tone="mono"), Cell(text="; ".join(reasons), tone="bad")])
                    for cid, reasons in run.invalid.items()
                ],
                notes=[
                    "Each case ended ok and keeps its numbers in result.json, but the report takes none of them for a "
                    "measurement: they are marked invalid wherever shown, never a headline nor priced, and no claim is "
                    "judged on them (kit/measure/validity.py)."
                ],
            )
        )
    judged = (
        ("Claims the run deviates from", "Deviation", outcomes),
        (
            "Claims where this host's GPUs deviate from the kit's expectation (not the paper's verdict)",
            "Against the expectation",
            expectations,
        ),
    )
    for caption, heading, verdicts in judged:
        deviating = [v for v in verdicts if v.verdict == "deviates"]
        if deviating:
            rows = [
                Row(
                    cells=[
                        Cell(text=v.id, tone="strong"),
                        Cell(text="; ".join(r.finding for r in v.relations if r.verdict == "deviates")),
                    ]
                )
                for v in deviating
            ]
            section.tables.append(Table(caption=caption, header=["Claim", heading], widths=[10, 90], rows=rows))
    notes = [(cid, note) for cid in selected if cid in run.results for note in run.results[cid].notes]
    if notes:
        section.tables.append(
            printed_if_short(
                Table(
                    caption="Notes the results carry",
                    header=["Case", "Note"],
                    widths=[32, 68],
                    rows=[Row(cells=[Cell(text=cid, tone="mono"), Cell(text=note)]) for cid, note in notes],
                ),
                "in each case's result.json (notes)",
            )
        )
    unselected = [case.id for case in run.info.plan.cases if case.id not in selected]
    if unselected:
        section.subsections.append(
            Section(
                anchor="not-selected",
                title="Not selected for this run",
                paragraphs=[
                    f"{len(unselected)} of the {len(run.info.plan.cases)} cases of the {run.info.profile} profile: "
                    f"{', '.join(unselected)}."
                ],
            )
        )
    section.subsections.append(
        Section(
            anchor="waivers",
            title="Waivers",
            paragraphs=["None recorded. Every failure and deviation above stands as measured."],
        )
    )
    return section


def status_counts(run: LoadedRun) -> Counter:
    statuses = Counter(run.results[cid].status if cid in run.results else "no result" for cid in run.info.selected)
    return statuses


# The run's selected cases as a reviewer counts them, each with its tone; the first five always.
TALLY_TONES: dict[str, Tone] = {
    "attempted": "plain",
    "measured": "good",
    "OOM": "warn",
    "unavailable": "muted",
    "skipped": "muted",
    "error": "bad",
    "timeout": "bad",
    "no result": "bad",
}


def case_tally(run: LoadedRun) -> dict[str, int]:
    """attempted (every selected case but those skipped or without a result), measured (ok), OOM,
    unavailable and skipped; error, timeout and no result where there are some."""
    statuses = status_counts(run)
    tally = {
        "attempted": sum(count for status, count in statuses.items() if status not in ("skipped", "no result")),
        "measured": statuses["ok"],
        "OOM": statuses["oom"],
        "unavailable": statuses["unavailable"],
        "skipped": statuses["skipped"],
    }
    return tally | {status: statuses[status] for status in ("error", "timeout", "no result") if statuses[status]}


def _best_figures(run: LoadedRun, stage: str, words: str) -> list[str]:
    """Per kind of method (kit.report.ranking), the highest throughput and the lowest peak memory of
    the stage's cases as the protocol writes them (no variant), each valid, with its model and method."""
    done = [
        r
        for c in run.info.plan.cases
        if c.stage == stage
        and c.variant is None
        and (r := run.results.get(c.id))
        and has_metrics(r, "tokens_per_s", "peak_memory_gib")
        and not run.invalid.get(c.id)
    ]
    found = []
    for kind, name in KINDS.items():
        mine = [r for r in done if method_kind(r.case) == kind]
        fast = standing(mine, "tokens_per_s")
        if fast is None:  # none of this kind
            continue
        light = min(mine, key=lambda r: metric_of(r, "peak_memory_gib").mean)
        found.append(
            f"{words.capitalize()}, {name}: the highest throughput is {method_label(fast.best.case.method)} on "
            f"{fast.best.case.model}, {mean_std(metric_of(fast.best, 'tokens_per_s'), '10^3 tokens/s')} × 10^3 tokens/s "
            f"({fast.words}); the lowest peak memory {method_label(light.case.method)} on {light.case.model}, "
            f"{mean_std(metric_of(light, 'peak_memory_gib'))} GiB."
        )
    return found


def summary_section(
    run: LoadedRun,
    outcomes: Sequence[ClaimOutcome] | None,
    stages: Sequence[Section],
    comparisons: Sequence[AbSection],
    expectations: Sequence[ClaimExpectation] = (),
) -> Section:
    """The executive summary in words, every figure taken from the data above it."""
    info, measured = run.info, run.measured
    tally = case_tally(run)
    others = [f"{count} {status}" for status, count in tally.items() if status not in ("attempted", "measured")]
    paragraphs = [
        f"Run {info.run_id} attempted {tally['attempted']} of the {len(info.selected)} cases it selected, of the "
        f"{len(info.plan.cases)} of the {info.profile} profile ({info.plan.description}), on {machine(run)}, from "
        f"{info.started_at} to {info.finished_at or 'an unrecorded end'} (UTC), with kit {info.kit.version}: "
        f"{tally['measured']} measured, " + ", ".join(others) + "."
    ]
    reasons = Counter(
        one_line_cause(r.reason)
        for r in run.results.values()
        if r.status in ("unavailable", "skipped", "error", "oom", "timeout") and r.reason
    )
    if reasons:
        paragraphs.append(
            "Why cases ended without a measurement (in one line each; the whole text under Deviations, and in "
            "each case's cases/<case>/log.txt): "
            + "; ".join(f"{reason} ({count}×)" if count > 1 else reason for reason, count in reasons.most_common())
            + "."
        )
    if run.invalid:
        paragraphs.append(
            "Marked invalid, and left out of every figure below (see Deviations): "
            + "; ".join(f"{cid}: {reasons[0]}" for cid, reasons in run.invalid.items())
            + "."
        )
    for stage, words_for in (("pretrain", "pre-training"), ("finetune", "fine-tuning")):
        paragraphs += _best_figures(run, stage, words_for)
    if outcomes is not None:
        counts = verdict_counts(o.verdict for o in outcomes)
        text = (
            f"Against the {len(outcomes)} published findings of the paper: "
            + ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
            + "."
        )
        if not measured.comparable_to_reference:
            text += (
                f" This run is not comparable to the reference (profile {info.profile}), so no claim is judged; "
                "the measured relations are shown for information only."
            )
        deviating = [o.id for o in outcomes if o.verdict == "deviates"]
        if deviating:
            text += f" Deviating: {', '.join(deviating)} (see Deviations and failures)."
        undecided = [o.id for o in outcomes if o.verdict == "inconclusive"]
        if undecided:
            text += (
                f" Inconclusive, the runs cannot decide (fewer than {MIN_RUNS} runs of a case, or a value within "
                f"its runs' spread of the bound): {', '.join(undecided)}."
            )
        against = expectation_counts(expectations)
        if any(against.values()):
            text += (
                " Of the claims about other hardware, against what the kit expects of this host's GPUs (not the "
                "paper's verdict): "
                + ", ".join(f"{count} {verdict}" for verdict, count in against.items() if count)
                + "."
            )
        paragraphs.append(text)
    else:
        paragraphs.append("The paper's published findings were not compared (no `--compare reference`).")
    idle = [s.title for s in stages if s.not_run]
    if idle:
        paragraphs.append(f"Sections without measurements, each saying why: {', '.join(idle)}.")
    paragraphs += [comparison.summary for comparison in comparisons]
    return Section(anchor="summary", title="Executive summary", paragraphs=paragraphs)
