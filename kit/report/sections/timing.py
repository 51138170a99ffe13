"""Before and during the run: what the preflight checked, and how long each case took beside
the estimate made before it started (run.json keeps both), so the next plan's ETA can be judged."""

from __future__ import annotations

from datetime import datetime

from kit.plan.view import duration_text
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Section, Table
from kit.rundir.schema import Preflight, Result


def actual_seconds(result: Result) -> float:
    """result.json's span: from the case's start to its result, every run and the teardown included."""
    return (datetime.fromisoformat(result.finished_at) - datetime.fromisoformat(result.started_at)).total_seconds()


def _preflight_table(preflight: Preflight) -> Table:
    return Table(
        caption=f"Preflight before the first case ({preflight.seconds:.0f} s): each image checked by a miniature of its stages",
        header=["Image", "Check", "Result", "Detail"],
        widths=[14, 30, 8, 48],
        rows=[
            Row(
                cells=[
                    Cell(text=line.image),
                    Cell(text=line.check),
                    Cell(text=line.status, tone="good" if line.status == "ok" else "bad"),
                    Cell(text=line.detail + (f" (what to do: {line.hint})" if line.hint else "")),
                ]
            )
            for line in preflight.lines
        ],
    )


def _durations_tables(run: LoadedRun) -> list[Table]:
    """Per stage (printed) and per case (HTML only: 133 rows would add pages no one reads)."""
    estimates = run.info.estimates
    rows: list[Row] = []
    per_stage: dict[str, dict[str, float]] = {}  # by stage: its counts of cases and its seconds
    stepped_back: list[str] = []  # cases whose recorded end is before their start
    for case_id, result in run.results.items():
        estimate = estimates.get(case_id)
        stage = per_stage.setdefault(
            result.stage, {"cases": 0, "skipped": 0, "actual": 0.0, "estimated": 0.0, "estimated_actual": 0.0}
        )
        if result.status == "skipped":  # it took no time, and its estimate was never spent
            stage["skipped"] += 1
            rows.append(
                Row(
                    cells=[Cell(text=case_id), Cell(text=result.status), Cell(text="-"), Cell(text="-"), Cell(text="-")]
                )
            )
            continue
        actual = actual_seconds(result)
        stage["cases"] += 1
        if actual < 0:  # the host's clock was set back while it ran: its span measures nothing
            stepped_back.append(case_id)
            rows.append(
                Row(
                    cells=[
                        Cell(text=case_id),
                        Cell(text=result.status),
                        Cell(text=duration_text(estimate.seconds) if estimate else "not estimated"),
                        Cell(text=f"clock set back ({duration_text(-actual)})", tone="warn"),
                        Cell(text="-"),
                    ]
                )
            )
            continue
        stage["actual"] += actual
        ratio = "-"
        if estimate is not None and estimate.seconds:
            ratio = f"{actual / estimate.seconds:.2f}"
            stage["estimated"] += estimate.seconds
            stage["estimated_actual"] += actual
        rows.append(
            Row(
                cells=[
                    Cell(text=case_id),
                    Cell(text=result.status),
                    Cell(
                        text=duration_text(estimate.seconds) if estimate else "not estimated",
                        detail=estimate.basis if estimate else None,
                    ),
                    Cell(text=duration_text(actual)),
                    Cell(text=ratio),
                ]
            )
        )

    def ratio_of(figures) -> str:
        return f"{figures['estimated_actual'] / figures['estimated']:.2f}" if figures["estimated"] else "-"

    total = {
        key: sum(figures[key] for figures in per_stage.values())
        for key in ("cases", "skipped", "actual", "estimated", "estimated_actual")
    }
    summary = [
        Row(
            cells=[
                Cell(text=name),
                Cell(text=str(figures["cases"]) + (f" ({figures['skipped']} skipped)" if figures["skipped"] else "")),
                Cell(text=duration_text(figures["estimated"]) if figures["estimated"] else "not estimated"),
                Cell(text=duration_text(figures["actual"])),
                Cell(text=ratio_of(figures)),
            ]
        )
        for name, figures in [*per_stage.items(), ("all stages", total)]
    ]
    notes = [
        "Actual: from a case's start to its result (every run, the launches and the teardown). Estimated: made "
        "before the run, from earlier runs of the same case where the run history had them, else from the "
        "analytic model on a GPU. The ratio is over the cases that had an estimate. A skipped case took no time "
        "and counts in neither."
    ]
    if stepped_back:
        notes.append(
            f"The host's clock was set back while {len(stepped_back)} case(s) ran ({', '.join(stepped_back[:5])}"
            + (" and more" if len(stepped_back) > 5 else "")
            + "): each ends, by the clock, before it started, so it has no actual duration and counts in no sum."
        )
    return [
        Table(
            caption="Duration by stage: estimated before the run, and actual",
            header=["Stage", "Cases", "Estimated", "Actual", "Actual / estimated"],
            widths=[24, 16, 20, 20, 20],
            rows=summary,
            notes=notes,
        ),
        Table(
            caption="Duration of each case: estimated before the run (and on what), and actual",
            header=["Case", "Status", "Estimated", "Actual", "Actual / estimated"],
            widths=[40, 10, 20, 15, 15],
            rows=rows,
            dense=True,
            media="screen",
        ),
    ]


def timing_section(run: LoadedRun) -> Section:
    section = Section(anchor="preflight-and-time", title="Preflight and time")
    info = run.info
    if info.preflight is not None:
        section.tables.append(_preflight_table(info.preflight))
    else:
        section.paragraphs.append(
            "No preflight ran: the run was started with --no-preflight."
            if info.no_preflight
            else "No preflight is recorded in run.json (a run started by a kit before the preflight existed)."
        )
    if run.results:
        section.tables += _durations_tables(run)
    return section
