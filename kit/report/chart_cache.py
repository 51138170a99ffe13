"""Each chart drawn once: its SVG kept in the kit cache under the SHA-256 of what it shows.

Drawing a chart with matplotlib (and importing matplotlib, about 2 s) is most of the time a
report spends before it prints, and a run's charts are the same every time it is rendered
(again with a price, as HTML after PDF, compared with another run). A chart is named by its
drawing function, every value it is given, the source of the module that draws it and
matplotlib's version, so that a change to any of them draws it anew; the same inputs always
gave the same bytes (kit.report.charts), so a kept drawing is the one that would be drawn. A
drawing is inlined in the HTML report, so it is kept sealed (kit.cache.keep): one edited or planted
in the cache (a script in its SVG) is drawn again, never inlined.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any, ParamSpec

from pydantic import BaseModel

from kit.cache import CacheEntryInvalid, cache_dir, keep, read_kept
from kit.files.regular import MiB

P = ParamSpec("P")
CHARTS_FOLDER = "report-charts"
KEPT = 2000  # drawings kept (a paper-size report draws about 25 of some 100 kB each)
DRAWING_LIMIT = 16 * MiB  # bytes of a kept drawing read at most


def charts_folder() -> Path:
    return cache_dir() / CHARTS_FOLDER


def _plain(value: Any) -> Any:
    """A chart's input as JSON can hold it, every float as Python writes it (exactly)."""
    if isinstance(value, BaseModel):
        return _plain(value.model_dump())
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, float):
        return repr(value)
    return value


@functools.cache
def _drawer_digest(draw: Callable) -> str:
    source = Path(inspect.getfile(draw)).read_bytes()
    return hashlib.sha256(source + version("matplotlib").encode()).hexdigest()


def chart_key(draw: Callable, args: tuple, kwargs: dict) -> str:
    """The name of a drawing: its function, its inputs, the drawing code and matplotlib."""
    shown = json.dumps([draw.__qualname__, _drawer_digest(draw), _plain(args), _plain(kwargs)], sort_keys=True)
    return hashlib.sha256(shown.encode("utf-8")).hexdigest()


def drawn_once(draw: Callable[P, str]) -> Callable[P, str]:
    """`draw`, which returns a chart's SVG, reading a drawing it made before from the cache."""

    @functools.wraps(draw)
    def cached(*args: P.args, **kwargs: P.kwargs) -> str:
        path = charts_folder() / f"{chart_key(draw, args, kwargs)}.svg"
        try:
            kept = read_kept(path, DRAWING_LIMIT)
            if kept is not None:
                svg = kept.decode("utf-8")
                os.utime(path)  # the drawings used last are the ones kept
                return svg
        except (CacheEntryInvalid, OSError, UnicodeDecodeError):
            pass
        svg = draw(*args, **kwargs)
        try:
            keep(path, svg.encode("utf-8"))
            _keep_newest(path.parent)
        except OSError:  # a cache that cannot be written costs time, never the report
            pass
        return svg

    return cached


def _keep_newest(folder: Path) -> None:
    drawings = list(folder.glob("*.svg"))
    if len(drawings) <= KEPT:
        return
    drawings.sort(key=lambda path: path.stat().st_mtime_ns, reverse=True)
    for stale in drawings[KEPT:]:
        stale.unlink(missing_ok=True)
