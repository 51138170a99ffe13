"""The training sections, pre-training and fine-tuning: the paper's table layout of configurations x
models, the options each case had in effect, and the throughput and memory charts (figures:
kit.measure.training)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.measure.unit import StageUnit
from kit.plan.protocol import Case, Protocol
from kit.report import charts
from kit.report.cells import devices_text, method_label, metric_cell, status_cell
from kit.report.model import (
    Cell,
    Chart,
    HeaderGroup,
    Row,
    Section,
    Table,
    printed_if_short,
)
from kit.report.sections.common import (
    bars_note,
    case_bar,
    gpu_capacity,
    memory_source,
    runs_note,
    stage_cases,
)
from kit.rundir.schema import Result

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun


def train_matrix(stage: StageUnit, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """The paper's table layout: configurations x models, throughput and peak memory."""
    title = stage.title
    section = Section(anchor=stage.name, title=title)
    cases = stage_cases(run, stage.name)
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        groups.setdefault((case.gpus, case.micro_batch, case.step.seq_len if case.step else None), []).append(case)
    stage_results = [run.results[c.id] for c in cases if c.id in run.results]
    for (_, batch, seq_len), members in groups.items():
        models = list(dict.fromkeys(case.model for case in members))
        methods = list(dict.fromkeys(case.method for case in members))
        by_key = {(case.model, case.method): case for case in members}
        rows = []
        for method in methods:
            cells = [Cell(text=method_label(method), tone="strong")]
            for model in models:
                cell_case = by_key.get((model, method))
                if cell_case is None:
                    cells.append(Cell(text="not in the protocol", tone="muted", colspan=2))
                    continue
                result = run.results.get(cell_case.id)
                if result is not None and result.status == "ok":
                    invalid = {"detail": "invalid", "tone": "bad"} if run.invalid.get(cell_case.id) else {}
                    cells.append(metric_cell(result, "tokens_per_s", "10^3 tokens/s").model_copy(update=invalid))
                    cells.append(metric_cell(result, "peak_memory_gib"))
                elif result is not None and result.status == "oom":
                    cells += [Cell(text="-", tone="warn"), Cell(text="-", tone="warn")]
                else:
                    cells.append(status_cell(result, cell_case.id in run.info.selected, colspan=2))
            rows.append(Row(cells=cells))
        section.tables.append(
            Table(
                caption=f"{title}: {devices_text(members[0])}, micro-batch {batch}, sequence {seq_len} tokens",
                header=["Method"] + ["10^3 tokens/s", "peak memory (GiB)"] * len(models),
                widths=[16] + [round(84 / (2 * len(models)))] * (2 * len(models)),
                groups=[HeaderGroup(label="", span=1)] + [HeaderGroup(label=model or "", span=2) for model in models],
                rows=rows,
                notes=[
                    runs_note(stage_results) + " Throughput is summed over all processes.",
                    memory_source(stage_results),
                    "- : out of memory (OOM), a result as in the paper. unavailable, skipped, error, timeout: "
                    "see Deviations and failures. not run: in the profile, not selected for this run. invalid: past "
                    "its physical bound, not a measurement (see Deviations and failures).",
                ],
            )
        )
    effective = effective_table(title, stage_results)
    if effective is not None:
        section.tables.append(effective)
    section.charts += training_charts(stage, run, cases)
    return section


def training_charts(stage: StageUnit, run: LoadedRun, cases: list[Case]) -> list[Chart]:
    """Throughput and peak memory by method, one panel per model (each on its own scale), a mark
    where a case ran out of memory or failed; memory against the GPU's capacity."""
    selected = [case for case in cases if case.id in run.info.selected]
    throughput = [bar for case in selected if (bar := case_bar(run, case, "tokens_per_s", 1e-3))]
    if not any(bar.value is not None for bar in throughput):
        return []
    marks = "; a mark in the place of a case that ran out of memory (OOM) or failed, hatched where a figure is invalid"
    found = [
        Chart(
            title=f"{stage.title} throughput by method",
            svg=charts.bar_chart(f"{stage.name}-throughput", throughput, "10^3 tokens/s", panels=True),
            caption=f"One panel per model, each on its own scale{marks}. {bars_note(b.runs for b in throughput if b.value)}",
        )
    ]
    capacity = gpu_capacity(run)
    if capacity is not None:
        memory = [bar for case in selected if (bar := case_bar(run, case, "peak_memory_gib"))]
        found.append(
            Chart(
                title=f"{stage.title}: peak memory against the GPU's capacity",
                svg=charts.bar_chart(f"{stage.name}-memory", memory, "GiB per GPU", panels=True, limit=capacity),
                caption=f"The allocator's peak per GPU (the largest over the processes), the dashed line the GPU's "
                f"memory{marks}. {bars_note(b.runs for b in memory if b.value)}",
            )
        )
    return found


MEMORY_VIEWS = (
    ("peak_memory_gib", "allocated"),
    ("peak_reserved_gib", "reserved"),
    ("peak_device_used_gib", "device used (NVML)"),
)


def effective_table(title: str, results: list[Result]) -> Table | None:
    """Beside each result, what the running engine reported of every option its method names,
    and peak memory in each view the run recorded, each labelled for what it is."""
    shown = [result for result in results if result.effective or result.status == "ok"]
    if not shown:
        return None
    rows = []
    for result in shown:
        options = [
            Cell(
                text=f"{name}: {option.observed}",
                detail=f"requested {option.requested}; {option.evidence}",
                tone="good" if option.in_effect else "bad",
            )
            for name, option in result.effective.items()
        ] or [Cell(text="no option to prove (the method names none)", tone="muted")]
        memory = [
            metric_cell(result, name) if result.metrics.get(name) else Cell(text="not recorded", tone="muted")
            for name, _ in MEMORY_VIEWS
        ]
        case = Cell(text=f"{result.case.model} {method_label(result.case.method)}", detail=result.status)
        rows.append(Row(cells=[case, options[0], *memory]))
        rows += [Row(cells=[Cell(text=""), option, *[Cell(text="")] * len(MEMORY_VIEWS)]) for option in options[1:]]
    return printed_if_short(
        Table(
            caption=f"{title}: each option in effect, as the running engine reported it, and peak memory (GiB)",
            header=["Case", "Option: observed", *[label for _, label in MEMORY_VIEWS]],
            widths=[18, 46, 12, 12, 12],
            rows=rows,
            dense=True,
            notes=[
                "A case whose requested option was not in effect ends error, never ok (the option in red).",
                "allocated: the framework allocator's peak (torch max_memory_allocated), or the host's peak RSS on a CPU; "
                "reserved: what the allocator held from the GPU, cached blocks included (max_memory_reserved); "
                "device used: the GPU's used memory sampled from NVML during the measured steps, the CUDA context and "
                "every other allocation included, the figure a GPU is sized by. Each is the largest over the processes.",
            ],
        ),
        "in each case's result.json (effective)",
    )
