"""Welch's t-test for A/B comparisons of per-run values.

Two runs of a case rarely have equal variances (different machines, different noise), so the
test is Welch's (Welch 1947), with the Welch–Satterthwaite degrees of freedom. The two-sided
p-value is the regularized incomplete beta function I_x(df/2, 1/2) at x = df / (df + t^2);
scipy computes it when it is installed, otherwise the continued fraction below does (DLMF 8.17.22,
evaluated with the modified Lentz method).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

SIGNIFICANCE_LEVEL = 0.05
CONTINUED_FRACTION_TOLERANCE = 1e-14
CONTINUED_FRACTION_MAX_TERMS = 500
TINY = 1e-300


class WelchTest(BaseModel):
    """Welch's t-test of two samples; `p_value` is None with `reason` when it is undefined."""

    t: float | None = None
    df: float | None = None
    p_value: float | None = None
    significant: bool | None = None
    reason: str | None = None
    p_value_method: Literal["scipy", "continued fraction"] | None = None


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of I_x(a, b) (DLMF 8.17.22), converging fast for x < (a+1)/(a+b+2).

    Modified Lentz: `ratio_c` and `ratio_d` are the running ratios C_m and 1/D_m of successive
    numerators and denominators; TINY keeps either from reaching zero."""

    def nonzero(value: float) -> float:
        return TINY if abs(value) < TINY else value

    ratio_c, ratio_d = 1.0, 1.0 / nonzero(1.0 - (a + b) * x / (a + 1.0))
    fraction = ratio_d
    for m in range(1, CONTINUED_FRACTION_MAX_TERMS + 1):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for coefficient in (even, odd):
            ratio_d = 1.0 / nonzero(1.0 + coefficient * ratio_d)
            ratio_c = nonzero(1.0 + coefficient / ratio_c)
            step = ratio_c * ratio_d
            fraction *= step
        if abs(step - 1.0) < CONTINUED_FRACTION_TOLERANCE:
            return fraction
    raise ArithmeticError(f"incomplete beta: no convergence for x={x}, a={a}, b={b}")


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for 0 <= x <= 1 and a, b > 0, using the symmetry I_x(a,b) = 1 - I_{1-x}(b,a)
    where the fraction would converge slowly."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must lie in [0, 1], not {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(1.0 - x, b, a) / b


def _incomplete_beta(x: float, a: float, b: float) -> tuple[float, Literal["scipy", "continued fraction"]]:
    try:
        from scipy.special import betainc
    except ImportError:
        return regularized_incomplete_beta(x, a, b), "continued fraction"
    return float(betainc(a, b, x)), "scipy"


def two_sided_p_value(t: float, df: float) -> tuple[float, Literal["scipy", "continued fraction"]]:
    """P(|T| >= |t|) for Student's t with df degrees of freedom."""
    return _incomplete_beta(df / (df + t * t), df / 2.0, 0.5)


def welch_t_test(a: Sequence[float], b: Sequence[float], alpha: float = SIGNIFICANCE_LEVEL) -> WelchTest:
    """Is the mean of `b` different from the mean of `a`? Needs two or more values on each side."""
    if len(a) < 2 or len(b) < 2:
        return WelchTest(reason=f"needs at least 2 runs on each side (A: {len(a)}, B: {len(b)})")
    variance_a, variance_b = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    spread = variance_a + variance_b
    if spread == 0:
        return WelchTest(reason="no run-to-run variation on either side: the test is undefined")
    t = (statistics.fmean(b) - statistics.fmean(a)) / math.sqrt(spread)
    df = spread**2 / (variance_a**2 / (len(a) - 1) + variance_b**2 / (len(b) - 1))
    p_value, method = two_sided_p_value(t, df)
    return WelchTest(t=t, df=df, p_value=p_value, significant=p_value < alpha, p_value_method=method)
