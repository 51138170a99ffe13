"""The report's shared-prefix section: the multi-turn chat workload with the engine's prefix cache
on and off (kit.serve.prefix), the share of prompt tokens the engine found cached (its own
counters) beside the latencies the cache saved."""

from __future__ import annotations

from kit.report.cells import devices_text
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Section, Table
from kit.report.sections.common import served_runs
from kit.rundir.serving import PrefixRunDetails
from kit.units import format_value

ANCHOR = "prefix-cache"


def run_row(label: Cell, run: PrefixRunDetails) -> Row:
    figures = run.aggregates
    rate = run.cache.hit_rate
    return Row(
        cells=[
            label,
            Cell(text="on" if run.caching else "off"),
            Cell(text=f"{run.conversations} × {run.turns}"),
            Cell(text=str(figures.completed)),
            Cell(
                text=f"{rate:.1%}" if rate is not None else "unknown",
                detail=run.cache.unavailable
                or f"{format_value(run.cache.hit_tokens or 0)} of {format_value(run.cache.queried_tokens or 0)} tokens",
            ),
            Cell(text=format_value(figures.ttft_s.median) if figures.ttft_s else "none finished"),
            Cell(text=format_value(figures.ttft_s.p99) if figures.ttft_s else "none finished"),
            Cell(text=format_value(figures.output_throughput)),
        ]
    )


def prefix_section(run: LoadedRun) -> Section:
    title = "Shared prefixes and the prefix cache"
    paragraphs = [
        "A multi-turn chat workload: conversations at once, each sending its next turn when the previous one "
        "ended; every prompt starts with the same system prefix and resends the conversation so far (the kit's own "
        "text for earlier answers). With the engine's prefix cache on (the run's engine) and off (a second start of "
        "the engine, vLLM's --no-enable-prefix-caching). Hit rate: the prompt tokens the engine found in its cache "
        "over those it looked up, from its own counters (vLLM: vllm:prefix_cache_hits_total over "
        "vllm:prefix_cache_queries_total) read before and after the workload. Rows: runs/<k>/prefix/<on|off>/.",
    ]
    rows, notes = [], []
    for case, index, details in served_runs(run):
        prefix = details.prefix
        if prefix is None:
            continue
        label = f"{case.model} {case.method}, {devices_text(case)}, run {index}"
        cell = Cell(
            text=label,
            detail=f"prefix {prefix.shared_tokens}, turns of {prefix.turn_tokens} + answers of {prefix.answer_tokens} tokens",
            tone="strong",
        )
        rows += [run_row(cell, side) for side in (prefix.on, prefix.off) if side is not None]
        if prefix.off_unavailable:
            notes.append(f"{label}: caching off not measured: {prefix.off_unavailable}")
    if not rows:
        return Section(
            anchor=ANCHOR, title=title, paragraphs=paragraphs, not_run="no serve case of the run sent shared prefixes"
        )
    table = Table(
        caption="The shared-prefix workload with the prefix cache on and off",
        header=[
            "Case",
            "prefix cache",
            "conversations × turns",
            "finished",
            "cache hit rate",
            "TTFT median (s)",
            "TTFT p99 (s)",
            "output tokens/s",
        ],
        widths=[26, 9, 11, 8, 16, 10, 10, 10],
        rows=rows,
        notes=notes,
    )
    return Section(anchor=ANCHOR, title=title, paragraphs=paragraphs, tables=[table])
