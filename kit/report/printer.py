"""The PDF printer in a process of its own, started before the report is built.

Importing WeasyPrint takes about a second, and printing a paper-size report most of the rest of
`kit report`'s time, on one core per document. Forked as soon as `kit report` knows it will
print, the printer imports WeasyPrint (and loads its fonts) on another core while this process
verifies the evidence and builds the report. It then prints the report's parts
(kit.report.render.print_parts) at once, one per core, and binds them into one PDF
(kit.report.binding), while this process writes the HTML."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

from kit.report.binding import PrintedPart, bind, contents_lines
from kit.report.forked import in_parallel, portable, usable_cpus

Part = tuple[str, frozenset[str]]  # a part's HTML, and the anchors it holds as stand-ins (kit.report.binding)


def write_pdf(parts: Sequence[Part], target: Path) -> None:
    """Print the parts, at once where there are cores for them, and bind them into `target` (a
    temporary file kit.files.atomic.exclusive_temporary made)."""
    bind(in_parallel([partial(print_part, html, stand_ins) for html, stand_ins in parts]), target)


def print_part(html: str, stand_ins: frozenset[str]) -> PrintedPart:
    """Print one part with WeasyPrint; any attempt to fetch a resource is an error, because a
    report that needs the network is not self-contained. A data: address (a chart, see
    kit.report.charts.data_uri) holds its resource and fetches nothing."""
    from weasyprint import HTML
    from weasyprint.urls import FatalURLFetchingError, URLFetcher

    class NoFetching(URLFetcher):
        def fetch(self, url, headers=None):
            if url.startswith("data:"):
                return super().fetch(url, headers)
            raise FatalURLFetchingError(f"the report is self-contained; refused to fetch {url}")

    document = HTML(string=html, url_fetcher=NoFetching()).render()
    return PrintedPart(document.write_pdf(), stand_ins, contents_lines(document.pages))


def _warm_up() -> None:
    """Import WeasyPrint and lay out a line of text, which loads the fonts the report uses."""
    from weasyprint import HTML

    HTML(string='<p style="font-family: DejaVu Sans">kit</p>').render()


def _stop(*_signal) -> None:
    """The printer stopped: its parts' printers first, then itself, at once. Raising SystemExit
    here instead surfaced as a stray traceback where the signal came during a finalizer (one
    `kit report` in three printed "Exception ignored in ... SystemExit: 1")."""
    for child in multiprocessing.active_children():
        child.terminate()
    os._exit(1)


def _serve(connection) -> None:
    """In the printer: warm up, then print the parts it is sent, bind them and say how that went."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the printer,
    signal.signal(signal.SIGTERM, _stop)  # which stops the parts' printers on the way out
    try:
        _warm_up()
    except Exception:  # noqa: BLE001 (the print itself says what is wrong, in the parent)
        pass
    try:
        parts, target = connection.recv()
    except EOFError:  # the report failed before it printed
        return
    try:
        write_pdf(parts, Path(target))
        connection.send(None)
    except BaseException as error:  # noqa: BLE001 (WeasyPrint's refusal to fetch is one; the parent raises it)
        connection.send(portable(error))
    finally:
        connection.close()


class Printer:
    """Prints one PDF: `start` forks the printer, `submit` hands it the parts and where to write,
    `wait` returns once the file is written (raising what the printer raised). With a single CPU
    there is no core to spare, and the printing is done in this process at `submit`."""

    def __init__(self) -> None:
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None  # set with _process
        self._started = False

    def start(self) -> Printer:
        """Fork the printer, once (a printer already started is left as it is)."""
        if not self._started and usable_cpus() > 1:
            context = multiprocessing.get_context("fork")
            self._connection, theirs = context.Pipe()
            # not a daemon: it forks the parts' printers (kit.report.forked); `close` stops it
            self._process = context.Process(target=_serve, args=(theirs,), name="kit-pdf-printer")
            self._process.start()
            theirs.close()
        self._started = True
        return self

    def submit(self, parts: Sequence[Part], target: Path) -> None:
        if self._process is None or self._connection is None:
            write_pdf(parts, target)
            return
        self._connection.send((list(parts), str(target)))

    def wait(self) -> None:
        if self._process is None or self._connection is None:
            return
        try:
            outcome = self._connection.recv()
        except EOFError:
            raise RuntimeError(f"the PDF printer ended without a word (exit code {self._process.exitcode})") from None
        finally:
            self.close()
        if outcome is not None:
            raise outcome

    def close(self) -> None:
        """Stop the printer if it still runs (the report failed before it printed)."""
        if self._process is None or self._connection is None:
            return
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
        self._process.join()
        self._connection.close()
        self._process = None

    def __enter__(self) -> Printer:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.close()
