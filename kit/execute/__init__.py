"""Executors: where a case's runs happen (this Python, or its pinned container).

An executor knows how to launch one independent run of a case and collect what its processes
wrote (`run_once`); what a run means (status, metrics) is decided once, in `samples` and
`kit.metrics`, so a case is judged the same way wherever it ran.
"""

from __future__ import annotations

from types import ModuleType

from kit.protocol import Case

EXECUTORS = ("local",)


def choose(case: Case, requested: str | None = None) -> ModuleType:
    """The executor module for a case: the one asked for, else the best available here."""
    from kit.execute import local

    if requested not in (None, "local"):
        raise ValueError(f"unknown executor {requested!r} (known: {', '.join(EXECUTORS)})")
    return local
