"""The covariate-adjusted release ("adjusted"): DP subclassification from per-cell sufficient
statistics, pure epsilon-DP.

It needs, per cell ``g = (x, arm)``, only the count ``n_g``, the sum of centred outcomes
``s_g = sum (Y - B/2)`` and the sum of their squares ``q_g = sum (Y - B/2)^2``. One compiled pass
computes the three vectors. The counts and sums are released as ONE vector query, the cells'
two-end histogram (each record's unit mass split between its cell's two ends, ``1 - Y/B`` and
``Y/B``: :func:`dpate_core.statistics.end_histogram`, L1 sensitivity 2; since stop 43), and the
squares as another, each with Laplace noise (parallel composition over cells); the two share the
budget by sequential composition. The counts and sums are post-processing of the noisy histogram.

Two post-processings of the same noisy vectors (``weighting``; the privacy proof is the same):
``"subclassification"``, the average effect over the patients of the strata with both arms,
``sum_x n_x (mean_xt - mean_xc) / sum_x n_x`` over the strata it can read (Algorithm 1's estimate
where every stratum has both arms), and
``"fixed_effects"``, the ratio of sums ``sum (s_xt n_xc - s_xc n_xt) / sum n_xt n_xc``: the
stratum effects averaged with weights ``n_xt n_xc`` (strata without both arms weigh 0), with no
threshold and no per-stratum ratio, so unbiased where strata hold few records per arm against the
count noise. ``"auto"`` (default) picks by a public rule (:func:`resolve_weighting`). Both equal
the common effect when every stratum has the same effect (Synth: 0.5).
``docs/explanation/adjusted.md`` has the design, the proofs and the measurements.

A split of four parts ``(eps_h, eps_q, eps_a, eps_d)`` (stop 46; the spec's ``weighted_sum =
true`` since stop 47) adds a second stage, chosen from the histogram's noisy counts: the
fixed-effects numerator and denominator as one weighted-sum query each, their coefficients
capped where the noisy counts say (:mod:`._fe_queries`, ``(eps_a, 0)`` and ``(eps_d, 0)``-DP for
every fixed histogram), combined with the histogram's readings by their noise; the weighting is
then fixed effects.

Fixed effects of a continuous outcome (since stop 50): the squares' part buys, in that second
stage, one weighted-sum query of the only sum its sandwich reads of them (:mod:`._fe_squares`,
``(eps_q, 0)``-DP for every fixed histogram) in place of their vector, except where the public
design puts the release between its two switches (:func:`~._weightings.squares_queried`); its
default split is then :data:`DEFAULT_SPLIT_FIXED_EFFECTS`.

Exactness: the three vectors are exact integer sums on a public grid (:mod:`dpate_core.statistics`,
which has the argument); the noise is added to those integers, with scales in grid units, and the
noisy sums and squares are multiplied by their grid units after the draw (post-processing,
``NoiseSpec.unit``; :func:`dpate_core.statistics.cell_noise`), so the two weightings'
post-processing (:mod:`dpate_core.mechanisms.adjusted`) reads outcome units.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.mechanisms._weighted_query import query_site
from dpate_core.mechanisms.adjusted._fe_queries import DENOMINATOR, NUMERATOR, query_values
from dpate_core.mechanisms.adjusted._fe_squares import SQUARES
from dpate_core.mechanisms.adjusted._fe_squares import query_value as squares_value
from dpate_core.mechanisms.adjusted._weightings import (
    RATIO_DAMPING,
    RESOLVE_Z,
    UNRESOLVED_FIXED_EFFECTS,
    UNRESOLVED_SUBCLASSIFICATION,
    PublicConstants,
    assemble_fixed_effects,
    assemble_histogram,
    assemble_subclassification,
    histogram_vectors,
    squares_queried,
)
from dpate_core.noise import Rng
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams
from dpate_core.release import (
    MechanismPlan,
    NoiseSpec,
    SiteEstimate,
    Stage,
    check_binary_outcomes,
    draw_once,
)
from dpate_core.statistics import (
    COUNT_SENSITIVITY,
    CellStatistics,
    cell_sites,
    cell_statistics,
)

__all__ = [
    "AUTO_BIAS",
    "AUTO_RATIO",
    "DEFAULT_SPLIT",
    "DEFAULT_SPLIT_BINARY",
    "DEFAULT_SPLIT_FIXED_EFFECTS",
    "DEFAULT_SPLIT_QUERIES",
    "RATIO_DAMPING",
    "RESOLVE_Z",
    "THRESHOLD_FACTOR",
    "UNRESOLVED_FIXED_EFFECTS",
    "UNRESOLVED_SUBCLASSIFICATION",
    "WEIGHTINGS",
    "dp_adjusted",
    "plan_adjusted",
    "plan_adjusted_from_statistics",
    "plan_constants",
    "plan_weighting",
    "ratio_bias_remainder",
    "resolve_weighting",
]

#: the cells' two-end histogram (their counts and centred sums as one query), then their squares
#: (docs/explanation/adjusted.md, "Counts and sums as one histogram"; counts, sums and squares as
#: three queries, 7/20, 11/20, 1/10, until stop 43)
DEFAULT_SPLIT = ("9/10", "1/10")
#: fixed effects' (since stop 50): its squares are one query of the sandwich's squares part
#: (:mod:`._fe_squares`), which needs less of the budget than their vector; subclassification
#: keeps :data:`DEFAULT_SPLIT`, which is also the reference split the ``"auto"`` rules read
#: (docs/explanation/adjusted.md, "The sandwich's squares as one query")
DEFAULT_SPLIT_FIXED_EFFECTS = ("19/20", "1/20")
#: with the fixed-effects queries (``weighted_sum = true``; stop 46): the cells' histogram and
#: their squares, then the numerator's and the denominator's query (docs/explanation/adjusted.md,
#: "The fixed-effects sums as weighted-sum queries")
DEFAULT_SPLIT_QUERIES = ("5/8", "3/40", "1/5", "1/10")
#: a binary outcome's split: its cells are one query, the (cell, outcome) histogram, at the whole
#: budget (docs/explanation/adjusted.md, "A binary outcome: one histogram")
DEFAULT_SPLIT_BINARY = ("1",)
#: a stratum is used when both noisy arm counts reach ``max(2, 1 * s_n)``, ``s_n`` the count noise's
#: Laplace scale of equal variance (``sqrt(2) 2 / eps_h``: a count is the histogram's two bins)
THRESHOLD_FACTOR = 1
#: the post-processings of the same noisy vectors (docs/explanation/adjusted.md, "Two weightings")
WEIGHTINGS = ("auto", "subclassification", "fixed_effects")
#: "auto" uses subclassification when the public design gives at least this many records per arm
#: per stratum, ``N / (2 |X|)``, per unit of the count noise scale ``s_n``; else fixed effects
AUTO_RATIO = 10
#: ... and when the ratio bias its correction leaves, predicted for a balanced design, is at most
#: this many noise sds of the estimate (:func:`ratio_bias_remainder`)
AUTO_BIAS = 0.25


def plan_adjusted(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    domain_size: int,
    split: Sequence[Number] | None = None,
    min_count: float | None = None,
    weighting: str = "auto",
    binary: bool = False,
) -> MechanismPlan:
    """The plan of :func:`dp_adjusted` (see there for the privacy statement). ``binary``: every
    outcome is 0 or ``B`` (checked: an error names the rule); the cells are one query, their
    ``(cell, outcome)`` histogram. A ``split`` of four parts adds the fixed-effects queries
    (module docstring)."""
    if binary:
        check_binary_outcomes(np.asarray(y, dtype=np.float64), float(bound))
    stats = cell_statistics(w, y, x, domain_size=domain_size, bound=bound)
    return plan_adjusted_from_statistics(
        stats, epsilon=epsilon, delta=delta, split=split, min_count=min_count, weighting=weighting,
        binary=binary,
    )  # fmt: skip


def ratio_bias_remainder(n: int, domain_size: int, count_scale: float, sum_epsilon: float) -> float:
    """Subclassification's ratio bias left after its correction, over the estimate's noise sd,
    predicted from public values for a balanced design (``n = N / (2 |X|)`` records per arm per
    stratum, arm means ``B`` apart): the bias ``|X| v_n B / (N n)`` (``v_n = 2 s_n^2``,
    ``s_n`` the count noise's scale, :func:`count_scale`) over the sums' noise sd ``4 B sqrt(|X|)
    / (eps_s N)`` (``eps_s`` as :func:`sum_epsilon`), i.e.
    ``|X|^(3/2) s_n^2 eps_s / N``, times the correction's relative remainder
    ``RATIO_DAMPING (v_n / n^2)^2`` (its damping near the threshold):
    ``64 RATIO_DAMPING s_n^6 eps_s |X|^(11/2) / N^5`` (docs/explanation/adjusted.md, "The ratio bias and its
    correction")."""
    size, records = float(domain_size), float(n)
    return float(64.0 * RATIO_DAMPING * count_scale**6 * sum_epsilon * size**5.5 / records**5)


def resolve_weighting(
    weighting: str, n: int, domain_size: int, count_scale: float, sum_epsilon: float
) -> str:
    """The weighting a plan uses: ``weighting`` itself, or for ``"auto"`` subclassification when
    the public design has at least :data:`AUTO_RATIO` count-noise scales of records per arm per
    stratum (``N / (2 |X|) >= AUTO_RATIO * s_n``) and the ratio bias left after the
    correction is predicted at most :data:`AUTO_BIAS` noise sds (:func:`ratio_bias_remainder`),
    else fixed effects. Public values only: ``N``, ``|X|``, the count scale ``s_n``
    (:func:`count_scale`) and the sums' epsilon ``eps_s`` (:func:`sum_epsilon`)."""
    if weighting not in WEIGHTINGS:
        raise ValueError(
            f"weighting ({weighting!r}) must be one of {', '.join(WEIGHTINGS)} (docs/explanation/adjusted.md)"
        )
    if weighting != "auto":
        return weighting
    per_arm = n / (2.0 * domain_size)
    populated = per_arm >= AUTO_RATIO * count_scale
    small_bias = (
        populated and ratio_bias_remainder(n, domain_size, count_scale, sum_epsilon) <= AUTO_BIAS
    )
    return "subclassification" if small_bias else "fixed_effects"


def plan_adjusted_from_statistics(
    stats: CellStatistics,
    *,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    min_count: float | None = None,
    weighting: str = "auto",
    binary: bool = False,
) -> MechanismPlan:
    """:func:`plan_adjusted` from precomputed :func:`cell_statistics` (experiments reuse them).
    ``binary``: the outcome is 0 or ``B`` in every record (the caller has checked it: the site
    data's rules do); one budget part, the cells' ``(cell, outcome)`` histogram, whose counts,
    sums and squares are post-processing (:func:`~._weightings.histogram_vectors`)."""
    if not stats.centred:
        raise ValueError(
            "the adjusted estimator needs centred cell statistics: compute them with "
            "cell_statistics(..., centred=True)"
        )
    given = PrivacyParams.of(epsilon, delta)  # validates delta; none of it is spent
    total = PrivacyParams(given.epsilon, Fraction(0))
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    n = stats.n
    if n < 2:
        raise ValueError(f"a release needs at least 2 records (got {n})")
    default = DEFAULT_SPLIT_BINARY if binary else DEFAULT_SPLIT
    queried = not binary and split is not None and len(split) == len(DEFAULT_SPLIT) + 2
    # the weighting first, at the given split or the reference one (its rule's scales), then
    # the default split its weighting takes
    reference = BudgetSplit.of(default if split is None else split, len(default) + 2 * queried)
    ref_parts = reference.apply(total)
    n_strata = stats.counts.size // 2
    mode = resolve_weighting(
        weighting, n, n_strata, count_scale(ref_parts), sum_epsilon(ref_parts[:2])
    )
    shares = reference
    if split is None and not binary and mode == "fixed_effects":
        shares = BudgetSplit.of(DEFAULT_SPLIT_FIXED_EFFECTS, len(default))
    parts = shares.apply(total)
    cells = parts[:2] if queried else parts
    noise, scales = cell_sites(stats, cells, binary)
    public = public_constants(n, stats.bound, n_strata, scales, min_count, binary=binary)
    if queried:  # the fixed-effects sums as two weighted-sum queries (._fe_queries)
        if weighting == "subclassification":
            raise ValueError(
                "a split of four parts releases the fixed-effects queries: weighting must be "
                "'fixed_effects' (or 'auto'), not 'subclassification'"
            )
        mode = "fixed_effects"
    stages: tuple[Stage, ...] = ()
    pair = query_sites(parts, n, public.n_strata) if queried else ()
    if pair:
        public = dataclasses.replace(
            public, query_scales=(pair[0].value_scale, pair[1].value_scale)
        )
    squared = mode == "fixed_effects" and not binary and squares_queried(public)
    if queried or squared:
        # the numerator's and the denominator's queries (four parts, ._fe_queries) and where the
        # public rule says so the squares as one query of the sandwich's squares part in place
        # of their vector (._fe_squares): all chosen from the histogram's noisy counts, one
        # stage after it
        sites: tuple[NoiseSpec, ...] = pair
        if squared:
            noise = noise[:1]
            squares_site = query_site(SQUARES, cells[1], n, 2 * public.n_strata)
            sites = (*sites, squares_site)
            public = dataclasses.replace(public, squares_scale=squares_site.value_scale)
        exact = (stats.counts.astype(np.float64), stats.sums * stats.sum_unit)
        squares = stats.squares * stats.square_unit
        constants = public

        def locs(noisy: Mapping[str, Any]) -> dict[str, Any]:
            v = histogram_vectors(constants, noisy)
            cnt = np.clip(np.asarray(v["counts"], dtype=np.float64), -float(n), float(n))
            out = squares_value(constants, cnt, squares) if squared else {}
            if queried:
                out.update(query_values(constants, cnt, *exact))
            return out

        stages = (Stage(sites, locs),)
    assemble = assemble_fixed_effects if mode == "fixed_effects" else assemble_subclassification
    return MechanismPlan(
        estimator="adjusted",
        n=n,
        n_treated=None,
        n_control=None,
        total=total,
        bound=stats.bound,
        shares=shares,
        noise=noise,
        stages=stages,
        # a histogram's counts and sums (a binary outcome's squares too) are post-processing;
        # the public constants first either way (what simulations read)
        assemble=functools.partial(assemble_histogram, public, assemble),
    )


def query_sites(
    parts: Sequence[PrivacyParams], n: int, n_strata: int
) -> tuple[NoiseSpec, NoiseSpec]:
    """The fixed-effects queries' noise sites for a split of four parts (the numerator's over
    the ``2 |X|`` cells at the third part, the denominator's over the ``|X|`` strata at the
    fourth): the release's, and the scales ``dpate plan`` simulates them at."""
    return (
        query_site(NUMERATOR, parts[2], n, 2 * n_strata),
        query_site(DENOMINATOR, parts[3], n, n_strata),
    )


def plan_constants(plan: MechanismPlan) -> PublicConstants:
    """The public constants an adjusted plan's assembly reads (:func:`public_constants`), or a
    propensity plan's (its band cells are an adjusted release's): what simulations, benchmarks
    and tests read, from the one place that knows how the assembly holds them (the first
    argument of its ``functools.partial``)."""
    assembly = plan.assembly
    c = assembly.args[0] if isinstance(assembly, functools.partial) and assembly.args else None
    if not isinstance(c, PublicConstants):
        raise TypeError(f"the {plan.estimator} plan's assembly holds no adjusted public constants")
    return c


def plan_weighting(plan: MechanismPlan) -> str:
    """The weighting an adjusted plan's assembly applies, ``"fixed_effects"`` or
    ``"subclassification"`` (the ``"auto"`` choice resolved, :func:`resolve_weighting`)."""
    assembly = plan.assembly
    if plan.estimator != "adjusted" or not isinstance(assembly, functools.partial):
        raise TypeError(f"a {plan.estimator} plan has no adjusted weighting")
    return "fixed_effects" if assembly.args[1] is assemble_fixed_effects else "subclassification"


def sum_epsilon(parts: Sequence[PrivacyParams]) -> float:
    """The epsilon of a Laplace sums query whose noise has the variance of the cells' sums: for
    the cells' histogram at ``eps`` (the first of two parts, or a binary outcome's one part) ``eps
    / sqrt(2)`` (:func:`dpate_core.statistics.histogram_scales`: ``b_s = sqrt(2) B / eps``).
    What the ``"auto"`` weighting's rule reads."""
    return float(parts[0].epsilon) / math.sqrt(2.0)


def count_scale(parts: Sequence[PrivacyParams]) -> float:
    """The Laplace scale of the same variance as one noisy cell count's, as the release rounds
    it: for the cells' histogram at ``eps`` (the first of two parts, or a binary outcome's one
    part) ``sqrt(2) 2 / eps`` (:func:`dpate_core.statistics.histogram_scales`)."""
    return math.sqrt(2.0) * parts[0].laplace_scale(COUNT_SENSITIVITY)


def public_constants(
    n: int,
    bound: float,
    n_strata: int,
    scales: Sequence[float],
    min_count: float | None = None,
    *,
    binary: bool = False,
) -> PublicConstants:
    """What the post-processing reads besides the noisy vectors: the public ``N``, ``B`` and
    ``|X|``, the Laplace scales of the cell vectors in outcome units (``scales``: counts, sums
    and, unless the outcome is ``binary``, squares; a noise site's ``value_scale``; a binary
    outcome's counts and sums from its histogram: the scales of equal variance,
    :func:`dpate_core.statistics.histogram_scales`) and
    ``min_count`` (default ``max(2, THRESHOLD_FACTOR * scales[0])``, checked). The adjusted
    release's, the propensity release's (on its bands) and the plan's (at the scales it
    predicts)."""
    scale_n, b_s = scales[0], scales[1]
    if min_count is None:
        min_count = max(2.0, THRESHOLD_FACTOR * scale_n)
    min_count = float(min_count)
    if not (min_count >= 1.0 and math.isfinite(min_count)):
        raise ValueError(f"min_count ({min_count}) must be a finite count of at least 1")
    return PublicConstants(
        n=n,
        bound=bound,
        n_strata=n_strata,
        scale_n=scale_n,
        b_s=b_s,
        min_count=min_count,
        half_b=bound / 2.0,
        max_var=bound * bound / 4.0,
        v_n=2.0 * scale_n**2,
        v_s=2.0 * b_s**2,
        v_q=2.0 * scales[2] ** 2 if len(scales) > 2 else 0.0,
        q_per_count=bound * bound / 4.0 if binary else 0.0,
    )


def dp_adjusted(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    domain_size: int,
    split: Sequence[Number] | None = None,
    min_count: float | None = None,
    weighting: str = "auto",
    binary: bool = False,
    rng: Rng = None,
) -> SiteEstimate:
    """DP subclassification (the "adjusted" estimator): a stratified average effect from noisy
    per-cell counts, centred sums and centred sums of squares.

    Privacy: ``(epsilon, 0)``-DP under replace-one neighbours (a record's ``W``, ``Y`` and ``X`` may
    all change); ``delta`` is accepted for a uniform interface and not spent (the estimate records
    ``delta = 0``). Sequential composition of two Laplace vector queries with shares ``(eps_h,
    eps_q)`` (default :data:`DEFAULT_SPLIT`; four shares add the fixed-effects queries at
    ``eps_a`` and ``eps_d``, adaptively, module docstring), each parallel over the cells: the
    two-end histogram ``Lap(2 / eps_h)`` over ``4 |X|`` bins (the counts ``U + L`` and centred
    sums ``(B/2)(U - L)`` are post-processing), centred squares ``Lap(B^2 / (2 eps_q))`` (scales
    exact and rounded up, in grid units; fixed effects: the squares as one weighted-sum query
    after the histogram where :func:`~._weightings.squares_queried` says, its default split
    :data:`DEFAULT_SPLIT_FIXED_EFFECTS`). Public: ``N``,
    ``B``, ``|X|`` (``domain_size``), the covariate discretisation and ``min_count``; arm sizes are
    not released. ``binary`` (every outcome 0 or ``B``, checked): one Laplace vector query, the
    ``(cell, outcome)`` histogram ``Lap(2 / eps)`` over the ``4 |X|`` bins at the whole budget
    (one part, :data:`DEFAULT_SPLIT_BINARY`); the counts, centred sums and squares are
    post-processing of it (every centred value is ``+-B/2``).

    Post-processing (``weighting``, see :func:`resolve_weighting` and docs/explanation/adjusted.md): with
    ``"fixed_effects"`` the ratio of sums ``sum (s_t n_c - s_c n_t) / sum n_t n_c`` over every
    stratum (unresolved, ``resolved`` False with no estimate and no variance, when the noisy
    denominator is not above ``RESOLVE_Z`` of its noise sds). With ``"subclassification"``: each
    noisy vector clipped to the range the true one can take (counts to
    ``[0, N]``, sums to ``N B/2`` in absolute value, squares to ``N B^2/4``); a stratum is used
    when both noisy arm counts are ``>= min_count`` (default ``max(2, s_n)``, ``s_n = sqrt(2) 2
    / eps_h`` the count noise's scale), each weighted by its noisy size over the size of the
    strata used; arm means clipped to ``[-B/2, 3B/2]``, the estimate less its ratio bias (the
    bias of dividing by noisy counts, estimated at the noisy point and damped near the
    threshold) and clipped to
    ``[-B, B]``; the variance a sandwich (each arm's within-cell variance pooled over the usable
    strata and clamped to ``[0, B^2/4]``, plus the spread of the stratum effects) with the
    noise's and the strata left out's (``raw_variance`` keeps the unclamped sampling part);
    unresolved when no stratum is usable. Fixed effects' variance is its sandwich (a polynomial in
    the cell statistics) plus its noise's given the noisy denominator. An unresolved release says why
    in ``unresolved_reason`` (:data:`UNRESOLVED_FIXED_EFFECTS`,
    :data:`UNRESOLVED_SUBCLASSIFICATION`).
    """
    plan = plan_adjusted(
        w,
        y,
        x,
        bound=bound,
        epsilon=epsilon,
        delta=delta,
        domain_size=domain_size,
        split=split,
        min_count=min_count,
        weighting=weighting,
        binary=binary,
    )
    return plan.estimate(draw_once(plan, rng))
