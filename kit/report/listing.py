"""A long table as aligned lines of monospace text, the way the PDF prints a per-case listing.

WeasyPrint lays out and draws every table cell as a box of its own, at a millisecond or more each;
a paper-size run's listings (every metric of every case, every case folder's digest) run to
thousands of cells. One line of preformatted text a row prints the same words and figures at a
fraction of that cost (tests/benchmarks/render_report.py measures it)."""

from __future__ import annotations

from kit.report.model import Cell, Table

GAP = "  "  # between columns
INDENT = "  "  # a row under a heading row


def _text(cell: Cell) -> str:
    return f"{cell.text} ({cell.detail})" if cell.detail else cell.text


def listing_lines(table: Table) -> list[str]:
    """The header, a rule, then one line per row: each column padded to its widest single-column
    cell; a cell spanning columns, and a heading row, run on as they are."""
    grouped = any(row.heading for row in table.rows)
    columns = [table.header, *([_text(c) for c in row.cells] for row in table.rows
                               if not row.heading and all(c.colspan == 1 for c in row.cells))]  # fmt: skip
    widths = [max(len(cells[i]) for cells in columns if i < len(cells)) for i in range(len(table.header))]
    widths[0] += len(INDENT) if grouped else 0

    def line(texts: list[str], spans: list[int]) -> str:
        parts, column = [], 0
        for text, span in zip(texts, spans):
            width = sum(widths[column : column + span]) + len(GAP) * (span - 1)
            parts.append(text.ljust(width))
            column += span
        return GAP.join(parts).rstrip()

    header = line(list(table.header), [1] * len(table.header))
    lines = [header, "-" * len(header)]
    for row in table.rows:
        if row.heading:
            lines.append(" ".join(_text(cell) for cell in row.cells))
            continue
        texts = [_text(cell) for cell in row.cells]
        if grouped:
            texts[0] = INDENT + texts[0]
        lines.append(line(texts, [cell.colspan for cell in row.cells]))
    return lines
