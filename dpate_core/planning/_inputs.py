"""What a prediction of :mod:`dpate_core.planning` starts from and gives per site: the public design
of a site's release (:class:`SiteDesign`), the stated assumptions about data it never sees
(:class:`Assumptions`), the closed forms every prediction shares (:func:`clamped_mean`,
:func:`balanced_counts`) and one site's prediction (:class:`SitePrediction`). Public inputs only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from statistics import NormalDist
from typing import Any

import numpy as np

from dpate_core.privacy import BudgetSplit, Number, PrivacyParams, exact

__all__ = [
    "Assumptions",
    "PredictionInputs",
    "SiteDesign",
    "SitePrediction",
    "balanced_counts",
    "clamped_mean",
    "spread_counts",
]


@dataclass(frozen=True)
class Assumptions:
    """What a prediction assumes about data it never sees. ``outcome_sd=None``: ``B/2``;
    ``occupied_strata=None``: every one of the ``|X|`` strata holds records (each arm's records
    spread evenly over them); a number ``K``: the records fill ``K`` strata evenly and the rest
    are empty (with unevenly filled strata, ``K`` is their effective number ``N^2 / sum_x
    N_x^2``: docs/explanation/inference.md, "Assumptions")."""

    arm_share: float = 0.5
    outcome_sd: float | None = None
    effect: float = 0.0
    occupied_strata: float | None = None
    #: the outcome's mean (e.g. a baseline risk); None: ``B/2``, the middle of the range
    outcome_mean: float | None = None
    #: the crude difference in means less the effect (how far confounding moves the unadjusted
    #: comparison): the propensity model's noise moves the share of it its bands remove
    confounding: float = 0.0
    #: the sd of the true propensity's logit over the records (how well the covariates predict
    #: the treatment; 1: a c-statistic of about 0.76); None: 1. The propensity estimator's model
    #: noise share is its noise against this spread; the adjusted estimator's assumed counts
    #: split each stratum at a treated share that varies with it (:func:`spread_counts`; None:
    #: the same share in every stratum)
    propensity_sd: float | None = None
    #: the propensity estimator's effective number of usable bands per release (``N^2 / sum_b
    #: N_b^2``, between 1 and ``K``); None: predicted by simulating the noisy model's band edges
    #: from public inputs (levels equally common, numeric covariates around the middle of their
    #: bounds, no covariate associated with the treatment: docs/research/propensity.md)
    band_occupancy: float | None = None
    #: a treated share per site where it differs from :attr:`arm_share`, as ``(site id, share)``
    #: pairs (public knowledge of a site's case mix, e.g. from its registry's published figures)
    site_arm_shares: tuple[tuple[str, float], ...] = ()
    #: the propensity estimator's numeric covariates with public bounds and no bins, in the
    #: spec's order: each one's assumed ``(mean, sd)`` over the records, on its value rescaled
    #: to ``[-1, 1]`` by the bounds (``u = (x - mid) / half``); empty: every one around the
    #: middle of its bounds with sd a third of their half-width. Earnings mostly near 0 on
    #: bounds up to 40,000 are ``(-0.9, 0.2)``: the noisy model's slopes are steeper there
    numeric_covariates: tuple[tuple[float, float], ...] = ()
    #: the propensity estimator's categorical covariates (the spec's covariates that give strata,
    #: in its order, those with more than one level): each one's assumed share of the records at
    #: each of its levels, in the spec's level order (positive, summing to 1); empty: every
    #: covariate's levels equally common. A rare level's noisy counts are noisier and its term
    #: in the model's index more extreme: the noise share and the bands' occupancy move
    level_shares: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:
        for site, share in ((None, self.arm_share), *self.site_arm_shares):
            if not 0 < share < 1:
                where = "" if site is None else f" of site {site!r}"
                raise ValueError(
                    f"treated share{where} ({share}) must lie strictly between 0 and 1"
                )
        for j, shares in enumerate(self.level_shares):
            if len(shares) < 2 or min(shares) <= 0 or abs(math.fsum(shares) - 1.0) > 1e-6:
                raise ValueError(
                    f"categorical covariate {j + 1}'s assumed level shares ({list(shares)}) "
                    f"must be one positive share per level (at least 2) summing to 1"
                )
        for j, (mean, sd) in enumerate(self.numeric_covariates):
            if not (-1 <= mean <= 1 and 0 < sd <= 1):
                raise ValueError(
                    f"numeric covariate {j + 1}'s assumed mean ({mean}) and sd ({sd}) on the "
                    f"rescaled [-1, 1] must lie within the bounds (mean in [-1, 1], sd in "
                    f"(0, 1]): state values inside the covariate's public bounds"
                )

    def for_site(self, site_id: str) -> Assumptions:
        """These assumptions as one site's prediction reads them: :attr:`arm_share` is the
        site's own treated share when :attr:`site_arm_shares` gives one."""
        own = dict(self.site_arm_shares).get(site_id)
        return self if own is None else replace(self, arm_share=own)

    def mean(self, bound: float) -> float:
        """The assumed outcome mean, ``B/2`` unless given."""
        return bound / 2.0 if self.outcome_mean is None else float(self.outcome_mean)

    def sd(self, bound: float) -> float:
        return bound / 2.0 if self.outcome_sd is None else float(self.outcome_sd)

    def occupied(self, domain_size: int) -> int:
        """How many of the ``|X|`` strata hold records: :attr:`occupied_strata` rounded, at most
        ``|X|`` and at least 1 (all of them when not given)."""
        if self.occupied_strata is None:
            return int(domain_size)
        if not self.occupied_strata >= 1:
            raise ValueError(
                f"occupied strata ({self.occupied_strata}) must be at least 1 (how many of the "
                f"|X| strata hold records)"
            )
        return max(1, min(int(domain_size), round(self.occupied_strata)))

    def describe(self, bound: float) -> list[str]:
        sd = (
            f"outcome sd within arm and stratum {self.sd(bound):g} (B/2: the worst case for "
            f"outcomes in [0, B]; give --outcome-sd for a better guess)"
            if self.outcome_sd is None
            else f"outcome sd within arm and stratum {self.sd(bound):g} (user-supplied)"
        )
        spread = (
            "each arm's records spread evenly over the |X| strata"
            if self.occupied_strata is None
            else f"the records fill {self.occupied_strata:g} strata evenly, the rest are empty "
            "(user-supplied; the effective number N^2 / sum N_x^2 where strata fill unevenly)"
        )
        return [
            (
                f"treated share {self.arm_share:g} at every site"
                if not self.site_arm_shares
                else f"treated share {self.arm_share:g}, except "
                + ", ".join(f"{site} {share:g}" for site, share in self.site_arm_shares)
                + " (user-supplied per site)"
            ),
            spread,
            sd,
            f"effect {self.effect:g} and outcome mean {self.mean(bound):g}"
            + (" (B/2)" if self.outcome_mean is None else " (user-supplied)")
            + " (the effect enters the matching variance estimate; both enter the adjusted "
            "estimator's count noise through arm means mean +- effect/2)",
            f"confounding {self.confounding:g} (the crude difference less the effect: the "
            "propensity model's noise variance; give --confounding)",
            "sd of the true propensity's logit "
            + (
                "1 (a c-statistic of about 0.76; give --propensity-sd) (the propensity model's "
                "noise share); the adjusted estimator: the same treated share in every stratum"
                if self.propensity_sd is None
                else f"{self.propensity_sd:g} (user-supplied) (the propensity model's noise "
                "share; the adjusted estimator's treated share varies between strata with it)"
            ),
            "propensity bands: "
            + (
                "occupancy predicted from the model's noise ("
                + (
                    "categorical levels equally common (give --level-shares), "
                    if not self.level_shares
                    else "categorical levels at the stated shares (user-supplied), "
                )
                + (
                    "numeric covariates around the middle of their bounds with sd a third of "
                    "their half-width (give --covariate-mean, --covariate-sd)"
                    if not self.numeric_covariates
                    else "numeric covariates at the stated means and sds (user-supplied; "
                    "unstated ones around the middle of their bounds)"
                )
                + ", none associated with the treatment; give --band-occupancy)"
                if self.band_occupancy is None
                else f"{self.band_occupancy:g} effectively filled bands per release (user-supplied)"
            ),
        ]


