"""The plan as aligned plain text, for `kit list` and `kit run --dry-run`.

Plain columns read the same in a terminal, a pipe and a CI log, and cost nothing to print: a
table drawn with rich took a third of a second for the paper profile's 133 cases and folded
its columns into unreadable stubs when piped (80 columns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `kit list` passes the cases as read from the plan cache (kit.plan_cache)
    from kit.protocol import Case


def plan_text(title: str, cases: list[Case], finished: set[str] = frozenset(), on_host: dict[str, str] | None = None,
              estimates: dict | None = None) -> str:
    """The cases, one per line; with `finished`, which are done; with `on_host`, each case this
    host cannot run says why (skipped: ...); with `estimates`, how long each will take."""
    if estimates:
        from kit.estimate import duration_text  # pydantic's models: only where a case has an estimate
    header = ["case", "model", "method", "GPUs", "runs", "steps (warm-up + measured)"]
    header += ["state"] * bool(finished) + ["on this host"] * (on_host is not None) + ["estimated"] * (estimates is not None)
    rows = []
    for case in cases:
        steps = getattr(case.params, "measured_steps", None)
        row = [case.id, case.model or "-", case.method, str(case.gpus), str(case.params.runs),
               f"{case.params.warmup_steps} + {steps}" if steps is not None else "-"]  # fmt: skip
        if finished:
            row.append("done" if case.id in finished else "to run")
        if on_host is not None:
            row.append(f"skipped: {on_host[case.id]}" if case.id in on_host else "runs")
        if estimates is not None:
            row.append(duration_text(estimates[case.id].seconds) if case.id in estimates else "-")
        rows.append(row)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    return "\n".join([title, *lines])
