"""Where the CLI's words go: results (tables, verdicts, the files written, JSON) on standard
output, progress and logs on standard error, so that `kit doctor > f` keeps the table and a
pipe gets the results alone. A stream that is not a terminal gets plain text at a width that
cuts and wraps nothing. `-q`, `-v` and `--no-progress` (the `kit` group's options) set how much
is said on standard error; errors and warnings are always said.

Nothing the kit prints is read as rich markup or emoji codes: a path, a case's reason or a
host's value is data (a run in a folder named `r[/]x` or `[bold]x` is shown as it is); colour
is given as a style, never written into the text (kit.console).

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
    return _plain(sys.stdout)


def log() -> Console:
    """Standard error: what the command is doing (silent with -q)."""
    return _plain(sys.stderr, quiet=verbosity.quiet)


def alerts() -> Console:
    """Standard error, even with -q: warnings and errors."""
    return _plain(sys.stderr)


def _plain(stream, quiet: bool = False) -> Console:
    """A console on `stream` that reads nothing it prints as markup, an emoji code or a number
    to colour: what it prints is data, styled only where a style is given."""
    from rich.console import Console

    return Console(
        stderr=stream is sys.stderr,
        width=_width(stream),
        quiet=quiet,
        markup=False,
        emoji=False,
        highlight=False,
    )


# A path or a name longer than this in an error line is shown by its ends: a 5,000-character
# path once made a 5,072-character line that no terminal or log shows whole.
LONGEST_WORD = 240


def elided(text: str) -> str:
    """`text` with each run of characters without a space longer than LONGEST_WORD cut to its
    ends and its length, so that an error stays a line a person can read."""
    import re

    def shortened(word: re.Match) -> str:
        found = word.group()
        return f"{found[:120]}…({len(found):,} characters)…{found[-100:]}"

    return re.sub(rf"\S{{{LONGEST_WORD + 1},}}", shortened, text)


def say(line: str) -> None:
    """One log line on standard error, as it is (no markup), unless -q."""
    if not verbosity.quiet:
        click.echo(line, err=True)
