"""The report's numbers for spreadsheets: every claim verdict and every case's metrics, with units.

report.json holds all of it in one document, with each serving sweep's points held to the latency
objectives given (and those objectives); the CSV export is two flat tables, since a
spreadsheet wants one kind of row per sheet:
    report-claims.csv   one row per relation of each claim (the claim's verdict repeated), with
                        what its numbers alone say (judged: consistent, deviates or inconclusive,
                        also where the verdict is not applicable), the value expected on this
                        host's GPUs and the verdict against it
    report-metrics.csv  one row per metric of each case; a case without metrics gets one row
                        with its status and reason
Cost per 1M tokens (kit.measure.energy) is a row like the others where a GPU-hour price was given, in
the currency report.json names, and never of a case whose figures are invalid (kit.measure.validity:
report.json lists why, and each of its metric rows says so).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

from kit import __version__
from kit.measure.energy import COST_PER_MILLION_TOKENS, DEFAULT_CURRENCY, cost_metric
from kit.measure.slo import DEFAULT_SLO, PERCENTILE, Slo, capacity
from kit.measure.validity import invalid_reasons
from kit.report.build import Assessment
from kit.report.cells import metric_of
from kit.report.loaded_run import LoadedRun
from kit.report.sections.capacity import sweep_capacities
from kit.report.sections.energy import token_throughput
from kit.report.sections.rates import rate_searches
from kit.rundir.schema import Metric, Result

CLAIM_COLUMNS = [
    "claim",
    "statement",
    "claim_verdict",
    "claim_reason",
    "relation",
    "verdict",
    "judged",
    "published",
    "measured",
    "finding",
    "readings",
    "caveats",
    "expected_on_this_host",
    "expected_basis",
    "verdict_vs_expectation",
    "finding_vs_expectation",
]
METRIC_COLUMNS = ["case", "stage", "device", "gpus", "status", "metric", "mean", "std", "n", "unit", "per_run", "note"]


def case_metrics(result: Result, gpu_hour_price: float | None, currency: str = DEFAULT_CURRENCY) -> dict[str, Metric]:
    """A result's metrics, and its cost per 1M tokens in `currency` where a price was given, it ran
    on GPUs and its figures are valid (kit.measure.validity)."""
    found = {name: metric for name, metric in result.metrics.items() if metric is not None}
    throughput = token_throughput(result) if result.status == "ok" else None
    if (
        gpu_hour_price is not None
        and throughput is not None
        and result.case.device == "cuda"
        and not invalid_reasons(result)
    ):
        found[COST_PER_MILLION_TOKENS] = cost_metric(
            metric_of(result, throughput), result.case.gpus, gpu_hour_price, currency
        )
    return found


def sweep_document(run: LoadedRun, slo: Slo) -> dict:
    """Each serve case's sweep held to the objectives (kit.report.sections.capacity): every point's
    figures, and the capacity; a latency that is a failed request (never answered) is null."""
    found = {}
    for case_id, points in sweep_capacities(run, slo).items():
        best = capacity(points)
        found[case_id] = {
            "capacity_concurrency": best.concurrency if best else None,
            "points": [json.loads(point.model_dump_json()) for point in points],
        }
    return found


def export_document(
    assessment: Assessment, gpu_hour_price: float | None, currency: str = DEFAULT_CURRENCY, slo: Slo = DEFAULT_SLO
) -> dict:
    run = assessment.run
    return {
        "run_id": run.info.run_id,
        "profile": run.info.profile,
        "comparable_to_reference": run.info.plan.comparable_to_reference,
        "evidence_digest": run.evidence_digest,
        "exported_by": f"kit {__version__}",
        "gpu_hour_price": gpu_hour_price,
        "currency": currency,
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "percentile": PERCENTILE, "described": slo.describe()},
        "sweeps": sweep_document(run, slo),
        "rate_searches": [
            {"case": case.id, "run": index, **search.model_dump(mode="json")}
            for case, index, search in rate_searches(run)
        ],
        "claims": None
        if assessment.outcomes is None
        else [
            {**outcome.model_dump(mode="json"), "expectation": _expectation(assessment, outcome.id)}
            for outcome in assessment.outcomes
        ],
        "tables": [t.model_dump(mode="json") for t in assessment.tables],
        "acceptance": None if assessment.acceptance is None else assessment.acceptance.decision.model_dump(mode="json"),
        "cases": [
            {
                "case": result.case_id,
                "stage": result.stage,
                "device": result.case.device,
                "gpus": result.case.gpus,
                "status": result.status,
                "reason": result.reason,
                "metrics": {
                    name: metric.model_dump(mode="json")
                    for name, metric in case_metrics(result, gpu_hour_price, currency).items()
                },
                "invalid": run.invalid.get(result.case_id, []),
                "notes": result.notes,
            }
            for result in run.results.values()
        ],
    }


def export_json(
    assessment: Assessment, gpu_hour_price: float | None, currency: str = DEFAULT_CURRENCY, slo: Slo = DEFAULT_SLO
) -> str:
    return json.dumps(export_document(assessment, gpu_hour_price, currency, slo), indent=2) + "\n"


def _expectation(assessment: Assessment, claim_id: str) -> dict | None:
    """The claim's value expected on this host's GPUs (kit.reference.expectation), as JSON."""
    found = next((e for e in assessment.expectations or () if e.id == claim_id), None)
    return None if found is None else found.model_dump(mode="json")


def claim_rows(assessment: Assessment) -> Iterator[dict]:
    for claim in assessment.outcomes or []:
        expectation = _expectation(assessment, claim.id)
        for index, relation in enumerate(claim.relations):
            expected = expectation["relations"][index] if expectation else None
            yield {
                "claim": claim.id,
                "statement": claim.statement,
                "claim_verdict": claim.verdict,
                "claim_reason": claim.reason,
                "relation": relation.relation,
                "verdict": relation.verdict,
                "judged": relation.judged or "",
                "published": relation.published,
                "measured": relation.measured or "",
                "finding": relation.finding,
                "readings": "; ".join(f"{r.label}: {r.verdict}" for r in relation.readings),
                "caveats": "; ".join(relation.caveats),
                **(
                    {
                        "expected_on_this_host": expected["expected"] or "",
                        "expected_basis": expected["basis"],
                        "verdict_vs_expectation": expected["verdict"],
                        "finding_vs_expectation": expected["finding"],
                    }
                    if expected
                    else {}
                ),
            }


def metric_rows(assessment: Assessment, gpu_hour_price: float | None, currency: str) -> Iterator[dict]:
    for result in assessment.run.results.values():
        case = {
            "case": result.case_id,
            "stage": result.stage,
            "device": result.case.device,
            "gpus": result.case.gpus,
            "status": result.status,
        }
        found = case_metrics(result, gpu_hour_price, currency)
        if not found:
            yield {**case, "note": result.reason or "; ".join(result.notes)}
        invalid = assessment.run.invalid.get(result.case_id)
        for name, metric in found.items():
            yield {
                **case,
                "metric": name,
                "mean": metric.mean,
                "std": "" if metric.std is None else metric.std,
                "n": metric.n,
                "unit": metric.unit,
                "per_run": ";".join(repr(value) for value in metric.per_run),
                "note": f"invalid: {'; '.join(invalid)}" if invalid else "",
            }


def csv_text(columns: list[str], rows: Iterator[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def export_csv(
    assessment: Assessment, gpu_hour_price: float | None, currency: str = DEFAULT_CURRENCY
) -> tuple[str, str]:
    """(report-claims.csv, report-metrics.csv)."""
    return (
        csv_text(CLAIM_COLUMNS, claim_rows(assessment)),
        csv_text(METRIC_COLUMNS, metric_rows(assessment, gpu_hour_price, currency)),
    )
