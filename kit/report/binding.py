"""Bind the separately printed parts of the PDF into one document.

WeasyPrint lays out on one core, so the report is printed in parts on several
(kit.report.printer). What a single print would have known about the whole, the binder puts
back: the pages in order, one outline, links that cross from one part into another, and the
numbers no part can know alone: "page N of M" in each footer and the page of each section in the
contents. Those numbers are drawn in Helvetica, which every PDF reader has (nothing is embedded).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from kit.files.atomic import write_into

PT_PER_PX = 0.75  # WeasyPrint's CSS pixel is 1/96 in; a PDF point 1/72 in

# Where style.css puts the footer's right edge (the page's right margin) and how its text sits.
FOOTER_RIGHT_MARGIN_PT = 14 / 25.4 * 72
FOOTER_BASELINE_PT = 23.1  # above the page's bottom edge, in the middle of the 18 mm bottom margin
FOOTER_SIZE_PT, FOOTER_GRAY = 7.0, 0x55 / 255
CONTENTS_SIZE_PT, CONTENTS_GRAY = 8.5, 0x1A / 255  # style.css: the body text
LEADER_DOT_PT, LEADER_PITCH_PT, LEADER_GAP_PT, LEADER_GRAY = 0.8, 2.4, 3.0, 0x77 / 255

# Advance widths of Helvetica (Adobe's AFM, per 1000 units of the font size) for what is drawn.
HELVETICA_WIDTHS = {" ": 278, "f": 278, "a": 556, "e": 556, "g": 556, "o": 556, "p": 556} | dict.fromkeys(
    "0123456789", 556
)
FONT_NAME = "/KitPageNumbers"

CONTENTS_LINE = "contents-"  # the id of a section's line in the contents is this + its anchor (report.html.j2),
BASELINE = "-baseline"  # and an empty inline block on that line's baseline has this after it


@dataclass
class PrintedPart:
    """One part as WeasyPrint printed it: its PDF, the anchors it holds only as stand-ins for
    sections printed in another part (so that its links to them were kept), and where each line
    of the contents asks for a section's page number: section anchor -> (page index in this
    part, end of the title, right edge, baseline), in CSS pixels from the page's top left."""

    pdf: bytes
    stand_ins: frozenset[str]
    contents_lines: dict[str, tuple[int, float, float, float]]


def contents_lines(pages) -> dict[str, tuple[int, float, float, float]]:
    """The lines of the contents in a WeasyPrint document's pages, from the anchors its template
    sets: section anchor -> (page index, end of the title, right edge, baseline)."""
    marks, right_edges = {}, {}
    for index, page in enumerate(pages):
        for name, (left, top, right, _bottom) in page.anchors.items():
            if not name.startswith(CONTENTS_LINE):
                continue
            section = name.removeprefix(CONTENTS_LINE)
            if section.endswith(BASELINE):
                marks[section.removesuffix(BASELINE)] = index, left, top
            else:
                right_edges[section] = right
    return {
        section: (index, left, right_edges[section], top)
        for section, (index, left, top) in marks.items()
        if section in right_edges
    }


