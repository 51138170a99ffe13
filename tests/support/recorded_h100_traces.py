"""The two real H100 traces of the recorded one-GPU run (tests/fixtures/gpu_traces, whose SOURCE
says what they hold and lack), beside the plain steps that run timed (its rank files, in
tests/fixtures/h100x1-run/run.tgz): what kit.measure.breakdown makes of a real GPU's step."""

from __future__ import annotations

import functools
import gzip
import json
import tarfile
from typing import NamedTuple

from kit.measure.breakdown import summarize_steps, timeline
from kit.rundir.breakdown import Breakdown, MarkedBreakdown
from kit.rundir.schema import RankSample, Result
from kit.workloads.step_timeline import METHOD, PROFILERS, TIMERS
from support import FIXTURES

CASES = ("profile.llama2-7b.base.g1", "profile.llama2-7b.r.g1.b16")


class RecordedCase(NamedTuple):
    trace: dict
    rank: RankSample  # rank 0 as the recorded run wrote it: a breakdown by marks
    marked: MarkedBreakdown  # the same, read
    result: Result
    breakdown: Breakdown  # the trace's timeline beside the recorded plain steps


@functools.cache
def recorded(case_id: str) -> RecordedCase:
    with gzip.open(FIXTURES / "gpu_traces" / f"h100x1-{case_id}.json.gz", "rt") as handle:
        trace = json.load(handle)
    folder = f"runh100/cases/{case_id}"
    with tarfile.open(FIXTURES / "h100x1-run" / "run.tgz") as archive:
        rank = RankSample.model_validate_json(archive.extractfile(f"{folder}/runs/1/rank-0.json").read())
        result = Result.model_validate_json(archive.extractfile(f"{folder}/result.json").read())
    marked = MarkedBreakdown.model_validate(rank.details)
    phases = marked.phases
    plain = [{p.name: p.wall_ms_per_step[k] for p in phases} for k in range(len(phases[0].wall_ms_per_step))]
    # recorded with every operator (SOURCE), hence its profiler
    breakdown = summarize_steps(
        timeline(trace, "cuda"),
        plain,
        device="cuda",
        timer=TIMERS["cuda"],
        profiler=PROFILERS["full"],
        micro_batch=marked.micro_batch,
        seq_len=marked.seq_len,
        attention=marked.attention,
        recompute=marked.recompute,
        optimizer=marked.optimizer,
        measured_steps=marked.measured_steps,
        trace_file=marked.trace_file,
        method=list(METHOD),
    )
    return RecordedCase(trace, rank, marked, result, breakdown)
