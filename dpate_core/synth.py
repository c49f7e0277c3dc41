"""The paper's synthetic data (Synth, section 5) and seeded site splitters, for simulations only.

Pure numpy with a seeded :class:`numpy.random.Generator`: simulation data, never a source of DP
noise.

Synth: ``X_i`` uniform on ``{0, 1/(|X|-1), ..., 1}``; ``W_i ~ Bernoulli(sigmoid(a (2 X_i - 1)))``
with ``a ~ U[-1, 1]`` unless given (larger ``|a|``: more imbalanced strata);
``Y_i = b X_i + tau W_i + e_i`` with ``tau = 0.5``, ``b ~ U[0, 0.4]``, ``e_i ~ U[0, 0.1]``, so
``0 <= Y_i <= 1`` and ``B = 1``. The covariate is returned as the integer stratum id
``k = X_i (|X| - 1)`` in ``0 .. |X|-1``, as the core estimators expect.

Splitters return one array of record indices per site. The paper's three-site proportions are
``1:1:1``, ``3:2:1``, ``9:9:2`` and ``18:1:1`` (:data:`PAPER_PROPORTIONS`); its two-site setting is
an equal random split; STAR's sites are its urbanicity column (:func:`split_by_labels`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "PAPER_PROPORTIONS",
    "SYNTH_TAU",
    "SynthData",
    "SynthStrata",
    "parse_proportions",
    "split_by_labels",
    "split_equal",
    "split_proportions",
    "split_sizes",
    "synth",
    "synth_strata",
]

SYNTH_TAU = 0.5

PAPER_PROPORTIONS: dict[str, tuple[int, ...]] = {
    "1:1:1": (1, 1, 1),
    "3:2:1": (3, 2, 1),
    "9:9:2": (9, 9, 2),
    "18:1:1": (18, 1, 1),
}


@dataclass(frozen=True)
class SynthData:
    """One Synth draw. ``x`` holds stratum ids; ``x_values`` the covariate ``X_i`` in ``[0, 1]``."""

    w: np.ndarray
    y: np.ndarray
    x: np.ndarray
    domain_size: int
    a: float
    b: float
    tau: float = SYNTH_TAU
    bound: float = 1.0

    @property
    def n(self) -> int:
        return int(self.w.shape[0])

    @property
    def x_values(self) -> np.ndarray:
        return self.x / (self.domain_size - 1)


def synth(
    n: int,
    domain_size: int,
    *,
    a: float | None = None,
    b: float | None = None,
    seed: int | np.random.Generator | None = None,
) -> SynthData:
    """Draw the paper's Synth data set (section 5, "Datasets").

    ``a`` (imbalance) is drawn from ``U[-1, 1]`` and ``b`` from ``U[0, 0.4]`` when not given, in
    that order, before the records. ``seed``: an int or a Generator (same seed, same data).
    """
    if n < 1:
        raise ValueError(f"n ({n}) must be at least 1")
    if domain_size < 2:
        raise ValueError(
            f"|X| ({domain_size}) must be at least 2: Synth's covariate takes the values "
            f"0, 1/(|X|-1), ..., 1"
        )
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    a_val = float(rng.uniform(-1.0, 1.0)) if a is None else float(a)
    b_val = float(rng.uniform(0.0, 0.4)) if b is None else float(b)
    if not 0.0 <= b_val <= 0.4:
        raise ValueError(f"b ({b_val}) must lie in [0, 0.4] so that Y stays in [0, 1]")
    x = rng.integers(0, domain_size, n, dtype=np.int64)
    xv = x / (domain_size - 1)
    p = 1.0 / (1.0 + np.exp(-a_val * (2.0 * xv - 1.0)))
    w = (rng.random(n) < p).astype(np.int8)
    e = rng.uniform(0.0, 0.1, n)
    y = np.minimum(b_val * xv + SYNTH_TAU * w + e, 1.0)  # <= 1 already; guards rounding
    return SynthData(w=w, y=y, x=x, domain_size=domain_size, a=a_val, b=b_val)


def parse_proportions(text: str) -> tuple[int, ...]:
    """``"9:9:2"`` -> ``(9, 9, 2)``."""
    try:
        parts = tuple(int(p) for p in text.split(":"))
    except ValueError:
        raise ValueError(f"proportions ({text!r}) must be positive integers like '3:2:1'") from None
    if len(parts) < 1 or any(p <= 0 for p in parts):
        raise ValueError(f"proportions ({text!r}) must be positive integers like '3:2:1'")
    return parts


def split_sizes(n: int, proportions: Sequence[int]) -> tuple[int, ...]:
    """Site sizes for ``n`` records in the given proportions, summing to ``n`` exactly.

    Each site gets ``floor(n p_j / sum p)``; the records left over go one each to the sites with
    the largest remainders (ties: the earlier site). Deterministic, no randomness.
    """
    props = [int(p) for p in proportions]
    if not props or any(p <= 0 for p in props):
        raise ValueError(f"proportions ({props}) must be positive integers")
    if n < len(props):
        raise ValueError(f"cannot split {n} records into {len(props)} non-empty sites")
    total = sum(props)
    shares = [Fraction(n * p, total) for p in props]
    sizes = [int(s) for s in shares]
    left = n - sum(sizes)
    order = sorted(range(len(props)), key=lambda j: (-(shares[j] - sizes[j]), j))
    for j in order[:left]:
        sizes[j] += 1
    return tuple(sizes)


def split_proportions(
    n: int, proportions: Sequence[int] | str, seed: int | np.random.Generator | None
) -> list[np.ndarray]:
    """A random partition of ``range(n)`` into sites of :func:`split_sizes` (seeded).

    Each site's indices are sorted (record order is kept within a site: Algorithm 1's matching
    depends on it).
    """
    props = parse_proportions(proportions) if isinstance(proportions, str) else proportions
    sizes = split_sizes(n, props)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    perm = rng.permutation(n)
    bounds = np.cumsum((0, *sizes))
    return [np.sort(perm[bounds[j] : bounds[j + 1]]) for j in range(len(sizes))]


def split_equal(n: int, sites: int, seed: int | np.random.Generator | None) -> list[np.ndarray]:
    """A random split into ``sites`` sites of (nearly) equal size (the paper's two-site setting)."""
    if sites < 1:
        raise ValueError(f"the number of sites ({sites}) must be at least 1")
    return split_proportions(n, (1,) * sites, seed)


def split_by_labels(
    labels: Sequence[Any] | npt.NDArray[Any], order: Sequence[Any] | None = None
) -> tuple[list[npt.NDArray[np.intp]], list[Any]]:
    """One site per distinct label (e.g. STAR's urbanicity), indices in record order.

    ``order`` fixes the site order; by default sites are ordered by size, largest first (ties by
    label). Returns ``(indices per site, label per site)``. Deterministic.
    """
    labels = np.asarray(labels)
    values, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if order is None:
        ranked = sorted(range(values.size), key=lambda k: (-counts[k], str(values[k])))
    else:
        lookup = {v: k for k, v in enumerate(values.tolist())}
        missing = [o for o in order if o not in lookup]
        if missing:
            raise ValueError(f"labels {missing} in 'order' do not occur in the data")
        ranked = [lookup[o] for o in order]
        unlisted = set(range(values.size)) - set(ranked)
        if unlisted:
            raise ValueError("'order' must list every label that occurs")
    idx = [np.flatnonzero(inverse == k) for k in ranked]
    return idx, [values[k].item() for k in ranked]


@dataclass(frozen=True)
class SynthStrata:
    """One draw of :func:`synth_strata`: records with several covariates (``covariates``: name ->
    the covariate's value per record, numeric or integer-coded), their public bins
    (``levels``: name -> number of levels; ``coded``: name -> the level per record), the stratum
    id ``x`` of their cross-classification (``|X| = prod(levels)``, mixed radix in the order of
    ``levels``), and each record's true effect ``effect`` (its ``Y(1) - Y(0)`` in expectation)."""

    w: np.ndarray
    y: np.ndarray
    x: np.ndarray
    domain_size: int
    covariates: dict[str, np.ndarray]
    coded: dict[str, np.ndarray]
    levels: dict[str, int]
    effect: np.ndarray
    bound: float = 1.0

    @property
    def n(self) -> int:
        return int(self.w.shape[0])


#: :func:`synth_strata`'s public bins: age bands (years), severity-score bands (points)
SYNTH_AGE_EDGES = (40.0, 50.0, 60.0, 70.0, 80.0)
SYNTH_SEVERITY_EDGES = (2.0, 4.0, 6.0)


def synth_strata(n: int, *, seed: int | np.random.Generator | None = None) -> SynthStrata:
    """A Synth with the adjustment set a clinician writes down: five covariates, mixed numeric
    and categorical, whose cross-classification has 384 strata filled very unevenly (most hold
    a handful of records at a few thousand per site), a confounded treatment and an effect that
    varies with the covariates. Simulations only (seeded numpy).

    Covariates: ``age`` (numeric, ~N(62, 12) clipped to [18, 95], six public bands at
    :data:`SYNTH_AGE_EDGES`), ``sex`` (binary), ``diagnosis`` (four categories with shares
    0.5, 0.25, 0.15, 0.1), ``severity`` (a numeric score in [0, 10], Gamma(2, 1.5) clipped, four
    bands at :data:`SYNTH_SEVERITY_EDGES`), ``comorbid`` (binary, more likely with age). Treatment
    ``W ~ Bernoulli(sigmoid(-0.4 + 0.5 sev_z - 0.4 age_z + 0.5 [diagnosis 1] - 0.6 [diagnosis 3]
    + 0.3 comorbid))`` (``sev_z``, ``age_z`` standardised numeric values). Outcome: a 30-day
    event ``Y ~ Bernoulli(p)`` with baseline risk ``sigmoid(-2.2 + 0.9 sev_z + 0.5 age_z +
    0.4 comorbid + 0.3 [diagnosis 2])`` lowered by the effect ``-(0.03 + 0.05 sev_band / 3)``
    (larger in severe patients), so ``B = 1`` and outcomes are 0 or 1."""
    if n < 1:
        raise ValueError(f"n ({n}) must be at least 1")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    age = np.clip(rng.normal(62.0, 12.0, n), 18.0, 95.0)
    sex = rng.integers(0, 2, n)
    diagnosis = rng.choice(4, size=n, p=(0.5, 0.25, 0.15, 0.1))
    severity = np.clip(rng.gamma(2.0, 1.5, n), 0.0, 10.0)
    age_z, sev_z = (age - 62.0) / 12.0, (severity - 3.0) / 2.1
    comorbid = (rng.random(n) < _sigmoid(-0.5 + 0.8 * age_z)).astype(np.int64)
    logit_w = (
        -0.4 + 0.5 * sev_z - 0.4 * age_z + 0.5 * (diagnosis == 1) - 0.6 * (diagnosis == 3)
        + 0.3 * comorbid
    )  # fmt: skip
    w = (rng.random(n) < _sigmoid(logit_w)).astype(np.int8)
    coded = {
        "age": np.searchsorted(np.asarray(SYNTH_AGE_EDGES), age, side="right"),
        "sex": sex,
        "diagnosis": diagnosis,
        "severity": np.searchsorted(np.asarray(SYNTH_SEVERITY_EDGES), severity, side="right"),
        "comorbid": comorbid,
    }
    levels = {"age": 6, "sex": 2, "diagnosis": 4, "severity": 4, "comorbid": 2}
    base = _sigmoid(-2.2 + 0.9 * sev_z + 0.5 * age_z + 0.4 * comorbid + 0.3 * (diagnosis == 2))
    effect = -(0.03 + 0.05 * coded["severity"] / 3.0)
    risk = np.clip(base + effect * w, 0.0, 1.0)
    effect = np.clip(base + effect, 0.0, 1.0) - base  # the effect on the risk scale, clipped
    y = (rng.random(n) < risk).astype(np.float64)
    x = np.zeros(n, dtype=np.int64)
    for name, size in levels.items():
        x = x * size + coded[name].astype(np.int64)
    covariates = {"age": age, "sex": sex, "diagnosis": diagnosis, "severity": severity,
                  "comorbid": comorbid}  # fmt: skip
    return SynthStrata(
        w=w,
        y=y,
        x=x,
        domain_size=int(np.prod(list(levels.values()))),
        covariates=covariates,
        coded={k: v.astype(np.int64) for k, v in coded.items()},
        levels=levels,
        effect=effect,
    )


def _sigmoid(z: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-z))
