"""A long table as aligned lines of monospace text, the way the PDF prints a per-case listing.

WeasyPrint lays out and draws every table cell as a box of its own, at a millisecond or more each;
a paper-size run's listings (every metric of every case, every case folder's digest, every
parameter of every stage) run to thousands of cells. One line of preformatted text a row prints
the same words and figures at a fraction of that cost (tests/benchmarks/render_report.py measures it)."""

from __future__ import annotations

import textwrap

from kit.report.model import Cell, Table

GAP = "  "  # between columns
INDENT = "  "  # a row under a heading row
LINE_CHARS = 140  # what a printed line holds: 6 pt DejaVu Sans Mono across A4 less the page margins
NARROWEST = 20  # a column wrapped to fit a line keeps at least this many characters


def _text(cell: Cell) -> str:
    return f"{cell.text} ({cell.detail})" if cell.detail else cell.text


def _wrapped(text: str, width: int) -> list[str]:
    """The text in pieces of at most `width` characters, broken at spaces where it can be."""
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def listing_lines(table: Table) -> list[str]:
    """The header, a rule, then one line per row: each column padded to its widest single-column
    cell; a cell spanning columns, and a heading row, run on as they are. Where the columns would
    run past LINE_CHARS, the widest column is narrowed to fit and a longer cell in it goes on,
    under itself, on the lines that follow (its other columns left blank there)."""
    grouped = any(row.heading for row in table.rows)
    columns = [table.header, *([_text(c) for c in row.cells] for row in table.rows
                               if not row.heading and all(c.colspan == 1 for c in row.cells))]  # fmt: skip
    widths = [max(len(cells[i]) for cells in columns if i < len(cells)) for i in range(len(table.header))]
    widths[0] += len(INDENT) if grouped else 0
    overflow = sum(widths) + len(GAP) * (len(widths) - 1) - LINE_CHARS
    if overflow > 0:
        widest = widths.index(max(widths))
        widths[widest] = max(NARROWEST, widths[widest] - overflow)

    def lines_of(texts: list[str], spans: list[int]) -> list[str]:
        pieces, column = [], 0
        for text, span in zip(texts, spans):
            width = sum(widths[column : column + span]) + len(GAP) * (span - 1)
            pieces.append((width, _wrapped(text, width) if span == 1 and len(text) > width else [text]))
            column += span
        depth = max(len(chunks) for _, chunks in pieces)
        return [GAP.join((chunks[at] if at < len(chunks) else "").ljust(width) for width, chunks in pieces).rstrip()
                for at in range(depth)]  # fmt: skip

    header = lines_of(list(table.header), [1] * len(table.header))
    lines = [*header, "-" * max(len(line) for line in header)]
    for row in table.rows:
        if row.heading:
            lines.append(" ".join(_text(cell) for cell in row.cells))
            continue
        texts = [_text(cell) for cell in row.cells]
        if grouped:
            texts[0] = INDENT + texts[0]
        lines += lines_of(texts, [cell.colspan for cell in row.cells])
    return lines
