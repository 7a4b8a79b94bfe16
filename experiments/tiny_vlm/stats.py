"""Paired statistics over seeds, without scipy.

A seed fixes the initialisation and the training data of every arm, so two arms are compared on
their per-seed differences d_1..d_n:

- mean, sample standard deviation (n - 1), and the 95% confidence interval of the mean from
  Student's t with n - 1 degrees of freedom;
- the paired t-test (two-sided);
- the sign-flip permutation test (two-sided; Fisher's randomisation test): under "no
  difference" each d_i is as likely to have had the other sign, so p is the share of the 2^n
  sign patterns whose |sum| reaches the observed |sum| (all of them for n <= 20, else a fixed-seed
  sample). It assumes no normality; with n seeds it cannot go below 2 / 2^n (n = 3: 0.25);
- Holm's step-down adjustment for a family of such tests.

Student's t distribution comes from the regularised incomplete beta function, evaluated by its
continued fraction (modified Lentz): P(|T| > t) = I_x(df/2, 1/2) with x = df / (df + t^2).
"""

from __future__ import annotations

import math
import random
from typing import Dict, List, Optional, Sequence

EXACT_UP_TO = 20
SAMPLED = 200_000


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= c * d
        if abs(c * d - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc: x = {x} is outside [0, 1]")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (0.5 <= p < 1), by bisection on t_two_sided."""
    if not 0.5 <= p < 1.0:
        raise ValueError(f"t_quantile: p = {p} (expected 0.5 <= p < 1)")
    lo, hi = 0.0, 1.0
    while t_two_sided(hi, df) > 2 * (1 - p):
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided(mid, df) > 2 * (1 - p):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def sign_flip_p(diffs: Sequence[float]) -> float:
    """Two-sided p of the sign-flip permutation test of mean(diffs) = 0."""
    d = [abs(x) for x in diffs]
    observed = abs(sum(diffs))
    tol = 1e-9 * max([1.0] + d)
    n = len(d)
    if n <= EXACT_UP_TO:
        sums = [0.0]
        for x in d:   # every sign pattern's sum, one value at a time (2^n of them)
            sums = [s + x for s in sums] + [s - x for s in sums]
        return sum(1 for s in sums if abs(s) >= observed - tol) / len(sums)
    rng = random.Random(0)
    hits = sum(1 for _ in range(SAMPLED)
               if abs(sum(x if rng.random() < 0.5 else -x for x in d)) >= observed - tol)
    return (hits + 1) / (SAMPLED + 1)


def paired(diffs: Sequence[float], level: float = 0.95) -> Dict[str, Optional[float]]:
    """Everything the report shows about one paired contrast."""
    diffs = [float(x) for x in diffs]
    n = len(diffs)
    out: Dict[str, Optional[float]] = {"n": n, "mean": None, "sd": None, "ci_low": None, "ci_high": None,
                                       "t": None, "p_t": None, "p_sign_flip": None,
                                       "positive": sum(1 for x in diffs if x > 0),
                                       "negative": sum(1 for x in diffs if x < 0)}
    if n == 0:
        return out
    mean = sum(diffs) / n
    out["mean"] = mean
    out["p_sign_flip"] = sign_flip_p(diffs)
    if n < 2:
        return out
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (n - 1))
    se = sd / math.sqrt(n)
    half = t_quantile(0.5 + level / 2, n - 1) * se
    out.update(sd=sd, ci_low=mean - half, ci_high=mean + half)
    if se > 0:
        out["t"] = mean / se
        out["p_t"] = t_two_sided(mean / se, n - 1)
    else:
        out["t"], out["p_t"] = (0.0, 1.0) if mean == 0 else (math.copysign(math.inf, mean), 0.0)
    return out


def holm(pvalues: Sequence[Optional[float]]) -> List[Optional[float]]:
    """Holm's step-down adjusted p-values (None stays None and is not counted)."""
    known = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(known)
    out: List[Optional[float]] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out
