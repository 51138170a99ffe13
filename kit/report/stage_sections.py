"""The stages' sections in the report: each stage's own (kit/stages/<stage>.py), in the stages'
order, with the reason in its place where a stage has nothing to show; then the comparisons
across stages, each where the run has a case it selects."""

from __future__ import annotations

from functools import partial

from kit.protocol import Protocol
from kit.report.forked import in_parallel
from kit.report.loaded_run import LoadedRun
from kit.report.model import Section
from kit.report.stage_common import generic_stage, stage_not_run
from kit.stages.megatron import MEGATRON
from kit.stages.registry import ON_REQUEST, STAGES
from kit.stages.unit import Stage
from kit.stages.variants import VARIANTS

COMPARISONS = (MEGATRON, VARIANTS)


def without_variants(run: LoadedRun) -> LoadedRun:
    """The run as the stage sections lay it out: the variant cases have a section of their own."""
    plan = run.info.plan.model_copy(update={"cases": [c for c in run.info.plan.cases if c.variant is None]})
    return run.model_copy(update={"info": run.info.model_copy(update={"plan": plan})})


def stage_sections(run: LoadedRun, protocol: Protocol) -> list[Section]:
    """Built on the machine's cores at once (kit.report.forked): each draws its own charts."""
    planned = list(dict.fromkeys(case.stage for case in run.info.plan.cases))
    known = {stage.name for stage in (*STAGES, *ON_REQUEST)}
    stages = [*STAGES, *(stage for stage in ON_REQUEST if stage.name in planned),
              *(Stage(name=name, title=name, section=generic_stage) for name in planned if name not in known)]  # fmt: skip
    compared = [comparison for comparison in COMPARISONS if any(comparison.cases(case) for case in run.info.plan.cases)]
    laid_out = without_variants(run)
    return in_parallel(
        [partial(_stage_section, stage, laid_out, protocol) for stage in stages]
        + [partial(comparison.section, comparison, run, protocol) for comparison in compared]
    )


def _stage_section(stage: Stage, run: LoadedRun, protocol: Protocol) -> Section:
    """The stage's own section, or the reason it has none in its place."""
    reason = stage_not_run(stage.name, stage.purpose, run, protocol)
    if reason is not None:
        return Section(anchor=stage.name, title=stage.title, not_run=reason)
    return stage.section(stage, run, protocol)
