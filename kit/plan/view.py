"""The plan as aligned plain text, for `kit list` and `kit run --dry-run`, and the words its
cells are made of wherever else they are shown (durations, fitted cases).

Plain columns read the same in a terminal, a pipe and a CI log, and cost nothing to print: a
table drawn with rich took a third of a second for the paper profile's 133 cases and folded
its columns into unreadable stubs when piped (80 columns).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any


def duration_text(seconds: float | None) -> str:
    """ "1 h 05 min", "3 min 07 s", "42 s"; "?" for a duration not known."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def fitted_label(gpus: int, fitted_from: int | None) -> str | None:
    """How a case fitted to a host of fewer GPUs than the protocol writes is labelled wherever it
    is shown ("fitted: 1 of 8 GPUs"); None for a case as written."""
    return None if fitted_from is None else f"fitted: {gpus} of {fitted_from} GPUs"


def plan_text(
    title: str,
    cases: Sequence[Any],
    finished: Set[str] = frozenset(),
    on_host: dict[str, str] | None = None,
    estimates: dict | None = None,
) -> str:
    """The cases (kit.plan.protocol.Case, or the plan cache's views of them: kit.plan.plan_cache.case_view),
    one per line; with `finished`, which are done; with `on_host`, what each will do on this
    host ("runs", "skipped: ...", "predicted OOM: ..."); with `estimates`, how long each will take."""
    header = ["case", "model", "method", "GPUs", "runs", "steps (warm-up + measured)"]
    header += (
        ["state"] * bool(finished) + ["on this host"] * (on_host is not None) + ["estimated"] * (estimates is not None)
    )
    rows = []
    for case in cases:
        steps = case.step.measured_steps if case.step else None
        soak = case.soak
        fitted = fitted_label(case.gpus, getattr(case, "fitted_from", None))
        measured = f"{case.params.warmup_steps} + {steps}" if steps is not None else "-"
        row = [
            case.id,
            case.model or "-",
            case.method,
            f"{case.gpus} ({fitted})" if fitted else str(case.gpus),
            str(case.params.runs),
            f"on end for {soak.seconds:g} s" if soak is not None else measured,
        ]
        if finished:
            row.append("done" if case.id in finished else "to run")
        if on_host is not None:
            row.append(on_host[case.id])
        if estimates is not None:
            row.append(duration_text(estimates[case.id].seconds) if case.id in estimates else "-")
        rows.append(row)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    return "\n".join([title, *lines])
