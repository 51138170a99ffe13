"""The stages of the protocol, one unit each (kit/stages/<stage>.py, see kit.stages.unit), in the
order the report shows them, and the unit that measures a case.

The comparisons across stages (kit/stages/megatron.py, kit/stages/variants.py) read the stages'
headline figures through `unit_of`, so they are listed where the report assembles its sections
(kit/report/stage_sections.py), not here.
"""


from __future__ import annotations

from collections.abc import Sequence

from kit.energy import energy_case_metrics
from kit.protocol import Case
from kit.results import Metric, RunSample
from kit.stages.comm import COMM
from kit.stages.maxbatch import MAXBATCH
from kit.stages.profile import PROFILE
from kit.stages.scaling import SCALING
from kit.stages.serve import SERVE
from kit.stages.soak import SOAK
from kit.stages.training import FINETUNE, PRETRAIN
from kit.stages.unit import Stage
from kit.throttling import throttle_notes

STAGES: tuple[Stage, ...] = (PRETRAIN, MAXBATCH, SCALING, PROFILE, FINETUNE, SERVE, COMM)
# Stages a run asks for beyond its profile's (kit run --soak): a section only where planned.
ON_REQUEST: tuple[Stage, ...] = (SOAK,)
BY_NAME = {stage.name: stage for stage in (*STAGES, *ON_REQUEST)}
# A stage the protocol names and the kit has no unit for is measured as the first unit of its workload.
BY_WORKLOAD = {"train": PRETRAIN, "profile": PROFILE, "serve": SERVE, "comm": COMM}


def unit_of(case: Case) -> Stage | None:
    """The unit that judges and measures `case`: the max-batch unit for a case whose runs are a
    search's trials, else its stage's, else its workload's; None for a workload no unit measures
    (its cases record samples and no metrics)."""
    if getattr(case.params, "max_batch_search", None) is not None:
        return MAXBATCH
    unit = BY_NAME.get(case.stage)
    return unit if unit is not None and unit is not MAXBATCH else BY_WORKLOAD.get(case.workload)


def measure(case: Case, runs: Sequence[RunSample]) -> tuple[dict[str, Metric | None], list[str]]:
    """Everything an ok case's result.json carries: its unit's figures and, beside them, joules
    per token and mean power per GPU (kit/energy.py) or why they are absent, and whether a
    measured window was throttled (kit/throttling.py)."""
    found, notes = unit_of(case).case_metrics(case, runs)
    energy, energy_notes = energy_case_metrics(case, runs)
    return {**found, **energy}, [*notes, *energy_notes, *throttle_notes(runs)]
