"""Which node of a fleet is unlike the others on one figure: the rule the fleet report states.

A purchase of N identical servers is accepted against its slowest nodes, so a node is judged
against the fleet's median node, on the side where it is worse (every headline figure is a rate:
tokens/s, output tokens/s, bus bandwidth; lower is worse). Two tests, each naming the node:

- tolerance: its mean is more than `tolerance` (a fraction, 0.10 by default) below the fleet
  median of the nodes' means. A tolerance in per cent of the median is what a purchase states,
  and it works for a fleet of two. The median absolute deviation does not: with two nodes each
  lies exactly one MAD from the median, whatever the gap, and in a fleet of near-identical nodes
  the MAD is so small that it would flag differences of a fraction of a per cent.
- apart: every one of its runs is below every run of every other node, so its runs' spread does
  not overlap the rest of the fleet's. This is named beside the figure and never flags a node by
  itself: of two identical nodes of three runs each, one falls wholly below the other by chance
  once in ten (2 of the 20 ways to order six runs), so a 30-case plan would flag a sound node on
  about three cases. Only where every node has two runs or more: a single run has no spread.

A node is flagged by the tolerance test alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pydantic import BaseModel

DEFAULT_TOLERANCE = 0.10
SPREAD_RUNS = 2  # the runs each node needs for the spread test


class NodeFigure(BaseModel):
    """One node's value of one figure: the mean over its independent runs and each run's value."""

    node: str
    mean: float
    per_run: list[float]


class NodeVerdict(BaseModel):
    node: str
    deviation: float | None  # (mean - fleet median) / fleet median; None where the median is 0
    below_tolerance: bool
    apart: bool

    @property
    def flagged(self) -> bool:
        return self.below_tolerance


class FleetFigure(BaseModel):
    """One figure across the fleet: its median over the nodes and each node's verdict."""

    median: float
    tolerance: float
    verdicts: list[NodeVerdict]


def judge_fleet(figures: Sequence[NodeFigure], tolerance: float = DEFAULT_TOLERANCE) -> FleetFigure:
    """Each node's deviation from the fleet median and whether either test flags it (see the
    module's docstring); needs two nodes or more."""
    if len(figures) < 2:
        raise ValueError(f"a fleet figure needs two nodes or more, got {len(figures)}")
    if not 0 < tolerance < 1:
        raise ValueError(f"the tolerance is a fraction between 0 and 1, got {tolerance}")
    median = statistics.median(figure.mean for figure in figures)
    spread = all(len(figure.per_run) >= SPREAD_RUNS for figure in figures)
    verdicts = []
    for figure in figures:
        deviation = (figure.mean - median) / median if median else None
        others = [value for other in figures if other is not figure for value in other.per_run]
        apart = spread and max(figure.per_run) < min(others)
        verdicts.append(
            NodeVerdict(
                node=figure.node,
                deviation=deviation,
                below_tolerance=deviation is not None and deviation < -tolerance,
                apart=apart,
            )
        )
    return FleetFigure(median=median, tolerance=tolerance, verdicts=verdicts)
