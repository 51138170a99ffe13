"""The report as data: every number, word and chart a template prints, already computed and
formatted (kit/report/build.py fills it in). Templates lay it out and compute nothing."""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from pydantic import BaseModel

# What an HTML id, a link's fragment and an SVG id may hold as they are: no quote, no '<', no
# space, nothing a browser or the PDF binder reads otherwise.
ID_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def html_id(text: str) -> str:
    """`text` as an element id: itself where every character is safe in one (a case id, a
    stage), else its safe characters and a digest of the whole, so that a run named
    `<img src=x onerror=...>` or `a" onload="...` is never markup where an id is written, and
    two such names stay apart."""
    if ID_SAFE.fullmatch(text):
        return text
    kept = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-")[:40]
    return f"{kept or 'id'}-{hashlib.sha256(text.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}"


Tone = Literal["plain", "muted", "good", "bad", "warn", "unsure", "mono", "strong"]


class Cell(BaseModel):
    """One table cell; `detail` is a smaller second line (the source of a claim, a test's t and df)."""

    text: str
    detail: str | None = None
    tone: Tone = "plain"
    colspan: int = 1
    link: str | None = None  # an anchor of the report ("#pretrain") the text links to


class Row(BaseModel):
    cells: list[Cell]
    heading: bool = False


class HeaderGroup(BaseModel):
    label: str
    span: int


class Table(BaseModel):
    """A table as printed; `widths` (per cent of the page, one per column) fix the layout."""

    caption: str
    header: list[str]
    groups: list[HeaderGroup] = []
    rows: list[Row]
    notes: list[str] = []
    widths: list[int] = []
    dense: bool = False
    # "screen": in the HTML only, for a listing too long to print (a summary of it prints instead).
    media: Literal["all", "screen"] = "all"
    print_note: str | None = None  # what the PDF prints in the place of a screen-only table
    # A long per-case listing: the PDF prints it as aligned monospace lines (kit/report/listing.py).
    print_as_listing: bool = False


PRINTED_ROWS = 60  # a longer listing is left to the HTML: a printed report is read, not searched


def printed_if_short(table: Table, where_else: str) -> Table:
    """The table, or, past PRINTED_ROWS, the table in the HTML only and a line in the PDF that
    says how long it is and where else it can be read."""
    if len(table.rows) <= PRINTED_ROWS:
        return table
    note = f"{table.caption}: {len(table.rows)} rows, in the HTML report and {where_else}."
    return table.model_copy(update={"media": "screen", "print_note": note})


class Chart(BaseModel):
    title: str
    svg: str
    caption: str


class Section(BaseModel):
    """A section of the report; `not_run` says why it has no measurements, so none is left blank."""

    anchor: str
    title: str
    paragraphs: list[str] = []
    not_run: str | None = None
    tables: list[Table] = []
    charts: list[Chart] = []
    subsections: list[Section] = []


class Fact(BaseModel):
    label: str
    value: str
    tone: Tone = "plain"


class Count(BaseModel):
    label: str
    count: int
    tone: Tone


class Cover(BaseModel):
    title: str
    subtitle: str
    facts: list[Fact]
    claim_counts: list[Count]
    claims_summary: str
    # The claims about other hardware against the kit's expectation on this host's GPUs, shown
    # apart from the paper's verdicts (kit/reference/expectation.py); empty when none is so judged.
    expectation_counts: list[Count] = []
    expectation_summary: str = ""
    case_counts: list[Count]
    case_counts_title: str = "Cases of this run"


class AcceptanceBox(BaseModel):
    """The decision against an acceptance spec (kit/report/acceptance_box.py), first on page one."""

    decided: str
    tone: Tone
    summary: str
    sign_off: list[Fact]
    lines: Table


class PageOne(BaseModel):
    """The page a reviewer reads first (kit/report/page_one.py): the verdict in three lines, what
    the report cannot tell, the host, and the headline figures beside the bound the kit sets for
    this host and what the paper published, with a legend of the method letters."""

    acceptance: AcceptanceBox | None = None  # kit report --accept SPEC
    verdict: list[Fact] = []
    cannot_tell: str = ""
    host: list[Fact]
    headline: Table
    legend: str = ""


class Report(BaseModel):
    """One rendered report: the cover, the sections in order, and the text of every page's margins."""

    run_id: str
    banner: str | None
    footer: str
    page_one: PageOne
    cover: Cover
    sections: list[Section]
