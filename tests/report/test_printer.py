"""The PDF printer process (kit/report/printer.py): real WeasyPrint in a real forked process."""

from __future__ import annotations

import os

import pytest
from weasyprint.urls import FatalURLFetchingError

from kit.report.printer import Printer

HTML = "<!DOCTYPE html><html><body><h1>kit</h1><p>{text}</p>{extra}</body></html>"


def pdf_text(path) -> str:
    import pypdfium2

    return "".join(page.get_textpage().get_text_range() for page in pypdfium2.PdfDocument(path))


def part(text: str, extra: str = "") -> tuple[str, frozenset[str]]:
    return HTML.format(text=text, extra=extra), frozenset()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="with one CPU the printer prints in-process")
def test_the_printer_prints_in_a_process_of_its_own_and_is_gone_after(tmp_path):
    with Printer() as printer:
        process = printer._process
        assert process is not None and process.pid != os.getpid() and process.is_alive()
        printer.submit([part("printed by the printer")], tmp_path / "report.pdf")
        printer.wait()
    assert "printed by the printer" in pdf_text(tmp_path / "report.pdf")
    assert not process.is_alive()


def test_parts_are_bound_in_order_and_numbered_as_one_document(tmp_path):
    with Printer() as printer:
        printer.submit(
            [part("the first part"), part("the second part"), part("the third part")], tmp_path / "report.pdf"
        )
        printer.wait()
    import pypdfium2

    texts = [page.get_textpage().get_text_range() for page in pypdfium2.PdfDocument(tmp_path / "report.pdf")]
    assert ["first" in texts[0], "second" in texts[1], "third" in texts[2]] == [True] * 3
    assert [text.split()[-4:] for text in texts] == [["page", str(n), "of", "3"] for n in (1, 2, 3)]


@pytest.mark.parametrize(
    "refused_in", [0, 1], ids=["first part, printed by a fork of the printer", "last part, printed by the printer"]
)
def test_what_the_printer_refuses_is_raised_here_as_it_was_there(tmp_path, refused_in):
    """A report that would fetch a resource is not self-contained: WeasyPrint's refusal reaches
    the caller with its own type and message, and nothing is written."""
    parts = [part("kit"), part("kit")]
    parts[refused_in] = part("kit", '<img src="https://example.com/chart.png">')
    with Printer() as printer:
        printer.submit(parts, tmp_path / "report.pdf")
        with pytest.raises(FatalURLFetchingError, match="refused to fetch https://example.com/chart.png"):
            printer.wait()
    assert not (tmp_path / "report.pdf").exists()


def test_a_printer_never_given_a_document_is_stopped_when_the_report_fails(tmp_path):
    with pytest.raises(ValueError, match="the report failed"):
        with Printer() as printer:
            process = printer._process
            raise ValueError("the report failed before it printed")
    assert process is None or not process.is_alive()


def test_the_pdf_is_cut_where_its_two_parts_weigh_most_alike():
    from kit.report.render import balanced_cut

    assert balanced_cut([10, 10, 10, 10]) == 2
    assert balanced_cut([100, 1, 1]) == 1  # the heavy first part alone
    assert balanced_cut([1, 1, 1, 100]) == 3
    assert balanced_cut([5]) == 1  # one section: one part
