"""The power of a paired design, computed before it runs: a paired t test (:func:`paired_t_power`) and an
equivalence test by two one-sided t tests (:func:`tost_power`), from the noncentral t distribution (scipy.stats).
"""

from __future__ import annotations

import math

from scipy import stats as sps

from harness.uncertainty.stats import _check_alpha


def paired_t_power(sd: float, n: int, effect: float, alpha: float = 0.05) -> float:
    """Power of the two-sided one-sample (paired) t test at level ``alpha`` with ``n`` pairs, when the per-pair
    differences are normal with mean ``effect`` and standard deviation ``sd`` (same unit).

    Exact, from the noncentral t distribution (df n − 1, noncentrality effect / (sd / sqrt(n))).
    Raises ValueError for: n < 2, sd <= 0, alpha outside (0, 1).
    Source: Cohen 1988, Statistical Power Analysis for the Behavioral Sciences, ch. 2; the noncentral t
    (``scipy.stats.nct``).
    """
    n, sd, a = _power_args(n, sd, alpha)
    df, nc = n - 1, float(effect) / (sd / math.sqrt(n))
    c = float(sps.t.ppf(1 - a / 2, df))
    return float(sps.nct.sf(c, df, nc) + sps.nct.cdf(-c, df, nc))


def tost_power(sd: float, n: int, margin: float, alpha: float = 0.05, delta: float = 0.0) -> float:
    """Power of the two one-sided tests (TOST) of equivalence within ``±margin`` at level ``alpha`` each (the
    1 − 2α interval inside the margin), ``n`` normal paired differences of mean ``delta`` and std ``sd``.

    Exact: the integral over the sample standard deviation S (sd·sqrt(χ²_{n−1}/(n − 1))) of the chance that the
    mean lies within ``margin − t_{1−α, n−1} S / sqrt(n)`` of 0 (``scipy.integrate.quad``).
    Raises ValueError for: n < 2, sd <= 0, margin <= 0, alpha outside (0, 0.5).
    Source: Schuirmann 1987, "A comparison of the two one-sided tests procedure and the power approach for
    assessing the equivalence of average bioavailability", J. Pharmacokinet. Biopharm. 15(6):657-680.
    """
    from scipy import integrate

    n, sd, a = _power_args(n, sd, alpha)
    m = float(margin)
    if not m > 0:
        raise ValueError(f"margin must be > 0, got {margin!r}")
    if not a < 0.5:  # audit18 A18-02: a power below 0, or a division by zero at 0.5
        raise ValueError(
            f"alpha={alpha!r}: TOST at level alpha each is the 1 - 2·alpha interval, empty for alpha >= 0.5; give "
            "alpha < 0.5, e.g. 0.05"
        )
    df, se = n - 1, sd / math.sqrt(n)
    c = float(sps.t.ppf(1 - a, df))

    def accept(s: float) -> float:
        half = m - c * s / math.sqrt(n)
        inside = sps.norm.cdf((half - delta) / se) - sps.norm.cdf((-half - delta) / se)
        return float(inside * sps.chi.pdf(s / sd * math.sqrt(df), df) * math.sqrt(df) / sd)

    return float(integrate.quad(accept, 0.0, m * math.sqrt(n) / c)[0])


def _power_args(n: int, sd: float, alpha: float) -> "tuple[int, float, float]":
    if isinstance(n, bool) or int(n) != n or n < 2:
        raise ValueError(f"n must be an integer >= 2 (pairs), got {n!r}")
    if not float(sd) > 0:
        raise ValueError(f"sd must be > 0 (the per-pair difference's standard deviation), got {sd!r}")
    return int(n), float(sd), _check_alpha(alpha)
