"""The engine's own counters, read from its Prometheus `/metrics` page before and after a burst.

The client counts tokens as they stream in; the engine counts what it generated. Both must
agree, or the burst measured something other than what the rows say (lost events, requests the
engine served twice, another client). Only the text exposition format is read
(prometheus.io/docs/instrumenting/exposition_formats): `name{label="v",...} value`, comments
and blank lines skipped.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of an exposition page: (metric name, labels, value)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        samples.append((name, dict(LABEL.findall(labels or "")), number))
    return samples


def counter_total(text: str, name: str, exclude: dict[str, tuple[str, ...]] | None = None) -> float | None:
    """The sum of a counter over its label sets (None when the page has no such metric),
    leaving out label values named in `exclude` (e.g. finished_reason abort and error)."""
    exclude = exclude or {}
    values = [
        value
        for sample_name, labels, value in parse_samples(text)
        if sample_name == name and not any(labels.get(key) in skipped for key, skipped in exclude.items())
    ]
    return math.fsum(values) if values else None


class ServerCounters(BaseModel):
    """What the engine counted during one burst (after minus before), or why it is not known."""

    generated_tokens: float | None = None
    finished_requests: float | None = None
    source: str  # the metric names read, or why none could be
    unavailable: str | None = None
