"""Variants beside their twins (claims C4, C8, C27): each case a variant repeats with peer-to-peer
traffic off (NCCL_P2P_DISABLE=1, ...) set beside the case it repeats, by its stage's headline
figure: with NVLink and without it on one host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.measure.registry import unit_of
from kit.plan.protocol import Case, Protocol
from kit.report.cells import has_metrics, metric_cell, metric_of, status_cell
from kit.report.model import Cell, Row, Section, Table
from kit.report.sections.common import unmeasured_line
from kit.report.sections.comparison import Comparison
from kit.units import metric_label

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun


def variant_case(case: Case) -> bool:
    return case.variant is not None


def variants_section(comparison: Comparison, run: LoadedRun, protocol: Protocol) -> Section:
    """Each variant case beside the case it repeats (its twin), by the stage's headline figure:
    with NVLink and without it on one host (claims C4, C8, C27)."""
    variants = [case for case in run.info.plan.cases if comparison.cases(case)]
    section = Section(anchor=comparison.name, title=comparison.title)
    for name in dict.fromkeys(case.variant for case in variants if case.variant is not None):
        spec = protocol.variants.get(name)
        rows, pairs = [], []
        for case in (c for c in variants if c.variant == name):
            unit = unit_of(case)
            metric = unit.headline if unit else None
            twin, variant = run.results.get(case.variant_of or ""), run.results.get(case.id)  # set with `variant`
            pairs.append(variant if has_metrics(twin, metric or "") else twin)
            cells = [Cell(text=case.variant_of, tone="mono"), Cell(text=metric_label(metric) if metric else "-")]
            if metric is None or not has_metrics(twin, metric) or not has_metrics(variant, metric):
                missing = variant if not has_metrics(variant, metric or "") else twin
                cells.append(
                    status_cell(missing, case.id in run.info.selected or case.variant_of in run.info.selected, 3)
                )
            else:
                theirs = metric_of(twin, metric).mean
                ratio = metric_of(variant, metric).mean / theirs if theirs else None
                cells += [
                    metric_cell(twin, metric),
                    metric_cell(variant, metric),
                    Cell(text=f"{ratio:.2f} ×" if ratio is not None else "-"),
                ]
            rows.append(Row(cells=cells))
        notes = (
            [f"{spec.label}: {', '.join(f'{k}={v}' for k, v in spec.env.items())} on top of the twin's environment."]
            if spec
            else []
        )
        if run.info.plan.device == "cpu" and spec:
            notes.append(spec.cpu_note + ": the pairs show run-to-run spread only.")
        collapsed = unmeasured_line(f"{name}: each case without and with the variant", pairs)
        if collapsed:
            section.paragraphs += [collapsed, *notes]
            continue
        section.tables.append(
            Table(
                caption=f"{name}: each case without and with the variant",
                header=["Case (twin)", "Figure", "Twin", name, f"{name} / twin"],
                widths=[32, 14, 20, 20, 14],
                print_as_listing=True,
                rows=rows,
                notes=notes,
            )
        )
    return section


VARIANTS = Comparison(
    name="variants", title="Variants beside their twins", cases=variant_case, section=variants_section
)
