"""A section that sets cases of one or more stages side by side (kit/report/sections/megatron.py,
kit/report/sections/variants.py), apart from the stages' own sections."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kit.plan.protocol import Case, Protocol
from kit.report.model import Section

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun


@dataclass(frozen=True)
class Comparison:
    """Cases of one or more stages side by side (one engine beside another, a variant beside its
    twin); shown when the run's plan has a case it selects."""

    name: str
    title: str
    cases: Callable[[Case], bool]
    section: Callable[[Comparison, LoadedRun, Protocol], Section]
