"""Breakdowns recorded by kits before the timeline attribution (kit.measure.breakdown), read back only.

Those kits timed a step's parts by marks at module and autograd edges (CUDA events on a GPU) in
steps of their own ("instrumented" steps), and blocks in further steps. On a fast GPU at
micro-batch 1 those marks lengthened the step they measured (recorded on an H100: plain step
211 ms, instrumented 345 ms), which is why the kit no longer records them. A run made then still
renders: the report recomputes its figures from its rank files with the arithmetic below, the
same as the kit that measured it, and shows them as they were measured.
"""

from __future__ import annotations

from kit.measure.breakdown import part_figures
from kit.rundir.breakdown import MarkedBreakdown


def marked_figures(breakdown: MarkedBreakdown) -> dict[str, float]:
    """The figures the kits of the marks computed, by the same names and arithmetic."""
    figures: dict[str, float] = {"step_s": breakdown.step_ms / 1e3}
    for phase in breakdown.phases:
        figures[f"{phase.name}_s"] = phase.wall_ms / 1e3
        figures[f"{phase.name}_share"] = phase.wall_ms / breakdown.step_ms
        activity = phase.activity
        if activity is not None and activity.idle_share is not None:
            assert activity.kernel_ms is not None, "the marks' kits recorded a phase's kernel time with its busy time"
            figures[f"{phase.name}_idle_share"] = activity.idle_share
            figures[f"{phase.name}_kernel_s"] = activity.kernel_ms / 1e3
    figures.update(part_figures(breakdown))
    if breakdown.module("Decoder layers") is not None:
        figures["blocks_step_s"] = breakdown.blocks_step_ms / 1e3
    figures["instrumented_step_s"] = breakdown.instrumented_step_ms / 1e3
    figures["other_s"] = breakdown.other_ms / 1e3
    figures["other_share"] = breakdown.other_share
    if breakdown.recompute:
        figures["recompute_s"] = breakdown.phase("backward").recompute_ms / 1e3
    return figures


def marked_notes(breakdowns: list[MarkedBreakdown]) -> list[str]:
    notes = [
        "recorded by marks at module and autograd edges in steps of their own (a kit before the timeline "
        "attribution): part times are of the instrumented step, which the marks lengthened; their shares are of "
        "that step, not of the plain one"
    ]
    notes += [
        f"parts add up to {b.modules_ms - b.overlap_ms:.4g} ms of the instrumented step's {b.instrumented_step_ms:.4g} ms; "
        f"other {b.other_ms:.4g} ms ({b.other_share:.1%}); instrumented minus plain step: {b.instrumentation_overhead_ms:.4g} ms"
        for b in breakdowns
    ]
    return notes
