"""The stages' sections in the report: each stage's own layout (kit/report/sections/<stage>.py),
registered here by the stage's name, in the stages' order, with the reason in its place where a
stage has nothing to show; then the comparisons across stages, each where the run has a case it
selects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from kit.measure.registry import ON_REQUEST, STAGES
from kit.measure.unit import StageUnit
from kit.plan.protocol import Protocol
from kit.report.forked import in_parallel
from kit.report.loaded_run import LoadedRun
from kit.report.model import Section
from kit.report.sections.comm import comm_section
from kit.report.sections.common import generic_stage, stage_not_run
from kit.report.sections.maxbatch import maxbatch_section
from kit.report.sections.megatron import MEGATRON
from kit.report.sections.profile import profile_section
from kit.report.sections.scaling import scaling_section
from kit.report.sections.serve import serve_section
from kit.report.sections.soak import soak_section
from kit.report.sections.training import train_matrix
from kit.report.sections.variants import VARIANTS

LayOut = Callable[[StageUnit, LoadedRun, Protocol], Section]


@dataclass(frozen=True)
class StageSection:
    """How the report lays out a stage: its section, and what the section shows once the stage
    runs (said in its place while it does not)."""

    lay_out: LayOut
    purpose: str | None = None


SECTIONS: dict[str, StageSection] = {
    "pretrain": StageSection(train_matrix),
    "maxbatch": StageSection(
        maxbatch_section,
        "the largest micro-batch each pre-training method holds, found by trials, "
        "and the throughput and memory there (paper Table IV)",
    ),
    "scaling": StageSection(scaling_section),
    "profile": StageSection(
        profile_section,
        "time per phase and per module of one Llama2-7B step, and the GPU idle share (paper Tables V-VIII)",
    ),
    "finetune": StageSection(train_matrix),
    "serve": StageSection(
        serve_section,
        "output tokens/s beside its roofline bound, requests/s and the per-request latency "
        "distribution of each engine under a burst (paper Sec. V)",
    ),
    "comm": StageSection(
        comm_section,
        "bus bandwidth and time of each NCCL collective over message sizes, NVLink vs PCIe (paper Sec. VI)",
    ),
    "soak": StageSection(
        soak_section,
        "one training case and the serving burst measured on end (kit run --soak MINUTES): "
        "throughput, clocks and temperature over time, the first minute against the last",
    ),
}
GENERIC = StageSection(generic_stage)  # a stage the protocol names and the kit has no layout for


def without_variants(run: LoadedRun) -> LoadedRun:
    """The run as the stage sections lay it out: the variant cases have a section of their own."""
    plan = run.info.plan.model_copy(update={"cases": [c for c in run.info.plan.cases if c.variant is None]})
    return run.model_copy(update={"info": run.info.model_copy(update={"plan": plan})})


def stage_sections(run: LoadedRun, protocol: Protocol) -> list[Section]:
    """Built on the machine's cores at once (kit.report.forked): each draws its own charts."""
    planned = list(dict.fromkeys(case.stage for case in run.info.plan.cases))
    known = {stage.name for stage in (*STAGES, *ON_REQUEST)}
    stages = [
        *STAGES,
        *(stage for stage in ON_REQUEST if stage.name in planned),
        *(StageUnit(name=name, title=name) for name in planned if name not in known),
    ]
    compared = [
        comparison for comparison in (MEGATRON, VARIANTS) if any(comparison.cases(case) for case in run.info.plan.cases)
    ]
    laid_out = without_variants(run)
    return in_parallel(
        [partial(_stage_section, stage, laid_out, protocol) for stage in stages]
        + [partial(comparison.section, comparison, run, protocol) for comparison in compared]
    )


def _stage_section(stage: StageUnit, run: LoadedRun, protocol: Protocol) -> Section:
    """The stage's own section, or the reason it has none in its place."""
    layout = SECTIONS.get(stage.name, GENERIC)
    reason = stage_not_run(stage.name, layout.purpose, run, protocol)
    if reason is not None:
        return Section(anchor=stage.name, title=stage.title, not_run=reason)
    return layout.lay_out(stage, run, protocol)
