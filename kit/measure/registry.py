"""The stages of the protocol, one unit each (kit/measure/<stage>.py, see kit.measure.unit), in the
order the report shows them, and the unit that measures a case.

The comparisons across stages (kit/report/sections/megatron.py, kit/report/sections/variants.py) read the stages'
headline figures through `unit_of`, so they are listed where the report assembles its sections
(kit/report/sections/stages.py), not here.
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.measure.comm import COMM
from kit.measure.energy import energy_case_metrics
from kit.measure.maxbatch import MAXBATCH
from kit.measure.profile import PROFILE
from kit.measure.scaling import SCALING
from kit.measure.serve import SERVE
from kit.measure.soak import SOAK
from kit.measure.throttling import throttle_notes
from kit.measure.training import FINETUNE, PRETRAIN
from kit.measure.unit import StageUnit
from kit.plan.protocol import Case
from kit.rundir.schema import Metric, RunSample

STAGES: tuple[StageUnit, ...] = (PRETRAIN, MAXBATCH, SCALING, PROFILE, FINETUNE, SERVE, COMM)
# Stages a run asks for beyond its profile's (kit run --soak): a section only where planned.
ON_REQUEST: tuple[StageUnit, ...] = (SOAK,)
BY_NAME = {stage.name: stage for stage in (*STAGES, *ON_REQUEST)}
# A stage the protocol names and the kit has no unit for is measured as the first unit of its workload.
BY_WORKLOAD = {"train": PRETRAIN, "profile": PROFILE, "serve": SERVE, "comm": COMM}


def unit_of(case: Case) -> StageUnit | None:
    """The unit that judges and measures `case`: the max-batch unit for a case whose runs are a
    search's trials, else its stage's, else its workload's; None for a workload no unit measures
    (its cases record samples and no metrics)."""
    if case.max_batch_search is not None:
        return MAXBATCH
    unit = BY_NAME.get(case.stage)
    return unit if unit is not None and unit is not MAXBATCH else BY_WORKLOAD.get(case.workload)


def measure(case: Case, runs: Sequence[RunSample]) -> tuple[dict[str, Metric | None], list[str]]:
    """Everything an ok case's result.json carries: its unit's figures and, beside them, joules
    per token and mean power per GPU (kit/measure/energy.py) or why they are absent, and whether a
    measured window was throttled (kit/measure/throttling.py)."""
    unit = unit_of(case)
    assert unit is not None and unit.case_metrics is not None, "measured only where the case's unit has figures"
    found, notes = unit.case_metrics(case, runs)
    energy, energy_notes = energy_case_metrics(case, runs)
    return {**found, **energy}, [*notes, *energy_notes, *throttle_notes(runs)]