@dataclass(frozen=True)
class SiteDesign:
    """The public design of one site's release."""

    site_id: str
    n: int
    epsilon: Fraction
    delta: Fraction
    split: tuple[Fraction, ...]

    @classmethod
    def of(
        cls,
        site_id: str,
        n: int,
        epsilon: Number,
        delta: Number = 0,
        split: Sequence[Number] | None = None,
        parts: int = 2,
    ) -> SiteDesign:
        if int(n) < 2:
            raise ValueError(f"site {site_id!r}: N ({n}) must be at least 2")
        return cls(
            site_id,
            int(n),
            exact(epsilon, "epsilon"),
            exact(delta, "delta"),
            BudgetSplit.of(split, parts).shares,
        )


@dataclass(frozen=True)
class SitePrediction:
    """Predicted variances and the 95% normal interval of one site (``half_width``)."""

    site_id: str
    n: int
    epsilon: Fraction
    delta: Fraction
    split: tuple[Fraction, ...]
    estimator: str
    sampling_variance: float
    noise_variance: float
    reported_variance: float
    half_width: float
    #: the adjusted estimator's weighting this release would use (None for the others)
    weighting: str | None = None
    #: the probability that the release resolves an estimate, and its variance when it does
    #: (an unresolved release counts as the whole range in ``reported_variance``)
    resolved_probability: float = 1.0
    resolved_variance: float | None = None
    #: equally likely releases as ``(probability of resolving, variance when resolved, shared
    #: sd)``, where an estimator predicts how its reported variance varies between releases
    #: (``Estimator.resolutions``); empty: every release is the one above. Not printed
    releases: tuple[tuple[float, float, float], ...] = field(default=(), repr=False)
    #: the expected share of the records of the strata in the estimand (those holding both arms)
    #: that lie in the strata the release reads (``Estimator.read_share``; 1: it reads every one)
    read_share: float = 1.0

    @property
    def rmse(self) -> float:
        """Predicted standard error of the estimate: ``sqrt(sampling + noise variance)``."""
        return math.sqrt(self.sampling_variance + self.noise_variance)

    @property
    def width(self) -> float:
        return 2.0 * self.half_width

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["releases"]
        d["epsilon"], d["delta"] = str(self.epsilon), str(self.delta)
        d["split"] = [str(s) for s in self.split]
        d["rmse"], d["width"] = self.rmse, self.width
        return d


