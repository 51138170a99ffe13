"""Where the CLI's words go: results (tables, verdicts, the files written, JSON) on standard
output, progress and logs on standard error, so that `kit doctor > f` keeps the table and a
pipe gets the results alone. A stream that is not a terminal gets plain text at a width that
cuts and wraps nothing. `-q`, `-v` and `--no-progress` (the `kit` group's options) set how much
is said on standard error; errors and warnings are always said.

rich is imported when a console is made, not with this module: `kit list` prints no rich table
and does not pay for it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rich.console import Console

PIPED_WIDTH = 1000  # columns for a stream that is no terminal: wider than any table or line the kit prints


@dataclass
class Verbosity:
    quiet: bool = False  # no progress and no log lines: results, warnings and errors only
    verbose: bool = False  # each case's runs as lines, and the traceback behind a one-line error
    progress: bool = True  # the live progress bar of `kit run`


verbosity = Verbosity()


def configure(quiet: bool, verbose: bool, progress: bool) -> None:
    verbosity.quiet, verbosity.verbose, verbosity.progress = quiet, verbose and not quiet, progress and not quiet


def _width(stream) -> int | None:
    """None on a terminal (its own width, or $COLUMNS); elsewhere $COLUMNS, or wide enough that no
    table is squeezed and no word cut."""
    return None if stream.isatty() or os.environ.get("COLUMNS") else PIPED_WIDTH


def results() -> Console:
    """Standard output: what the command found or made."""
    from rich.console import Console

    return Console(width=_width(sys.stdout))


def log() -> Console:
    """Standard error: what the command is doing (silent with -q)."""
    from rich.console import Console

    return Console(stderr=True, width=_width(sys.stderr), quiet=verbosity.quiet)


def alerts() -> Console:
    """Standard error, even with -q: warnings and errors."""
    from rich.console import Console

    return Console(stderr=True, width=_width(sys.stderr))


def say(line: str) -> None:
    """One log line on standard error, as it is (no markup), unless -q."""
    if not verbosity.quiet:
        click.echo(line, err=True)
