"""The report's engine start-up section: how long each engine took from its process (or
container) started to ready and to its first token, in the run's own start and from a cold and a
warm cache (kit.serve.startup)."""

from __future__ import annotations

from kit.report.cells import devices_text
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Section, Table
from kit.report.sections.common import served_runs
from kit.rundir.serving import StartupTime
from kit.units import format_value

ANCHOR = "startup"
CACHES = {
    "first": "the run's own start (the cache as the host had it)",
    "cold": "an empty cache folder",
    "warm": "the cache the cold start filled",
}


def start_row(label: Cell, start: StartupTime) -> Row:
    first = (
        Cell(text=format_value(start.first_token_s))
        if start.first_token_s is not None
        else Cell(text="none", detail=start.error, tone="bad")
    )
    return Row(
        cells=[label, Cell(text=start.cache, detail=CACHES[start.cache]), Cell(text=format_value(start.ready_s)), first]
    )


def startup_section(run: LoadedRun) -> Section:
    title = "Engine start-up"
    paragraphs = [
        "How long a user waits on a fresh server: from the engine's process (or container) started to its health "
        "route answering, and to the first token of a first request sent as soon as it did. A cold start finds its "
        "cache folder empty (vLLM: VLLM_CACHE_ROOT, where torch.compile's output is kept, as `vllm bench sweep "
        "startup` sets it), a warm one finds what the cold start left; the model's files are in the host's page "
        "cache for both. Each start's engine.log is kept (runs/<k>/startup/<cache>/engine.log).",
    ]
    rows, notes = [], []
    for case, index, details in served_runs(run):
        startup = details.startup
        if startup is None:
            continue
        label = f"{case.model} {case.method}, {devices_text(case)}, run {index}"
        rows += [start_row(Cell(text=label, detail=case.id, tone="strong"), start) for start in startup.starts]
        if startup.unavailable:
            notes.append(f"{label}: {startup.unavailable}")
    if not rows:
        return Section(
            anchor=ANCHOR, title=title, paragraphs=paragraphs, not_run="no serve case of the run timed its start-up"
        )
    table = Table(
        caption="Start-up time per engine and model: to ready, and to the first token",
        header=["Case", "Cache", "Ready after (s)", "First token after (s)"],
        widths=[34, 30, 18, 18],
        rows=rows,
        notes=notes,
    )
    return Section(anchor=ANCHOR, title=title, paragraphs=paragraphs, tables=[table])
