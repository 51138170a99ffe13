"""The report's energy and cost section: joules per token and mean power per GPU from each
case's result.json, beside its throughput and what a million tokens cost at the price given."""

from __future__ import annotations

from kit.energy import (
    ENERGY_LABELS,
    JOULES_PER_TOKEN,
    MEAN_POWER_PER_GPU,
    PRICE_HINT,
    NoReading,
    cost_metric,
    per_run_energy,
)
from kit.reference import format_value
from kit.report.cells import mean_std
from kit.report.load import LoadedRun
from kit.report.model import Cell, Row, Section, Table, printed_if_short
from kit.results import Result
from kit.stages import unit_of



def price_text(gpu_hour_price: float) -> str:
    return f"{format_value(gpu_hour_price, trim=True)} per GPU-hour"


def token_throughput(result: Result) -> str | None:
    """The case's tokens/s figure (serving: output tokens/s), the one a token's price divides."""
    unit = unit_of(result.case)
    name = unit.headline if unit else None
    metric = result.metrics.get(name) if name else None
    return name if metric is not None and metric.unit == "tokens/s" else None


def cost_cell(result: Result, throughput: str, gpu_hour_price: float | None) -> Cell:
    if result.case.device != "cuda":
        return Cell(text="not priced", detail="the case runs on the CPU: no GPU-hours", tone="muted")
    if gpu_hour_price is None:
        return Cell(text="no price given", detail=PRICE_HINT, tone="muted")
    cost = cost_metric(result.metrics[throughput], result.case.gpus, gpu_hour_price)
    return Cell(text=mean_std(cost), detail=f"at {price_text(gpu_hour_price)}, {result.case.gpus} GPUs")


def energy_cells(result: Result) -> list[Cell]:
    """The two energy figures, or one cell across both saying why they are absent (the reason
    is derived again from the samples result.json keeps, not read back from its notes)."""
    if all(result.metrics.get(name) for name in (JOULES_PER_TOKEN, MEAN_POWER_PER_GPU)):
        return [Cell(text=mean_std(result.metrics[name])) for name in (JOULES_PER_TOKEN, MEAN_POWER_PER_GPU)]
    try:
        per_run_energy(result.case, result.samples)
        reason = "not in result.json (written by a kit without energy figures)"
    except NoReading as why:
        reason = str(why)
    return [Cell(text="absent", detail=reason, tone="muted", colspan=2)]


def energy_section(run: LoadedRun, gpu_hour_price: float | None) -> Section:
    priced = [(result, name) for result in run.results.values() if result.status == "ok"
              and (name := token_throughput(result)) is not None]  # fmt: skip
    paragraphs = [
        f"{ENERGY_LABELS[JOULES_PER_TOKEN].capitalize()}: the energy NVML's counter saw over the measured steps "
        "(serving: the burst), summed over the case's GPUs, divided by the tokens of that interval (serving: "
        f"output tokens). {ENERGY_LABELS[MEAN_POWER_PER_GPU].capitalize()}: the mean over its GPUs. Both come from "
        "each run's raw samples; where there is no reading the figures are absent and the reason is given, never a zero.",
        "Cost per 1M tokens: the case's GPUs × the price of one GPU-hour × the hours a million tokens take at the "
        "measured throughput (rental time, not electricity). "
        + (f"Priced at {price_text(gpu_hour_price)} (--gpu-hour-price)." if gpu_hour_price is not None
           else f"No price was given: {PRICE_HINT}."),  # fmt: skip
    ]
    if not priced:
        return Section(anchor="energy", title="Energy and cost", paragraphs=paragraphs,
                       not_run="no completed case measured tokens/s")  # fmt: skip
    rows = [
        Row(cells=[Cell(text=result.case_id, tone="mono", detail=result.case.fitted), Cell(text=mean_std(result.metrics[name])),
                   *energy_cells(result), cost_cell(result, name, gpu_hour_price)])  # fmt: skip
        for result, name in priced
    ]
    table = printed_if_short(Table(
        caption="Energy and cost per case",
        header=["Case", "Tokens/s", "Joules per token", "Mean power per GPU (W)",
                "Cost per 1M tokens" + (f" ({price_text(gpu_hour_price)})" if gpu_hour_price is not None else "")],
        widths=[30, 16, 16, 16, 22], rows=rows, dense=True,
    ), "in `kit report --format csv`")  # fmt: skip
    return Section(anchor="energy", title="Energy and cost", paragraphs=paragraphs, tables=[table])
