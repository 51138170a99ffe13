"""The report's energy and cost: joules per token and mean power per GPU from each case's
result.json, beside its throughput and what a million tokens cost at the price given, in its
currency. One unit throughout the report: joules per token. The PDF prints the most frugal case of
each model and stage, as a table and a chart; every case is in the HTML (and the CSV export)."""

from __future__ import annotations

from kit.measure.energy import (
    ENERGY_LABELS,
    JOULES_PER_TOKEN,
    MEAN_POWER_PER_GPU,
    PRICE_HINT,
    NoReading,
    cost_metric,
    per_run_energy,
)
from kit.measure.registry import unit_of
from kit.report import charts
from kit.report.cells import devices_text, mean_std, method_label, metric_of
from kit.report.loaded_run import LoadedRun
from kit.report.model import PRINTED_ROWS, Cell, Chart, Row, Section, Table
from kit.report.sections.common import bars_note
from kit.rundir.schema import Result
from kit.units import format_value

ENERGY_UNIT = "J/token"


def price_text(gpu_hour_price: float, currency: str) -> str:
    return f"{format_value(gpu_hour_price, trim=True)} {currency} per GPU-hour"


def token_throughput(result: Result) -> str | None:
    """The case's tokens/s figure (serving: output tokens/s), the one a token's price divides."""
    unit = unit_of(result.case)
    name = unit.headline if unit else None
    metric = result.metrics.get(name) if name else None
    return name if metric is not None and metric.unit == "tokens/s" else None


def _unit_title(result: Result) -> str:
    """The title of the unit whose headline a priced result's tokens/s is (token_throughput)."""
    unit = unit_of(result.case)
    assert unit is not None  # token_throughput found the headline in it
    return unit.title


def energy_reason(result: Result) -> str:
    """Why a result has no energy figures, derived again from the samples it keeps."""
    try:
        per_run_energy(result.case, result.samples)
    except NoReading as why:
        return str(why)
    return "not in result.json (written by a kit without energy figures)"


def energy_cell(result: Result, link: str | None = None, runs: bool = True) -> Cell:
    """Joules per token with their spread (one run's said to be, where `runs`), or why there is no
    reading: never a zero."""
    metric = result.metrics.get(JOULES_PER_TOKEN)
    if metric is not None:
        return Cell(text=mean_std(metric, runs=runs), link=link)  # in the unit its column names, ENERGY_UNIT
    if result.case.device != "cuda":
        return Cell(text="none: a CPU", tone="muted", link=link)
    return Cell(text="not measured", detail=energy_reason(result), tone="muted", link=link)


def cost_cell(
    result: Result,
    throughput: str,
    gpu_hour_price: float | None,
    currency: str,
    link: str | None = None,
    runs: bool = True,
) -> Cell:
    """Cost per 1M tokens at the price given, run by run (one run's said to be, where `runs`), in
    the currency its column names; or why it is not priced (how to give a price is said once,
    under the table)."""
    if result.case.device != "cuda":
        return Cell(text="none: a CPU", tone="muted", link=link)
    if gpu_hour_price is None:
        return Cell(text="no price", tone="muted", link=link)
    return Cell(
        text=mean_std(
            cost_metric(metric_of(result, throughput), result.case.gpus, gpu_hour_price, currency), runs=runs
        ),
        link=link,
    )


def _rows(
    run: LoadedRun, priced: list[tuple[Result, str]], gpu_hour_price: float | None, currency: str, label
) -> list[Row]:
    rows = []
    for result, name in priced:
        invalid = run.invalid.get(result.case_id)
        power = result.metrics.get(MEAN_POWER_PER_GPU)
        cost = (
            Cell(text="not priced", detail=f"invalid: {invalid[0]}", tone="bad")
            if invalid
            else cost_cell(result, name, gpu_hour_price, currency)
        )
        # an invalid throughput, and the joules per token drawn from it, are no figures: said so in their place
        figures = (
            [Cell(text=f"invalid: {invalid[0]}", tone="bad"), Cell(text="invalid", tone="bad")]
            if invalid
            else [Cell(text=mean_std(metric_of(result, name))), energy_cell(result)]
        )
        rows.append(
            Row(
                cells=[
                    *label(result),
                    *figures,
                    Cell(text=mean_std(power)) if power else Cell(text="-", tone="muted"),
                    cost,
                ]
            )
        )
    return rows


