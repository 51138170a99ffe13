"""Report model -> one self-contained HTML file (Jinja2, inline CSS and SVG) -> PDF (WeasyPrint)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from kit.files.atomic import atomic_write_text, exclusive_temporary
from kit.manifest import package_data
from kit.measure.energy import DEFAULT_CURRENCY
from kit.measure.slo import DEFAULT_SLO, Slo
from kit.output import elided
from kit.reference.acceptance import Judgement
from kit.report import FORMATS
from kit.report.build import REFERENCE, Assessment, assess, build_report
from kit.report.charts import data_uri
from kit.report.export import export_csv, export_json
from kit.report.forked import both_in_parallel
from kit.report.listing import listing_lines
from kit.report.model import Report, Section
from kit.report.printer import Part, Printer
from kit.rundir.directory import REPORT_FILES
from kit.rundir.evidence import EvidenceError, verify

TEMPLATES_ENV = "KIT_REPORT_TEMPLATES"
TEMPLATE = "report.html.j2"
STYLESHEET = "style.css"
CURRENCY = re.compile(r"[A-Za-z]{1,8}")  # ISO 4217 (USD, EUR) or any short name of letters


@dataclass(frozen=True)
class PartContents:
    """What one part of the PDF holds (report.html.j2): page one and the cover in the first, some
    sections, and stand-ins for the anchors of the others."""

    first: bool
    sections: list[Section]
    stand_ins: frozenset[str]


# A dotted name, such as a case id (pretrain.llama2-70b.z3+o.g8): two or more dots, each followed by
# a letter; a command-line option (--gpu-hour-price); a unit (tokens/s, J/token, GB/s).
DOTTED_NAME = re.compile(r"[\w/+*-]+(?:\.[A-Za-z][\w/+*-]*){2,}|--[a-z][a-z-]*|\b[A-Za-z]{1,6}/[A-Za-z]{1,6}\b")
ZERO_WIDTH_SPACE, WORD_JOINER = "\u200b", "\u2060"  # invisible: a break allowed, a break forbidden
# A name of words joined by underscores (no_uncorrectable_ecc_error, max_batch_search): a check's or a stage's.
SNAKE_NAME = re.compile(r"(?<![\w.])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w.])")  # not a piece of a dotted name


def without_long_words(value: object) -> object:
    """Every text the template prints with each word longer than any the kit writes shown by its
    ends and its length (kit.output.elided), whatever run field it came from: a word of 64,000
    characters in a run's command line kept the PDF's line breaking busy past two minutes. What
    the kit itself made safe to inline (Markup: a chart, the stylesheet) is printed as it is."""
    return value if isinstance(value, Markup) or not isinstance(value, str) else elided(value)


def breakable(text: str) -> str:
    """The text with each dotted name breakable after its dots and nowhere else, and each option
    and unit whole: a table cell narrower than a case id wraps it "serve.llama2-70b." / "tgi.g8",
    never after a hyphen nor anywhere (as WeasyPrint would), and "tokens/s" never after its slash;
    a name of underscores breaks after one of them ("no_uncorrectable_" / "ecc_error"), never
    inside a word. Neither character is drawn, nor read back from the PDF."""
    text = SNAKE_NAME.sub(lambda name: name.group(0).replace("_", "_" + ZERO_WIDTH_SPACE), text)
    return DOTTED_NAME.sub(
        lambda name: (
            name.group(0)
            .replace(".", "." + ZERO_WIDTH_SPACE)
            .replace("-", "-" + WORD_JOINER)
            .replace("/", "/" + WORD_JOINER)
        ),
        text,
    )


def templates_dir() -> Path:
    """$KIT_REPORT_TEMPLATES, else the report templates the package ships."""
    configured = os.environ.get(TEMPLATES_ENV)
    if configured:
        return Path(configured)
    return package_data("report_templates")


def render_html(report: Report, medium: Literal["screen", "print"] = "screen", part: PartContents | None = None) -> str:
    """The whole report (or one print `part` of it) as one HTML document: the stylesheet and
    every chart are inline. For `print` (the PDF's source), tables meant for the screen only are
    left out."""
    folder = templates_dir()
    environment = Environment(
        loader=FileSystemLoader(folder),
        autoescape=select_autoescape(["j2", "html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=without_long_words,
    )
    environment.globals["listing_lines"] = listing_lines
    environment.filters["data_uri"] = data_uri
    # a browser wraps as it pleases; a word too long to print is cut before its breaks are marked
    environment.filters["breakable"] = (lambda text: breakable(elided(text))) if medium == "print" else str
    css = (folder / STYLESHEET).read_text(encoding="utf-8")
    return environment.get_template(TEMPLATE).render(report=report, css=css, medium=medium, part=part)


def print_parts(report: Report) -> list[Part]:
    """The PDF's source in two parts that WeasyPrint prints at once on two cores, each with the
    anchors it holds as stand-ins: page one, the cover and the sections up to the cut, then the
    rest, which starts a page of its own. The cut makes the two alike in weight, so that neither
    core waits long for the other (on the paper-size run, printing at the reference claims gave
    parts of 5.0 s and 2.2 s, at the serving capacity 3.2 s and 3.6 s)."""
    sections = report.sections
    whole = render_html(report, "print", PartContents(True, sections, frozenset()))
    # each section's HTML, the first's with page one and the cover before it, which its part prints too
    starts = [0] + [max(0, whole.find(f'<section id="{section.anchor}"')) for section in sections[1:]] + [len(whole)]
    cut = balanced_cut([end - start for start, end in zip(starts, starts[1:])])
    groups = [sections[:cut]] + ([sections[cut:]] if cut < len(sections) else [])
    anchors = [set(_anchors(group)) for group in groups]
    parts = []
    for index, group in enumerate(groups):
        stand_ins = frozenset().union(*(held for other, held in enumerate(anchors) if other != index))
        parts.append((render_html(report, "print", PartContents(index == 0, group, stand_ins)), stand_ins))
    return parts


def balanced_cut(weights: Sequence[int]) -> int:
    """Where a sequence of sections is cut in two of most alike weight (a section's weight: the size
    of its printed HTML, which its drawings and table cells make up, as they make up its printing
    time)."""
    if len(weights) < 2:
        return len(weights)
    total = sum(weights)
    return min(range(1, len(weights)), key=lambda cut: abs(2 * sum(weights[:cut]) - total))


def _anchors(sections: list[Section]) -> Iterator[str]:
    for section in sections:
        yield section.anchor
        yield from _anchors(section.subsections)


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def verify_runs(run_dirs: Sequence[Path], out_dir: Path, own: Path | None) -> None:
    """Every run directory matches its SHA256SUMS (EvidenceError names what does not), and the
    report goes into none of them but `own`, the reported run's folder, whose evidence leaves
    its report files out."""
    for folder in run_dirs:
        problems = verify(folder)
        if problems:
            raise EvidenceError(folder, problems)
        if _inside(out_dir, folder) and (own is None or out_dir.resolve() != own.resolve()):
            raise ValueError(
                f"the report cannot be written inside the run directory {folder}: "
                "it would change the evidence it reports"
            )


def write_documents(
    report: Report, wanted: Sequence[str], html_path: Path, pdf_path: Path, printer: Printer | None = None
) -> list[Path]:
    """The report's HTML and/or PDF, as `wanted` names them; the files written. The PDF is
    printed by `printer` (kit.report.printer, one is started here if none is given) while this
    process renders and writes the HTML."""
    written = []
    if "pdf" not in wanted:  # nothing to print: no printer started (and stopped)
        return [_write_html(report, html_path)] if "html" in wanted else []
    printed = exclusive_temporary(pdf_path)
    with printer or Printer() as printing:
        try:
            printing.submit(print_parts(report), printed)
            if "html" in wanted:
                written.append(_write_html(report, html_path))
            printing.wait()
            os.replace(printed, pdf_path)
            written.append(pdf_path)
        finally:
            printed.unlink(missing_ok=True)  # where the HTML failed, and the printer was stopped
    return written


def _write_html(report: Report, html_path: Path) -> Path:
    atomic_write_text(html_path, render_html(report, "screen"), shared=True)
    return html_path


def chosen_formats(given: Sequence[str], known: Sequence[str] = FORMATS, of: str = "report") -> list[str]:
    """The formats asked for, each once, in their order; a ValueError naming the known ones
    where one is not, or none is asked for."""
    wanted = list(dict.fromkeys(given))
    if not wanted or any(name not in known for name in wanted):
        raise ValueError(f"{of} formats are {', '.join(known)}; got {', '.join(given) or 'none'}")
    return wanted


def render(
    run_dir: Path,
    compare: Sequence[str],
    formats: Sequence[str],
    out_dir: Path,
    redact: bool = False,
    gpu_hour_price: float | None = None,
    allowed_signers: Path | None = None,
    slo: Slo = DEFAULT_SLO,
    currency: str = DEFAULT_CURRENCY,
    acceptance: Judgement | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> list[Path]:
    """Render the report of `run_dir` into `out_dir` (by default the run directory itself, where
    the report files are the only ones the evidence leaves out): `report.html` / `.pdf`, and
    for spreadsheets `report.json` and `report-claims.csv` + `report-metrics.csv` (kit.report.export).

    `compare` holds "reference" (the paper's findings) and/or other run directories (A/B).
    Every run directory involved is verified against its SHA256SUMS before anything is written
    (on another core while the model is built: kit.report.forked); EvidenceError names each
    file that changed, is missing or was added. `gpu_hour_price` prices a million tokens in
    `currency` (an ISO 4217 code or any short name; report.json records it); `slo` holds the
    serving sweeps to latency objectives (kit.measure.slo). Each run's signer is named, and checked
    against `allowed_signers` where given (kit.rundir.signing). `acceptance`, the run's decision
    against a spec and a baseline, heads page one and is in report.json. `say` is told when the
    runs are verified and read, before the documents are laid out, so that a run refused says
    only why. Returns the files written.
    """
    wanted = chosen_formats(formats)
    if gpu_hour_price is not None and gpu_hour_price <= 0:
        raise ValueError(f"a GPU-hour price is positive; got {gpu_hour_price}")
    if not CURRENCY.fullmatch(currency):
        raise ValueError(f"a currency is a short name of letters (USD, EUR); got {currency!r}")
    run_dirs = [Path(run_dir)] + [Path(item) for item in compare if item != REFERENCE]
    for folder in run_dirs[1:]:
        if not (folder / "run.json").is_file():
            raise ValueError(f"--compare takes '{REFERENCE}' or a run directory; {folder} has no run.json")

    printer = Printer().start() if "pdf" in wanted else None  # WeasyPrint loads while the report is built
    try:
        return _render(
            run_dir,
            compare,
            wanted,
            Path(out_dir),
            redact,
            (gpu_hour_price, currency),
            allowed_signers,
            run_dirs,
            printer,
            slo,
            acceptance,
            say,
        )
    finally:
        if printer:
            printer.close()


def _render(
    run_dir, compare, wanted, out_dir: Path, redact, price, allowed_signers, run_dirs, printer, slo, acceptance, say
) -> list[Path]:
    gpu_hour_price, currency = price

    def assessed() -> tuple[Assessment, Report | None]:
        assessment = assess(Path(run_dir), list(compare), redact, allowed_signers=allowed_signers)
        assessment = assessment._replace(acceptance=acceptance)
        return assessment, build_report(
            Path(run_dir),
            list(compare),
            redact,
            gpu_hour_price=gpu_hour_price,
            assessment=assessment,
            currency=currency,
            slo=slo,
        ) if {"html", "pdf"} & set(wanted) else None

    # the evidence first: where a changed file also breaks the model, its EvidenceError is the one raised
    _, (assessment, report) = both_in_parallel(lambda: verify_runs(run_dirs, out_dir, own=Path(run_dir)), assessed)
    say(f"rendering the report of {run_dir}" + (f", compared with {', '.join(compare)}" if compare else ""))
    out_dir.mkdir(parents=True, exist_ok=True)
    html_file, pdf_file, json_file, claims_csv, metrics_csv = REPORT_FILES
    written = write_documents(report, wanted, out_dir / html_file, out_dir / pdf_file, printer) if report else []
    exported = []
    if "json" in wanted:
        exported.append((json_file, export_json(assessment, gpu_hour_price, currency, slo)))
    if "csv" in wanted:
        exported += zip((claims_csv, metrics_csv), export_csv(assessment, gpu_hour_price, currency))
    for name, text in exported:  # each whole or not at all, never through a link (kit.files.atomic)
        atomic_write_text(out_dir / name, text, shared=True)
        written.append(out_dir / name)
    return written