def bind(parts: list[PrintedPart], target: Path) -> None:
    """Write the parts, in order, as one PDF into `target`, a temporary file the kit made
    (kit.files.atomic.exclusive_temporary), never through a link put in its place."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    readers, offsets = [], []
    for part in parts:
        reader = PdfReader(io.BytesIO(part.pdf))
        offsets.append(len(writer.pages))
        writer.append(reader, import_outline=True)
        readers.append(reader)
    if readers and readers[0].metadata:
        writer.add_metadata(dict(readers[0].metadata))
    section_pages = _name_destinations(writer, parts, readers, offsets)
    total = len(writer.pages)
    drawn: dict[int, list[str]] = {}
    for index, page in enumerate(writer.pages):
        right = float(page.mediabox.width) - FOOTER_RIGHT_MARGIN_PT
        drawn[index] = [
            _right_aligned(f"page {index + 1} of {total}", FOOTER_SIZE_PT, FOOTER_GRAY, right, FOOTER_BASELINE_PT)
        ]
    for part, offset in zip(parts, offsets):
        for section, (index, title_end, right, baseline) in part.contents_lines.items():
            if section in section_pages:
                height = float(writer.pages[offset + index].mediabox.height)
                drawn[offset + index] += _contents_entry(
                    str(section_pages[section] + 1),
                    title_end * PT_PER_PX,
                    right * PT_PER_PX,
                    height - baseline * PT_PER_PX,
                )
    for index, texts in drawn.items():
        _draw(writer, writer.pages[index], texts)
    bound = io.BytesIO()
    writer.write(bound)
    write_into(target, bound.getvalue(), shared=True)


def _name_destinations(writer, parts, readers, offsets) -> dict[str, int]:
    """One table of named destinations for the bound document, each name taken from the part
    that prints it (not from a stand-in); returns each name's page index."""
    from pypdf.generic import ArrayObject, DictionaryObject, FloatObject, NameObject, NumberObject, TextStringObject

    destinations: dict[str, tuple[int, ArrayObject]] = {}
    for part, reader, offset in zip(parts, readers, offsets):
        for name, destination in reader.named_destinations.items():
            if name in part.stand_ins or name in destinations:
                continue
            index = offset + reader.get_destination_page_number(destination)
            destinations[name] = (
                index,
                ArrayObject(
                    [
                        writer.pages[index].indirect_reference,
                        NameObject("/XYZ"),
                        FloatObject(destination.left or 0),
                        FloatObject(destination.top or 0),
                        NumberObject(0),
                    ]
                ),
            )
    names = ArrayObject()
    for name in sorted(destinations):
        names.extend([TextStringObject(name), destinations[name][1]])
    writer.root_object[NameObject("/Names")] = DictionaryObject(
        {NameObject("/Dests"): DictionaryObject({NameObject("/Names"): names})}
    )
    return {name: index for name, (index, _) in destinations.items()}


def _contents_entry(number: str, title_end: float, right: float, baseline: float) -> list[str]:
    """A line of dots from the title to the page number, and the number, right-aligned. (Dots
    drawn by WeasyPrint, a leader(), are a text box each: some 2,000 on the cover, half a second.)"""
    number_text = _right_aligned(number, CONTENTS_SIZE_PT, CONTENTS_GRAY, right, baseline)
    dots_end = right - _width(number, CONTENTS_SIZE_PT) - LEADER_GAP_PT
    if dots_end - title_end < 2 * LEADER_GAP_PT:
        return [number_text]
    dots = (
        f"q {LEADER_GRAY:.3f} G {LEADER_DOT_PT} w 1 J [0 {LEADER_PITCH_PT}] 0 d "
        f"{title_end + LEADER_GAP_PT:.2f} {baseline + LEADER_DOT_PT:.2f} m {dots_end:.2f} {baseline + LEADER_DOT_PT:.2f} l S Q"
    )
    return [dots, number_text]


def _width(text: str, size: float) -> float:
    return sum(HELVETICA_WIDTHS[char] for char in text) * size / 1000


def _right_aligned(text: str, size: float, gray: float, right: float, baseline: float) -> str:
    return f"BT {FONT_NAME} {size:g} Tf {gray:.3f} g {right - _width(text, size):.2f} {baseline:.2f} Td ({text}) Tj ET"


def _draw(writer, page, texts: list[str]) -> None:
    """Draw on top of the page, in the page's own coordinates (its content is wrapped in q/Q, so
    whatever transformation it leaves in effect does not move what is drawn here)."""
    from pypdf.generic import ArrayObject, DecodedStreamObject, DictionaryObject, NameObject

    resources = page[NameObject("/Resources")].get_object()
    fonts = resources.setdefault(NameObject("/Font"), DictionaryObject()).get_object()
    if FONT_NAME not in fonts:
        fonts[NameObject(FONT_NAME)] = writer._add_object(
            DictionaryObject(
                {
                    NameObject("/Type"): NameObject("/Font"),
                    NameObject("/Subtype"): NameObject("/Type1"),
                    NameObject("/BaseFont"): NameObject("/Helvetica"),
                    NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
                }
            )
        )
    before, after = DecodedStreamObject(), DecodedStreamObject()
    before.set_data(b"q\n")
    after.set_data(("\nQ\n" + "\n".join(texts) + "\n").encode("ascii"))
    contents = page.get(NameObject("/Contents"))
    streams = list(contents.get_object()) if isinstance(contents.get_object(), ArrayObject) else [contents]
    page[NameObject("/Contents")] = ArrayObject([writer._add_object(before), *streams, writer._add_object(after)])
