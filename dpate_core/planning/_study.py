"""Know before you spend: predicted interval widths of a study from public inputs only.

Inputs: each site's ``N``, the strata domain ``|X|``, the outcome bound ``B``, the per-site budget
``(epsilon, delta)`` and its split, the estimator and the aggregator. No record is read and nothing
is spent. Where a prediction needs a feature of the data, it is an explicit
:class:`~dpate_core.planning.Assumptions` field, listed in every :class:`StudyPlan`
(``assumptions``):

* the treated share of each site (default 1/2) and strata equally filled (each arm's records spread
  as evenly as possible over the ``|X|`` strata);
* the outcome's standard deviation within an arm and stratum (default ``B/2``, the largest any
  outcome in ``[0, B]`` can have: a worst case);
* the effect, for the matching variance estimate's ``(Yhat(1) - Yhat(0))^2`` (default 0).

Predictions per site (each estimator's ``predict``, :class:`dpate_core.mechanisms.Estimator`;
add one for a new estimator): the sampling variance, the DP noise variance, the expected
*reported* variance (the release clamps a noisy sampling part at 0, which inflates it:
``E max(v + Lap(b), 0) = v + (b/2) e^(-v/b)``) and the normal interval's half-width
``z sqrt(E reported variance)``. For the matching estimators the smooth sensitivities are computed
by :mod:`dpate_core.mechanisms.matching` on the assumed count vector (public, given the assumption). The
adjusted estimator is predicted for the weighting every release of the study would use (the
spec's ``adjusted_weighting``; ``"auto"`` resolved once for the whole study from every site's
public design: :func:`~dpate_core.mechanisms.adjusted.study_weighting`), and the plan names the
study's estimand (:attr:`StudyPlan.estimand`). The combined prediction runs the spec's
combiner (:func:`dpate_core.aggregation.aggregate`) on the predicted variances: for MVAgg that is
its predicted choice of sites (in a release the choice is made on noisy variances).

``docs/explanation/inference.md`` describes the method and its accuracy.

Modules: this one holds the study plan (:func:`plan_study`, :class:`StudyPlan`); the inputs and a
site's prediction are in :mod:`dpate_core.planning`, the per-estimator predictions in
:mod:`dpate_core.planning`, one site's prediction and the combined one in
:mod:`dpate_core.planning`, the recommendation of estimator and split in
:mod:`dpate_core.planning`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from dpate_core.aggregation import NoUsableSiteError
from dpate_core.inference import INFORMATION_RULES, UNINFORMATIVE_RULES, uninformative_rules
from dpate_core.mechanisms import Estimator, StudyChoice, StudySite, estimator_of
from dpate_core.planning._inputs import Assumptions, SiteDesign, SitePrediction
from dpate_core.planning._recommendation import Recommendation, _recommend
from dpate_core.planning._site import SitePredictions, _z, combined_prediction, predict_site

__all__ = ["StudyPlan", "plan_study"]


@dataclass(frozen=True)
class StudyPlan:
    """A study's predicted intervals, what it would take to reach a target, and warnings."""

    estimator: str
    aggregator: str
    bound: float
    level: float
    sites: tuple[SitePrediction, ...]
    combined_variance: float
    combined_half_width: float
    used: tuple[str, ...]
    target_width: float | None
    epsilon_needed: dict[str, Fraction] | None
    recommendation: Recommendation | None
    warnings: tuple[str, ...]
    assumptions: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: what questions the validity of the estimate at this design (the study choice's cautions,
    #: then the estimator's, ``Estimator.cautions``): the study's result carries them too
    cautions: tuple[str, ...] = field(default_factory=tuple)
    #: what every site's release estimates, in words a clinician reads (one for the study)
    estimand: str = ""
    #: the variant every site uses (the adjusted estimator's weighting), None with one variant
    variant: str | None = None

    @property
    def combined_width(self) -> float:
        return 2.0 * self.combined_half_width

    def as_dict(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "estimand": self.estimand,
            "variant": self.variant,
            "aggregator": self.aggregator,
            "bound": self.bound,
            "level": self.level,
            "sites": [s.as_dict() for s in self.sites],
            "combined": {
                "variance": self.combined_variance,
                "half_width": self.combined_half_width,
                "width": self.combined_width,
                "used": list(self.used),
            },
            "target_width": self.target_width,
            "epsilon_needed": None
            if self.epsilon_needed is None
            else {k: str(v) for k, v in self.epsilon_needed.items()},
            "recommendation": None
            if self.recommendation is None
            else self.recommendation.as_dict(),
            "warnings": list(self.warnings),
            "assumptions": list(self.assumptions),
            "notes": list(self.notes),
            "cautions": list(self.cautions),
        }


def plan_study(
    estimator: str,
    aggregator: str,
    designs: Sequence[SiteDesign],
    *,
    domain_size: int,
    bound: float,
    design: str = "observational",
    options: Any = None,
    assumptions: Assumptions = Assumptions(),
    target_width: float | None = None,
    level: float = 0.95,
    recommend: bool = True,
    covariate_sizes: tuple[int, ...] = (),
    bounded_covariates: int = 0,
    choice: StudyChoice | None = None,
    binary: bool = False,
) -> StudyPlan:
    """Predicted site and combined intervals; with ``target_width`` (the full width of the
    combined interval) the per-site epsilon that reaches it (every site's epsilon times one
    common factor, splits kept); a recommendation of estimator and split among those valid for the
    ``design``; and warnings when the study cannot answer its question at its budget.
    ``options``: the estimator's spec options (None: its defaults; the other estimators a
    recommendation tries use theirs, :meth:`~dpate_core.mechanisms.Estimator.assumed_options`);
    the variant each site would use (the adjusted estimator's weighting) is in its prediction
    and in the notes. ``covariate_sizes``, ``bounded_covariates``: the spec's covariate
    structure (:class:`~dpate_core.planning.PredictionInputs`). ``choice``: the study's one choice
    as its spec made it (:meth:`~dpate_core.mechanisms.Estimator.study_choice` over the ``n`` the
    spec declares; its ``options`` are then the study's), else made here from ``options`` and the
    designs' record counts. ``binary``: the outcome is binary (``outcome.binary``): an
    estimator with a binary-outcome mode is predicted, and its splits tried, in that mode."""
    if not designs:
        raise ValueError("a plan needs at least one site")
    if target_width is not None and not (target_width > 0 and math.isfinite(target_width)):
        raise ValueError(f"target width ({target_width}) must be positive and finite")

    def options_for(name: str) -> Any:
        """The study's options for its estimator; what a plan assumes for another."""
        return options if name == estimator else estimator_of(name).assumed_options()

    est = estimator_of(estimator)
    if choice is None:
        choice = est.study_choice(options, domain_size, _study_sites(designs))
    else:
        options = choice.options
    predict = _site_predictions(
        options_for,
        domain_size,
        bound,
        assumptions,
        level,
        (covariate_sizes, bounded_covariates),
        binary,
    )
    preds = predict(estimator, designs)
    z = _z(level)
    variance, used = _combined(aggregator, preds, bound, z)
    half = z * math.sqrt(variance)
    warnings = _range_warnings(preds, half, bound)
    estimand = est.estimand_of(choice.options)
    notes = [
        *([f"{choice.variant} at every site: {choice.reason}"] if choice.variant else []),
        *_notes(estimator, aggregator, choice.options, preds, used),
        *_alternative_notes(
            est, aggregator, choice.options, designs, 2.0 * half,
            lambda alt: _site_predictions(
                lambda name: alt if name == estimator else options_for(name), domain_size,
                bound, assumptions, level, (covariate_sizes, bounded_covariates), binary,
            ),
            (z, bound, binary, domain_size),
        ),
    ]  # fmt: skip
    cautions = [*choice.cautions, *(est.cautions(choice.options, preds) if est.cautions else [])]
    eps_needed = None
    if target_width is not None:
        width_of = _width_at(predict, estimator, aggregator, z, bound)
        eps_needed = _epsilon_for_target(width_of, designs, target_width, half, warnings)
    recommendation = None
    if recommend:

        def chosen_for(name: str) -> Any:
            """The options a study of these designs releases ``name`` with: its one study-wide
            choice (the propensity release's ``"auto"`` model share at the study's ``n x
            epsilon``), whose default split the recommendation tries first. The choice reads
            each site at ``name``'s own default split (the spec's is another estimator's)."""
            e, opts = estimator_of(name), options_for(name)
            split = e.default_split(opts, binary and e.binary_outcome).shares
            sites = [StudySite(d.n, d.epsilon, split) for d in designs]
            return e.study_choice(opts, domain_size, sites).options

        recommendation = _recommend(
            design, designs, aggregator, predict, chosen_for, level, bound, binary,
            bounded_covariates > 0,
        )  # fmt: skip
    return StudyPlan(
        estimator=estimator,
        aggregator=aggregator,
        bound=float(bound),
        level=level,
        sites=tuple(preds),
        combined_variance=variance,
        combined_half_width=half,
        used=used,
        target_width=target_width,
        epsilon_needed=eps_needed,
        recommendation=recommendation,
        warnings=tuple(warnings),
        assumptions=tuple(assumptions.describe(bound)),
        notes=tuple(notes),
        cautions=tuple(cautions),
        estimand=estimand,
        variant=choice.variant,
    )


def _site_predictions(
    options_for: Callable[[str], Any],
    domain_size: int,
    bound: float,
    assumptions: Assumptions,
    level: float,
    covariates: tuple[tuple[int, ...], int] = ((), 0),
    binary: bool = False,
) -> SitePredictions:
    """:func:`predict_site` with every input but the estimator and the designs fixed (the plan's
    and its recommendation's predictions, so both predict alike), each estimator with the
    options ``options_for`` gives it."""

    def predict(est: str, ds: Sequence[SiteDesign]) -> list[SitePrediction]:
        # one variant for the whole study, chosen from every site's public design
        opts = estimator_of(est).study_choice(options_for(est), domain_size, _study_sites(ds))
        opts = opts.options
        return [
            predict_site(
                est,
                d,
                domain_size=domain_size,
                bound=bound,
                options=opts,
                assumptions=assumptions,
                level=level,
                covariate_sizes=covariates[0],
                bounded_covariates=covariates[1],
                binary=binary,
            )
            for d in ds
        ]

    return predict


def _study_sites(designs: Sequence[SiteDesign]) -> list[StudySite]:
    return [StudySite(d.n, d.epsilon, tuple(d.split), declared=True) for d in designs]


def _combined(
    aggregator: str, preds: Sequence[SitePrediction], bound: float, z: float
) -> tuple[float, tuple[str, ...]]:
    """The combined predicted variance and the sites the combiner uses
    (:func:`~dpate_core.planning.combined_prediction`: over which sites resolve, and never
    a chosen subset holding a site predicted uninformative on its own); infinite and none when
    every site is predicted without a usable stratum."""
    try:
        variance, used = combined_prediction(aggregator, preds, bound, z)
        return variance, tuple(preds[j].site_id for j in used)
    except NoUsableSiteError:  # every site predicted without a usable stratum
        return math.inf, ()


def _range_warnings(preds: Sequence[SitePrediction], half: float, bound: float) -> list[str]:
    """Warnings for a site's, and the combined, predicted interval that the release's own rules
    (:func:`dpate_core.inference.uninformative_rules`) would flag uninformative: wider than the
    outcome's range ``B``, or (a site) noise variance over :data:`~dpate_core.inference.NOISE_RATIO`
    times the sampling variance."""
    warnings: list[str] = []
    for p in preds:
        rules = uninformative_rules(
            -p.half_width, p.half_width, bound, p.noise_variance, p.sampling_variance
        )
        if rules:
            head = (
                "uninformative at this budget on its own"
                if any(r in INFORMATION_RULES for r in rules)
                else "mostly privacy noise"
            )
            warnings.append(
                f"site {p.site_id}: predicted interval width {p.width:.3g} (B = {bound:g}): "
                f"{head}: " + "; ".join(UNINFORMATIVE_RULES[r] for r in rules)
            )
    if "width" in uninformative_rules(-half, half, bound):
        warnings.append(
            f"the combined interval (predicted width {2 * half:.3g}) is wider than the outcome's "
            f"range B = {bound:g}: the study cannot answer its question at this budget; raise "
            f"epsilon, add records, or narrow B"
        )
    return warnings


def _notes(
    estimator: str,
    aggregator: str,
    options: Any,
    preds: Sequence[SitePrediction],
    used: tuple[str, ...],
) -> list[str]:
    """The plan's notes: the estimator's own (e.g. the adjusted estimator's weighting per site
    and what each estimates) and how to read its intervals (``Estimator.reading_notes``);
    MVAgg's predicted choice."""
    est = estimator_of(estimator)
    notes: list[str] = [] if est.describe is None else est.describe(options, preds)
    notes += [] if est.reading_notes is None else est.reading_notes(options, preds)
    if not used:
        notes.append(
            "no site is predicted to resolve its estimate: the study would publish no answer at "
            "this budget (raise epsilon or add records)"
        )
    elif len(used) < len(preds) and aggregator == "mvagg":
        notes.append(
            f"MVAgg is predicted to use {', '.join(used)} only (on noisy variances its choice "
            f"varies between releases; docs/explanation/inference.md)"
        )
    return notes


def _alternative_notes(
    est: Estimator,
    aggregator: str,
    options: Any,
    designs: Sequence[SiteDesign],
    width: float,
    predictions: Callable[[Any], SitePredictions],
    constants: tuple[float, float, bool, int],
) -> list[str]:
    """The predicted combined width under each of the estimator's
    :attr:`~dpate_core.mechanisms.Estimator.alternatives` beside the plan's own ``width``, each
    site at the alternative's default split (none where a site declares a split of its own: its
    parts are laid out for the study's options), with the cautions the alternative's study
    choice would carry."""
    z, bound, binary, domain_size = constants
    if est.alternatives is None or not math.isfinite(width):
        return []
    own = est.default_split(options, binary).shares
    if any(tuple(d.split) != own for d in designs):
        return []
    notes = []
    for label, alt in est.alternatives(options, binary):
        split = est.default_split(alt, binary).shares
        ds = [replace(d, split=split) for d in designs]
        variance, _ = _combined(aggregator, predictions(alt)(est.name, ds), bound, z)
        other = 2.0 * z * math.sqrt(variance)
        if not math.isfinite(other):
            continue
        change = other / width - 1.0
        cautions = est.study_choice(alt, domain_size, _study_sites(ds)).cautions
        notes.append(
            f"with {label}: predicted combined width {other:.4g} against {width:.4g} "
            f"({abs(change):.0%} {'narrower' if change < 0 else 'wider'}) under the same "
            f"assumptions" + "".join(f"; but {c}" for c in cautions)
        )
    return notes


def _width_at(
    predict: SitePredictions, estimator: str, aggregator: str, z: float, bound: float
) -> Callable[[Sequence[SiteDesign]], float]:
    """The predicted combined width of the estimator at other designs (infinite when no site
    has a usable stratum)."""

    def width_of(ds: Sequence[SiteDesign]) -> float:
        return 2.0 * z * math.sqrt(_combined(aggregator, predict(estimator, ds), bound, z)[0])

    return width_of


def _epsilon_for_target(
    width_of: Callable[[Sequence[SiteDesign]], float],
    designs: Sequence[SiteDesign],
    target_width: float,
    half: float,
    warnings: list[str],
) -> dict[str, Fraction] | None:
    """The per-site epsilon reaching ``target_width`` (every site's times one common factor),
    None when no epsilon does; the warnings about the target are appended to ``warnings``."""
    if 2.0 * half > target_width:
        warnings.append(
            f"the combined interval (predicted width {2 * half:.3g}) is wider than the target "
            f"{target_width:g}"
        )
    factor = _factor_for_width(width_of, designs, target_width)
    if factor is None:
        warnings.append(
            f"no epsilon reaches the target width {target_width:g}: the sampling variance "
            f"alone (at the assumed outcome sd) is too large; add records"
        )
        return None
    return {d.site_id: _round_up(d.epsilon * factor) for d in designs}


def _round_up(value: Fraction, digits: int = 3) -> Fraction:
    """``value`` rounded up to ``digits`` significant decimal digits (a budget to ask for)."""
    if value <= 0:
        return value
    e = math.floor(math.log10(value)) - (digits - 1)
    q = Fraction(10) ** e
    return math.ceil(value / q) * q


def _scaled(designs: Sequence[SiteDesign], factor: Fraction) -> list[SiteDesign]:
    return [replace(d, epsilon=d.epsilon * factor) for d in designs]


#: How close (in log scale: relatively) the bisection brings the factor to the smallest one that
#: reaches the target: 24 steps over the bracket 10^-3 to 10^4, where it took 40 (to 1.5 x
#: 10^-11), each a prediction of every site. The budget the plan recommends is the factor times
#: each site's epsilon rounded up to 3 significant digits (``_round_up``), a step of at least
#: 10^-3 relative, a thousand times coarser; and the factor is the bracket's upper end, which
#: reaches the target, so the rounded budget reaches it too.
_LOG_TOLERANCE = 1e-6


def _factor_for_width(
    width_of: Callable[[Sequence[SiteDesign]], float],
    designs: Sequence[SiteDesign],
    target: float,
) -> Fraction | None:
    """The smallest common factor on every site's epsilon (bisection in log scale, to within
    ``_LOG_TOLERANCE``) whose predicted combined width is at most ``target``; None if even 10^4
    times fails. The factor returned is the bracket's upper end, whose width meets the target."""
    lo, hi = -3.0 * math.log(10), 4.0 * math.log(10)

    def ok(log_f: float) -> bool:
        f = Fraction(math.exp(log_f)).limit_denominator(10**9)
        return bool(width_of(_scaled(designs, f)) <= target)

    if not ok(hi):
        return None
    if ok(lo):
        return Fraction(math.exp(lo)).limit_denominator(10**9)
    while hi - lo > _LOG_TOLERANCE:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return Fraction(math.exp(hi)).limit_denominator(10**9)