def most_frugal(run: LoadedRun, priced: list[tuple[Result, str]]) -> list[tuple[Result, str]]:
    """Per stage and model, the valid case of the fewest joules per token (variants aside)."""
    best: dict[tuple[str, str | None], tuple[Result, str]] = {}
    for result, name in priced:
        energy = result.metrics.get(JOULES_PER_TOKEN)
        if energy is None or result.case.variant or run.invalid.get(result.case_id):
            continue
        key = (result.stage, result.case.model)
        if key not in best or energy.mean < metric_of(best[key][0], JOULES_PER_TOKEN).mean:
            best[key] = (result, name)
    return list(best.values())


def energy_chart(frugal: list[tuple[Result, str]]) -> Chart:
    bars = [
        charts.Bar(
            label=f"{r.case.model} {method_label(r.case.method)}",
            group=_unit_title(r),
            value=metric_of(r, JOULES_PER_TOKEN).mean,
            error=metric_of(r, JOULES_PER_TOKEN).std,
            runs=metric_of(r, JOULES_PER_TOKEN).n,
        )
        for r, _ in frugal
    ]
    return Chart(
        title="Energy per token: the most frugal case of each model and stage",
        svg=charts.bar_chart("energy", bars, ENERGY_UNIT, log=True),
        caption=f"Joules per token, on a log axis. {bars_note(bar.runs for bar in bars)}",
    )


def energy_section(run: LoadedRun, gpu_hour_price: float | None, currency: str) -> Section:
    priced = [
        (result, name)
        for result in run.results.values()
        if result.status == "ok" and (name := token_throughput(result)) is not None
    ]
    paragraphs = [
        f"{ENERGY_LABELS[JOULES_PER_TOKEN].capitalize()} ({ENERGY_UNIT}): the energy NVML's counter saw over the "
        "measured steps (serving: the burst), summed over the case's GPUs, divided by the tokens of that interval "
        f"(serving: output tokens). {ENERGY_LABELS[MEAN_POWER_PER_GPU].capitalize()}: the mean over its GPUs. Both "
        "come from each run's raw samples; where there is no reading the figures are absent and the reason is given, "
        "never a zero.",
        "Cost per 1M tokens: the case's GPUs × the price of one GPU-hour × the hours a million tokens take at the "
        "measured throughput (rental time, not electricity); a figure marked invalid is not priced. "
        + (
            f"Priced at {price_text(gpu_hour_price, currency)} (--gpu-hour-price, --currency)."
            if gpu_hour_price is not None
            else f"No price was given: {PRICE_HINT}."
        ),
    ]
    if not priced:
        return Section(
            anchor="energy",
            title="Energy and cost",
            paragraphs=paragraphs,
            not_run="no completed case measured tokens/s",
        )
    cost_header = f"Cost per 1M tokens ({currency}" + (
        f", at {price_text(gpu_hour_price, currency)})" if gpu_hour_price else ")"
    )
    header = ["Tokens/s", f"Energy ({ENERGY_UNIT})", "Mean power per GPU (W)", cost_header]
    tables, charted = [], []
    frugal = most_frugal(run, priced)
    if frugal:
        tables.append(
            Table(
                caption="The most frugal case of each model and stage",
                header=["Stage, model", "Case", *header],
                widths=[17, 23, 13, 14, 13, 20],
                rows=_rows(
                    run,
                    frugal,
                    gpu_hour_price,
                    currency,
                    lambda r: [
                        Cell(text=f"{_unit_title(r)}, {r.case.model}" if r.case.model else _unit_title(r)),
                        Cell(
                            text=f"{method_label(r.case.method)}, {devices_text(r.case)}", detail=r.case_id, tone="mono"
                        ),
                    ],
                ),
                notes=[
                    "The case of the fewest joules per token among each model's cases of a stage that measured energy "
                    "(variants and invalid figures aside); every case is in the table after it."
                ],
            )
        )
        charted.append(energy_chart(frugal))
    else:
        paragraphs.append(
            f"No case measured energy ({energy_reason(priced[0][0])}): every case's row is in the HTML report."
        )
    every = Table(
        caption="Energy and cost per case",
        header=["Case", *header],
        widths=[30, 14, 14, 16, 26],
        dense=True,
        rows=_rows(
            run, priced, gpu_hour_price, currency, lambda r: [Cell(text=r.case_id, tone="mono", detail=r.case.fitted)]
        ),
    )
    # every case's energy and cost is what a buyer prices: printed, as aligned lines where it is long
    tables.append(
        every.model_copy(update={"print_as_listing": len(every.rows) > PRINTED_ROWS})
        if frugal
        else every.model_copy(update={"media": "screen"})
    )
    return Section(anchor="energy", title="Energy and cost", paragraphs=paragraphs, tables=tables, charts=charted)
