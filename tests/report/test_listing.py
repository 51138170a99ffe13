"""A long table printed as aligned monospace lines never runs past the printed line."""

from __future__ import annotations

from kit.report.listing import LINE_CHARS, listing_lines
from kit.report.model import Cell, Row, Table

WHY = "output tokens/s 1.97 × the roofline bound of its GPUs (6014 tokens/s): impossible"


def test_two_long_columns_are_both_narrowed_and_every_column_keeps_its_place():
    """The energy table's row of an invalid case: its throughput and its cost both say why at
    length; both wrap under themselves, and the columns after them stay on the line."""
    table = Table(
        caption="Energy and cost per case",
        header=["Case", "Tokens/s", "J/token", "W per GPU", "Cost"],
        rows=[
            Row(
                cells=[Cell(text="serve.llama2-7b.vllm.g8"), Cell(text="29433 (1 run)"), Cell(text="0.0897")]
                + [Cell(text="330"), Cell(text="0.0412")]
            ),
            Row(
                cells=[Cell(text="serve.llama2-70b.vllm.g8"), Cell(text=f"invalid: {WHY}"), Cell(text="invalid")]
                + [Cell(text="330"), Cell(text="not priced", detail=f"invalid: {WHY}")]
            ),
        ],
    )
    lines = listing_lines(table)
    assert max(len(line) for line in lines) <= LINE_CHARS
    header = lines[0]
    assert header.split() == ["Case", "Tokens/s", "J/token", "W", "per", "GPU", "Cost"]
    first = lines[2]
    assert first.index("0.0897") == header.index("J/token") and first.index("0.0412") == header.index("Cost")
    wrapped = " ".join(line[header.index("Tokens/s") : header.index("J/token")].strip() for line in lines[3:])
    assert " ".join(wrapped.split()).startswith(f"invalid: {WHY}"[:40])
