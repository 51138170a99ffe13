"""A long table as aligned lines of monospace text, the way the PDF prints a per-case listing.

WeasyPrint lays out and draws every table cell as a box of its own, at a millisecond or more each;
a paper-size run's listings (every metric of every case, every case folder's digest, every
parameter of every stage) run to thousands of cells. One line of preformatted text a row prints
the same words and figures at a fraction of that cost (tests/benchmarks/render_report.py measures it)."""

from __future__ import annotations

import re

from kit.report.model import Cell, Table

GAP = "  "  # between columns
INDENT = "  "  # a row under a heading row
LINE_CHARS = 122  # what a printed line holds: 7 pt DejaVu Sans Mono (0.6 em a character) across A4 less the margins
NARROWEST = 20  # a column wrapped to fit a line keeps at least this many characters
# Where a line may break: after a space, or after a dot inside a name (a case id wraps only at its dots).
BREAKS = re.compile(r"(?<= )|(?<=\.)(?=[A-Za-z])")


def _text(cell: Cell) -> str:
    return f"{cell.text} ({cell.detail})" if cell.detail else cell.text


def _wrapped(text: str, width: int) -> list[str]:
    """The text in pieces of at most `width` characters, broken at spaces and at the dots of a
    name where it can be, and only a piece longer than a line anywhere."""
    lines, line = [], ""
    for piece in BREAKS.split(text):
        if line and len(line + piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
        while len(line.rstrip()) > width:
            lines.append(line[:width])
            line = line[width:]
    return [*lines, line.rstrip()] if line.strip() or not lines else lines


def listing_lines(table: Table) -> list[str]:
    """The header, a rule, then one line per row: each column padded to its widest single-column
    cell; a cell spanning columns runs on, a heading row wraps at the line's end. Where the columns would
    run past LINE_CHARS, the widest columns that break at spaces or dots are narrowed, in turn, to fit (else
    the widest) and a longer cell in it goes on, under itself, on the lines that follow (its other
    columns left blank there)."""
    grouped = any(row.heading for row in table.rows)
    widths = [len(label) for label in table.header]
    for row in table.rows:
        column = 0
        for cell in [] if row.heading else row.cells:  # a cell across columns runs on, setting no width
            if cell.colspan == 1 and column < len(widths):
                widths[column] = max(widths[column], len(_text(cell)))
            column += cell.colspan
    widths[0] += len(INDENT) if grouped else 0
    breaking = [
        index
        for index in range(len(widths))
        if any(
            BREAKS.search(_text(row.cells[index])) for row in table.rows if not row.heading and len(row.cells) > index
        )
    ]
    # the widest column that breaks at spaces or dots (else the widest: a digest breaks anywhere) is
    # narrowed, then the next, until the line fits or none is wider than NARROWEST
    while (overflow := sum(widths) + len(GAP) * (len(widths) - 1) - LINE_CHARS) > 0:
        narrowable = [index for index in breaking or range(len(widths)) if widths[index] > NARROWEST]
        if not narrowable:
            break
        narrowed = max(narrowable, key=lambda index: widths[index])
        widths[narrowed] = max(NARROWEST, widths[narrowed] - overflow)

    def lines_of(texts: list[str], spans: list[int]) -> list[str]:
        pieces, column = [], 0
        for text, span in zip(texts, spans):
            width = sum(widths[column : column + span]) + len(GAP) * (span - 1)
            pieces.append((width, _wrapped(text, width) if span == 1 and len(text) > width else [text]))
            column += span
        depth = max(len(chunks) for _, chunks in pieces)
        return [
            GAP.join((chunks[at] if at < len(chunks) else "").ljust(width) for width, chunks in pieces).rstrip()
            for at in range(depth)
        ]

    header = lines_of(list(table.header), [1] * len(table.header))
    lines = [*header, "-" * max(len(line) for line in header)]
    for row in table.rows:
        if row.heading:
            lines += _wrapped(" ".join(_text(cell) for cell in row.cells), LINE_CHARS)
            continue
        texts = [_text(cell) for cell in row.cells]
        if grouped:
            texts[0] = INDENT + texts[0]
        lines += lines_of(texts, [cell.colspan for cell in row.cells])
    return lines
