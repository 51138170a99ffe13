"""How the CLI shows things on a terminal: plan tables, live progress, the run summary."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kit import runner
from kit.protocol import Case
from kit.results import Result

console = Console(stderr=True)
STATUS_STYLE = {"ok": "green", "oom": "yellow", "unavailable": "cyan", "skipped": "dim", "error": "red", "timeout": "red"}


def plan_table(title: str, cases: list[Case], finished: set[str] = frozenset()) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("case", no_wrap=True)
    for column in ("model", "method", "GPUs", "runs", "steps (warm-up + measured)"):
        table.add_column(column)
    if finished:
        table.add_column("state")
    for case in cases:
        steps = getattr(case.params, "measured_steps", None)
        row = [
            case.id,
            case.model or "-",
            case.method,
            str(case.gpus),
            str(case.params.runs),
            f"{case.params.warmup_steps} + {steps}" if steps is not None else "-",
        ]
        if finished:
            row.append("done" if case.id in finished else "to run")
        table.add_row(*row)
    return table


def figure(result: Result, name: str, scale: float = 1.0, digits: int = 1) -> str:
    metric = result.metrics.get(name)
    if metric is None:
        return "-"
    text = f"{metric.mean * scale:.{digits}f}"
    return text + (f" ± {metric.std * scale:.{digits}f}" if metric.std is not None else "")


def summary_table(results: list[Result]) -> Table:
    table = Table(title="Results", title_justify="left")
    table.add_column("case", no_wrap=True)
    for column in ("status", "tokens/s (mean ± std)", "peak memory GiB", "runs"):
        table.add_column(column, no_wrap=True)
    table.add_column("reason", max_width=60)
    for result in results:
        style = STATUS_STYLE.get(result.status, "")
        table.add_row(
            result.case_id,
            f"[{style}]{result.status}[/]",
            figure(result, "tokens_per_s"),
            figure(result, "peak_memory_gib", digits=2),
            str(len(result.samples)),
            (result.reason or "")[:90],
        )
    return table


class RichProgress(runner.Progress):
    """A live bar: which case, which run of it, how many cases left, time elapsed."""

    def __init__(self, total: int, already_done: int):
        self.started = time.monotonic()
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("cases"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.task = self.bar.add_task("starting", total=total, completed=already_done)

    def __enter__(self):
        self.bar.start()
        return self

    def __exit__(self, *exc):
        self.bar.stop()

    def case_started(self, case: Case, position: int, total: int) -> None:
        self.bar.update(self.task, description=case.id)

    def run_started(self, case: Case, index: int, runs: int) -> None:
        self.bar.update(self.task, description=f"{case.id} (run {index}/{runs})")

    def case_finished(self, result: Result, position: int, total: int) -> None:
        style = STATUS_STYLE.get(result.status, "")
        tokens = figure(result, "tokens_per_s")
        detail = f"{tokens} tokens/s" if result.status == "ok" else (result.reason or "")[:100]
        self.bar.console.print(f"[{style}]{result.status:>11}[/]  {result.case_id}  {detail}")
        self.bar.update(self.task, completed=position)
