"""The engine's own counters, read from its Prometheus `/metrics` page before and after a burst.

The client counts tokens as they stream in; the engine counts what it generated. Both must
agree, or the burst measured something other than what the rows say (lost events, requests the
engine served twice, another client). The page is read with prometheus_client's parser of the
text exposition format, label escapes and all.
"""

from __future__ import annotations

import math

from kit.serve.process import http_get


def parse_samples(text: str) -> list:
    """Every sample of an exposition page (prometheus_client's Sample: name, labels, value).
    A page the parser refuses raises ValueError."""
    from prometheus_client.parser import text_string_to_metric_families

    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def counter_total(samples: list, name: str, exclude: dict[str, tuple[str, ...]] | None = None) -> float | None:
    """The sum of a counter over its label sets (None when the page has no such metric),
    leaving out label values named in `exclude` (e.g. finished_reason abort and error)."""
    exclude = exclude or {}
    values = [
        sample.value
        for sample in samples
        if sample.name == name and not any(sample.labels.get(key) in skipped for key, skipped in exclude.items())
    ]
    return math.fsum(values) if values else None


def read_page(base_url: str) -> list | str:
    """The samples of the engine's /metrics page, or why it could not be read."""
    try:
        status, body = http_get(base_url + "/metrics", timeout=10)
    except OSError as exc:
        return f"GET /metrics failed: {exc}"
    if status != 200:
        return f"GET /metrics answered {status}"
    try:
        return parse_samples(body.decode("utf-8", errors="replace"))
    except ValueError as exc:
        return f"GET /metrics answered a page that is not Prometheus text: {exc}"