def clamped_mean(v: float, b: float) -> float:
    """``E max(v + L, 0)`` for ``L ~ Lap(b)``: ``v + (b/2) e^(-v/b)`` if ``v >= 0``, else
    ``(b/2) e^(v/b)``; ``max(v, 0)`` when ``b = 0``."""
    if b <= 0:
        return max(v, 0.0)
    if v >= 0:
        return v + 0.5 * b * math.exp(-v / b)
    return 0.5 * b * math.exp(v / b)


def balanced_counts(
    n: int, domain_size: int, arm_share: float, occupied: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The assumed ``(|T_x|, |C_x|)`` over the ``|X|`` strata: ``round(share N)`` treated and the
    rest control, each spread as evenly as possible over the first ``occupied`` strata (all of
    them by default), the others empty (public given the assumption)."""
    if not 0 < arm_share < 1:
        raise ValueError(f"treated share ({arm_share}) must lie strictly between 0 and 1")
    size = int(domain_size)
    k = size if occupied is None else max(1, min(size, int(occupied)))
    n_t = min(max(round(arm_share * n), 1), n - 1)
    n_c = n - n_t

    def spread(m: int) -> np.ndarray:
        filled = np.full(k, m // k, dtype=np.int64) + (np.arange(k) < m % k)
        return np.concatenate([filled, np.zeros(size - k, dtype=np.int64)])

    return spread(n_t), spread(n_c)


def spread_counts(
    treated: np.ndarray, control: np.ndarray, propensity_sd: float
) -> tuple[np.ndarray, np.ndarray]:
    """The same strata's records with the treated share varying between strata: each occupied
    stratum's total split at ``p_x = expit(a + sd z_x)``, ``z_x`` the normal quantiles
    ``(j + 1/2) / K`` over its ``K`` occupied strata and ``a`` the intercept at which the treated
    total is unchanged (bisection). What the covariates' prediction of the treatment does to the
    strata (an observational study's cells are uneven even where its strata are not); ``sd``
    0 leaves the counts as they are. Float counts (public given the assumption)."""
    total = (treated + control).astype(np.float64)
    occupied = total > 0
    k = int(np.count_nonzero(occupied))
    if propensity_sd <= 0 or k < 2:
        return treated.astype(np.float64), control.astype(np.float64)
    normal = NormalDist()
    z = propensity_sd * np.array([normal.inv_cdf((j + 0.5) / k) for j in range(k)])
    size = total[occupied]
    goal = float(np.sum(treated))
    lo, hi = -40.0, 40.0
    for _ in range(80):  # the treated total rises with the intercept
        mid = 0.5 * (lo + hi)
        if float(np.sum(size / (1.0 + np.exp(-(mid + z))))) < goal:
            lo = mid
        else:
            hi = mid
    share = np.zeros_like(total)
    share[occupied] = 1.0 / (1.0 + np.exp(-(0.5 * (lo + hi) + z)))
    return total * share, total * (1.0 - share)


@dataclass(frozen=True)
class PredictionInputs:
    """What an estimator's ``predict`` reads: the site's public design, ``|X|``, ``B``, the stated
    assumptions and the estimator's spec options (None: its defaults)."""

    design: SiteDesign
    domain_size: int
    bound: float
    assumptions: Assumptions
    options: Any = None
    #: the spec's public covariate structure: the level counts of the covariates that give strata
    #: (categorical, binned numeric; empty: not given) and how many numeric covariates have public
    #: bounds and no bins (an estimator that models covariates one by one reads them)
    covariate_sizes: tuple[int, ...] = ()
    bounded_covariates: int = 0
    #: the assumed ``(treated, control)`` counts per stratum, when the estimator predicts them
    #: itself (propensity bands); None: ``balanced_counts`` over the assumed occupied strata
    strata_counts: tuple[np.ndarray, np.ndarray] | None = None
    #: the outcome is 0 or ``B`` and the estimator releases in its binary-outcome mode (no sums
    #: of squares: the design's split has that mode's parts)
    binary: bool = False
    #: subclassification reads the used cells' squares as sums, ``"common"`` (one for both arms)
    #: or ``"arms"`` (each arm's), not as their vector (None): the propensity release's band
    #: cells (``dpate_core.mechanisms.propensity.squares_mode``)
    squares_sums: str | None = None

    def parts(self) -> tuple[PrivacyParams, ...]:
        total = PrivacyParams(self.design.epsilon, self.design.delta)
        return BudgetSplit(self.design.split).apply(total)
