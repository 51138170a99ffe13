"""What a serve run's driver records beside its figures (rank-0.json's `details`): the burst's
aggregates, the client's load, the engine's own token count, the roofline, and the sweep's points.

kit.serve.session writes it through this model and every reader (the serving stage, energy,
validity, the report) reads it back through it, by attribute, so a field renamed on one side
cannot be missed on the other. Fields a kit added after a run was recorded are optional, so an
older run still reads; what a reader needs and a run lacks is None.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kit.predictions import ConcurrencyBound, ServingBounds
from kit.serve.aggregate import BurstAggregates, Saturation
from kit.serve.prometheus import ServerCounters


class Recorded(BaseModel):
    """A part of the details: what is not named here (the engine's launch, the client's load) is
    kept as it was written."""

    model_config = ConfigDict(extra="allow")


class NoBound(BaseModel):
    """Why no roofline was computed (a CPU, a GPU the hardware table lacks)."""

    unavailable: str


class TokenCheck(Recorded):
    """The generated tokens the client counted beside the engine's own counters over the same
    interval: equal, or the rows do not hold what the engine did."""

    client_counted: int
    server_counters: ServerCounters
    equal: bool


class SweepPointDetails(Recorded):
    """One point of the sweep: how many requests it planned and sent at its concurrency."""

    concurrency: int
    planned: int
    sent: int
    cut_short: bool
    saturation: Saturation
    bounds: ConcurrencyBound | NoBound


class SweepDetails(Recorded):
    points: list[SweepPointDetails]
    max_point_s: float | None = None
    not_measured: str | None = None
    tokens: TokenCheck
    server_count_mismatches: list[int] = []


class ServeDetails(Recorded):
    aggregates: BurstAggregates | None = None  # the burst's, absent where no request of it finished
    saturation: Saturation | None = None
    tokens: TokenCheck | None = None
    bounds: ServingBounds | NoBound | None = None
    short_outputs: int | None = None  # requests that ended before max_output_tokens (EOS)
    sweep: SweepDetails | None = None
    ignore_eos_note: str | None = None  # an engine that cannot be told to ignore EOS says so

