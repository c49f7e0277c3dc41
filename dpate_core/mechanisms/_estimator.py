"""What an estimator is, in one object: everything the study spec, the site's release, the server's
report check, the intervals and ``dpate plan`` need to know about a release mechanism.

An :class:`Estimator` is defined in its mechanism's own module, next to the plan it describes, and
registered by name (:func:`register`, :func:`unregister`); nothing else in dpate names an
estimator. What it holds:

- who it is: ``name`` (the spec's ``estimator = "..."``), ``label`` (tables and figures),
  ``estimand`` (the quantity it estimates, in words a clinician reads; :meth:`estimand_of`);
- what it costs: ``parts`` (the budget parts, in the order of a ``budget_split``;
  ``parts_for`` when they depend on the options or a binary outcome), ``pure`` (``(epsilon,
  0)``-DP: the ledger charges no delta, :meth:`cost`), ``default_shares`` (or
  ``default_shares_for``, when the options move it) and ``searched_shares`` (the ``"default"``
  preset), ``candidate_splits`` (what ``dpate plan`` tries);
- what a study must declare: ``designs``, ``needs_covariates``, ``unbinned_covariates``
  (numeric covariates with public bounds and no bins are accepted), ``options`` (a frozen dataclass
  whose fields are the estimator's spec options; a field's ``metadata["spec_key"]`` names the
  spec's top-level key it is read from, else it is read from the spec's ``[options]`` table;
  ``metadata["doc"]`` explains it) and ``binary_outcome`` (a binary-outcome mode);
- how a site releases it: ``plan`` (from validated records: tests and simulations),
  ``plan_from_statistics`` (from the statistics the site's engine computes, when the estimator
  needs no more than per-cell statistics and Algorithm 1's: ``centred_cells``,
  ``order_dependent``), ``stratified`` (it compares arms within strata) and
  ``releases_on_any_records`` (an empty arm or no common support gives an uninformative
  release, not a refusal);
- what the server checks: ``required_diagnostics`` and ``plausible`` (the rules a published
  estimate must satisfy to be one this mechanism can produce from the public values),
  ``unresolved_reasons`` (the public reasons of an unresolved release), ``publishes_arm_sizes``;
- the intervals: ``noise_model`` (the error its noise adds to ``tau``, from published fields);
- one estimand per study: ``choose`` (where the estimator has variants that estimate different
  quantities, e.g. the adjusted estimator's weightings, the public rule that picks one for the
  whole study from every site's public design, :meth:`study_choice`); every site releases with
  the options it returns, so a study never pools two estimands;
- ``dpate plan``: ``predict`` (sampling, noise and expected reported variance from public inputs
  and stated assumptions), ``describe`` (notes on the plan) and ``alternatives`` (settings it
  predicts beside the study's own).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from dpate_core.privacy import BudgetSplit, PrivacyParams

if TYPE_CHECKING:  # the release and the prediction types import no estimator
    from dpate_core.inference import NoiseDraws
    from dpate_core.planning import PredictionInputs
    from dpate_core.release import MechanismPlan, SiteEstimate
    from dpate_core.statistics import CellStatistics, MatchingStatistics

__all__ = [
    "ESTIMATORS",
    "PRESETS",
    "BandInputs",
    "Estimator",
    "NoiseModel",
    "PlanInputs",
    "Predictor",
    "StatisticsInputs",
    "StudyChoice",
    "StudySite",
    "effective_size",
    "estimator_of",
    "register",
    "unregister",
]

#: named budget splits a spec may give instead of explicit shares
PRESETS = ("paper", "default")

#: ``fn(site, rng, reps) -> NoiseDraws``: the error a re-run's noise adds to ``tau`` and the
#: variance it would publish, from published fields only (:mod:`dpate_core.inference`)
NoiseModel = Callable[["SiteEstimate", np.random.Generator, int], "NoiseDraws"]
#: ``fn(inputs) -> (sampling variance, noise variance, expected reported variance)``
Predictor = Callable[["PredictionInputs"], tuple[float, float, float]]


@dataclass(frozen=True)
class PlanInputs:
    """A site's validated records and the public constants a plan needs (tests, simulations;
    a release plans from its engine's statistics, :class:`StatisticsInputs`). ``options``: the
    estimator's options (an instance of its ``options`` dataclass, or None for its defaults)."""

    w: np.ndarray
    y: np.ndarray
    x: np.ndarray
    domain_size: int
    bound: float
    privacy: PrivacyParams
    split: Sequence[Fraction] | None
    options: Any = None
    #: the outcome is 0 or B in every record (a mode of estimators with ``binary_outcome``)
    binary: bool = False
    #: the public level counts of the spec's covariates, in its order: ``x`` is their
    #: mixed-radix number, the first covariate most significant (empty: not given)
    covariate_sizes: tuple[int, ...] = ()
    #: the values ``(N, q)`` of the numeric covariates with public bounds and no bins (an
    #: estimator with ``unbinned_covariates``), one column per entry of ``covariate_bounds``;
    #: None: there are none (they are not in ``x`` or ``covariate_sizes``)
    covariate_values: np.ndarray | None = None
    #: the public ``(lower, upper)`` of each column of ``covariate_values``
    covariate_bounds: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class StatisticsInputs:
    """The statistics a site's engine computed (the per-cell counts and exact grid sums, and
    Algorithm 1's statistics for an ``order_dependent`` estimator) and the public constants."""

    cells: CellStatistics
    matching: MatchingStatistics | None
    domain_size: int
    bound: float
    privacy: PrivacyParams
    split: Sequence[Fraction] | None
    options: Any = None
    binary: bool = False
    #: the covariates' public level counts (:attr:`PlanInputs.covariate_sizes`)
    covariate_sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class BandInputs:
    """What the bands of a balance table are computed for (:attr:`Estimator.balance_bands`):
    the covariates' public level counts (the strata's, :attr:`PlanInputs.covariate_sizes`) and,
    when the table is counted from records (a study with numeric covariates with public bounds
    and no bins), the records' strata ``x`` and those covariates' values ``(N, q)`` and public
    bounds (private: the site's process only). ``x`` None: band the ``|X|`` strata."""

    covariate_sizes: tuple[int, ...]
    x: np.ndarray | None = None
    covariate_values: np.ndarray | None = None
    covariate_bounds: tuple[tuple[float, float], ...] = ()

    @property
    def domain_size(self) -> int:
        return math.prod(self.covariate_sizes)


@dataclass(frozen=True)
class StudySite:
    """One site's public design as a study-wide choice reads it: its record count ``n`` as the
    spec declares it (None: not declared), its per-release epsilon and budget split;
    ``declared``: the split is the site's own (a spec's ``budget_split``, a plan's design), not
    the estimator's default, so a choice that would move the number of parts keeps it."""

    n: int | None
    epsilon: Fraction
    split: tuple[Fraction, ...]
    declared: bool = False


def effective_size(sites: Sequence[StudySite]) -> tuple[Fraction, StudySite] | None:
    """The smallest ``n x epsilon`` among ``sites`` and its site; None when some site declares no
    ``n`` (or there is none): what a study-wide rule or caution measured by size reads."""
    if not sites or any(s.n is None for s in sites):
        return None
    return min(((int(s.n or 0) * Fraction(s.epsilon), s) for s in sites), key=lambda t: t[0])


@dataclass(frozen=True)
class StudyChoice:
    """What a study releases at every site (:meth:`Estimator.study_choice`): the options with
    any public choice made (``"auto"`` resolved), the variant's name (None: the estimator has
    one), and why it was chosen, in words (public: it reads the spec only); ``cautions``: what
    the spec's own choices risk, where it declares what was measured to under-cover (the
    propensity release's bands and model share below the public rule's, a difference in
    means' split that starves its sums of squares), which ``dpate plan``, ``dpate check`` and
    the study's result say."""

    options: Any
    variant: str | None = None
    reason: str = ""
    cautions: tuple[str, ...] = ()


def _no_rules(estimate: SiteEstimate, options: Any, domain_size: int) -> list[str]:
    return []


@dataclass(frozen=True)
class Estimator:
    """One release mechanism as a study names it (see the module docstring)."""

    name: str
    label: str
    estimand: str
    parts: tuple[str, ...]
    pure: bool
    designs: tuple[str, ...]
    plan: Callable[[PlanInputs], MechanismPlan]
    noise_model: NoiseModel
    predict: Predictor
    needs_covariates: bool = False
    #: the release takes numeric covariates with public bounds and no bins, each record's value
    #: clipped to them (:attr:`PlanInputs.covariate_values`); it then plans from records. False:
    #: every covariate must give strata (levels or bins), and a spec declaring one without bins
    #: is refused
    unbinned_covariates: bool = False
    #: the spec options (a frozen dataclass type, instantiated with keywords); None: no options
    options: type | None = None
    #: ``(options, binary) -> parts`` when the parts depend on them (else ``parts``)
    parts_for: Callable[[Any, bool], tuple[str, ...]] | None = None
    binary_outcome: bool = False
    default_shares: tuple[str, ...] | None = None  # None: the even split
    #: ``(options, binary) -> shares`` when the default split depends on the options (the
    #: propensity model's share); None: ``default_shares``
    default_shares_for: Callable[[Any, bool], tuple[str, ...]] | None = None
    #: the searched split, used with budget_split = "default" (None: same as default_shares)
    searched_shares: tuple[str, ...] | None = None
    #: splits ``dpate plan`` tries for a recommendation, by number of parts
    candidate_splits: Mapping[int, tuple[tuple[Fraction, ...], ...]] = dataclasses.field(
        default_factory=dict
    )
    plan_from_statistics: Callable[[StatisticsInputs], MechanismPlan] | None = None
    #: the per-cell sums are of ``Y - B/2`` (else of ``Y``)
    centred_cells: bool = True
    #: the estimate depends on the order of the records (Algorithm 1 pairs records by rank): the
    #: site presents them in a fresh data-independent order and its engine computes Algorithm 1's
    #: statistics
    order_dependent: bool = False
    #: the estimator compares arms within covariate strata (a site needs a stratum with both)
    stratified: bool = True
    #: the release is defined, and DP, on any records whatever its arms hold (an empty arm or
    #: no stratum with both arms gives an uninformative release): a site then releases instead
    #: of refusing, since a refusal that depends on the records would tell the coordinator a
    #: bit about them for free (docs/explanation/privacy.md); False: every feasibility rule is a refusal
    releases_on_any_records: bool = False
    #: its strata are the covariates' cross-classification (each covariate is constant within a
    #: stratum, so the balance table's within-strata SMD is 0 by construction); False for an
    #: estimator whose strata are coarser (propensity bands): see ``balance_bands``
    covariate_strata: bool = True
    #: ``(committed record, options, BandInputs) -> (band of every stratum, or of every record
    #: when ``BandInputs.x`` is given; number of bands)``, or None when the record holds no band
    #: definition: the public bands the balance table's within column compares arms in. The
    #: record is what the site's ledger committed for the estimate: ``{"estimate": public
    #: fields, "released": kept noisy values}`` (:class:`DrawnRelease`), e.g. the
    #: propensity model the estimate's bands came from: post-processing of the committed
    #: release, never a new fit or draw. None: no within column unless ``covariate_strata``
    balance_bands: (
        Callable[[Mapping[str, Any], Any, BandInputs], tuple[np.ndarray, int] | None] | None
    ) = None
    #: ``options -> names`` of the diagnostics every resolved release publishes
    required_diagnostics: Callable[[Any], tuple[str, ...]] = lambda options: ("noise_variance",)
    #: ``(estimate, options, |X|) -> problems``: why a resolved published estimate cannot be this
    #: mechanism's output (beyond the generic checks every estimate gets)
    plausible: Callable[[SiteEstimate, Any, int], list[str]] = _no_rules
    #: the public reasons of an unresolved release (empty: every release resolves)
    unresolved_reasons: tuple[str, ...] = ()
    #: ``options -> bool``: whether a report publishes the arm sizes exactly
    publishes_arm_sizes: Callable[[Any], bool] = lambda options: False
    #: ``options -> text``: the estimand in words when it depends on the options
    estimand_for: Callable[[Any], str] | None = None
    #: ``inputs -> (probability, variance)``: the predicted probability that a release resolves an
    #: estimate and the variance it reports when it does (None: every release resolves)
    resolution: Callable[[PredictionInputs], tuple[float, float]] | None = None
    #: ``inputs -> share``: the expected share of the estimand's records in the strata the
    #: release reads, where it reads only some and stands for the rest (None: it reads all)
    read_share: Callable[[PredictionInputs], float] | None = None
    #: ``inputs -> (probabilities, variances, shared sds)``: the predicted releases as equally
    #: likely ones, each one's probability of resolving, its variance when it does and the sd of
    #: the part of its error common to every site (0: none), where the reported variance varies
    #: between releases (the combined prediction draws each site's release from them; None:
    #: every release reports :attr:`resolution`'s variance)
    resolutions: Callable[[PredictionInputs], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = (
        None
    )
    #: ``(options, |X|, sites) -> StudyChoice``: the options every site of a study releases
    #: with, where a public rule picks a variant (the adjusted estimator's weighting, ``"auto"``)
    #: once for the whole study from every site's public design; None: one variant
    choose: Callable[[Any, int, Sequence[StudySite]], StudyChoice] | None = None
    #: ``(options, predicted sites) -> notes`` for ``dpate plan`` and ``dpate check``
    describe: Callable[[Any, Sequence[Any]], list[str]] | None = None
    #: ``(options, predicted sites) -> notes`` on how to read the study's intervals (not a doubt
    #: about their validity, which :attr:`cautions` carries: e.g. the propensity release's
    #: allowance at small sites, which makes an interval conservative where there is nothing to
    #: correct); ``dpate plan`` and ``dpate check`` print them with the notes, and the study's
    #: result carries them (None: none)
    reading_notes: Callable[[Any, Sequence[Any]], list[str]] | None = None
    #: ``(options, predicted sites) -> cautions``: what questions the validity of the estimate
    #: (a bias, or a coverage its interval may not hold) at the predicted sites; ``dpate plan``
    #: and ``dpate check`` print them as cautions, and the study's result carries them beside
    #: the estimate (None: none)
    cautions: Callable[[Any, Sequence[Any]], list[str]] | None = None
    #: ``(options, binary) -> [(label, options)]``: other settings of the study's options whose
    #: interval ``dpate plan`` predicts beside its own, where which is narrower depends on what
    #: only the planner's assumptions say (the propensity release's weighted sum); None: none
    alternatives: Callable[[Any, bool], Sequence[tuple[str, Any]]] | None = None

    # --- options --------------------------------------------------------------------------

    def option_fields(self) -> tuple[dataclasses.Field[Any], ...]:
        """The fields of :attr:`options` (none without options)."""
        return () if self.options is None else dataclasses.fields(self.options)

    def make_options(self, values: Mapping[str, Any] | None = None) -> Any:
        """The options from ``values`` (keyword names of :attr:`options`), defaults filled; None
        for an estimator without options. Raises ``TypeError``/``ValueError`` naming what is
        wrong (an unknown or a missing option)."""
        if self.options is None:
            if values:
                raise TypeError(f"estimator {self.name!r} has no options (got {sorted(values)})")
            return None
        return self.options(**dict(values or {}))

    def assumed_options(self) -> Any:
        """The options ``dpate plan`` assumes when a study does not give them (another estimator
        it compares): each field's default, or its ``metadata["assumed"]`` value for an option a
        spec must state (the difference in means' public arm sizes: the paper's setting)."""
        if self.options is None:
            return None
        assumed = {
            f.name: f.metadata["assumed"] for f in self.option_fields() if "assumed" in f.metadata
        }
        return self.options(**assumed)

    def _options(self, options: Any) -> Any:
        return self.make_options() if options is None and self.options is not None else options

    # --- budget -----------------------------------------------------------------------------

    def part_names(self, options: Any = None, binary: bool = False) -> tuple[str, ...]:
        if self.parts_for is not None:
            return self.parts_for(self._options_or_none(options), binary)
        return self.parts

    def _options_or_none(self, options: Any) -> Any:
        if options is not None or self.options is None:
            return options
        try:
            return self.make_options()
        except (TypeError, ValueError):  # an option without a default: read as not given
            return None

    def n_parts(self, options: Any = None, binary: bool = False) -> int:
        return len(self.part_names(options, binary))

    def default_split(self, options: Any = None, binary: bool = False) -> BudgetSplit:
        n = self.n_parts(options, binary)
        shares = self.default_shares
        if self.default_shares_for is not None:
            shares = self.default_shares_for(self._options_or_none(options), binary)
        if shares is not None and len(shares) == n:
            return BudgetSplit.of(shares, n)
        return BudgetSplit.even(n)

    def searched_split(self, options: Any = None, binary: bool = False) -> BudgetSplit:
        """The ``"default"`` preset: the searched split where one is documented for these parts,
        else the estimator's default split."""
        n = self.n_parts(options, binary)
        if self.searched_shares is not None and len(self.searched_shares) == n:
            return BudgetSplit.of(self.searched_shares, n)
        return self.default_split(options, binary)

    def split(
        self, shares: Sequence[object] | str | None, options: Any = None, binary: bool = False
    ) -> BudgetSplit:
        """The site's split: its own shares, a preset (``"paper"``: even; ``"default"``: the
        searched split), else this estimator's default (the even split for the paper's
        mechanisms, so that a spec without a split releases exactly what the paper does)."""
        if shares is None:
            return self.default_split(options, binary)
        if isinstance(shares, str):
            if shares == "paper":
                return BudgetSplit.even(self.n_parts(options, binary))
            if shares == "default":
                return self.searched_split(options, binary)
            raise ValueError(
                f"budget_split ({shares!r}) must be explicit shares or one of {list(PRESETS)}"
            )
        n = self.n_parts(options, binary)
        return BudgetSplit.of(shares, n)  # type: ignore[arg-type]

    def cost(self, privacy: PrivacyParams) -> PrivacyParams:
        """What one release charges the ledger: a pure mechanism spends no delta."""
        return PrivacyParams(privacy.epsilon, Fraction(0)) if self.pure else privacy

    def splits_to_try(
        self, options: Any = None, binary: bool = False
    ) -> tuple[tuple[Fraction, ...], ...]:
        """The default split first, then :attr:`candidate_splits` for this many parts
        (``binary``: the binary-outcome mode's, where the estimator has one)."""
        first = self.default_split(options, binary and self.binary_outcome).shares
        return tuple(dict.fromkeys((first, *self.candidate_splits.get(len(first), ()))))

    def study_choice(
        self, options: Any, domain_size: int, sites: Sequence[StudySite]
    ) -> StudyChoice:
        """The options every site of a study with these public designs releases with, and the
        variant they pick (one estimand for the whole study, never one per site). Idempotent:
        a choice's own options choose themselves."""
        if self.choose is None:
            return StudyChoice(options)
        # an option without a default (the difference in means' arm sizes) stays unread: None
        return self.choose(self._options_or_none(options), max(int(domain_size), 1), tuple(sites))

    # --- words ------------------------------------------------------------------------------

    def estimand_of(self, options: Any = None) -> str:
        """What the estimator estimates, in words (with these options)."""
        if self.estimand_for is not None:
            return self.estimand_for(self._options(options))
        return self.estimand


_REGISTRY: dict[str, Estimator] = {}
#: every registered estimator by name, in registration order (read-only: use :func:`register`)
ESTIMATORS: Mapping[str, Estimator] = MappingProxyType(_REGISTRY)


def register(estimator: Estimator) -> Estimator:
    """Add ``estimator`` to :data:`ESTIMATORS` (refused if its name is taken); returns it."""
    if estimator.name in _REGISTRY:
        raise ValueError(f"estimator {estimator.name!r} is already registered")
    _REGISTRY[estimator.name] = estimator
    return estimator


def unregister(name: str) -> Estimator:
    """Remove the estimator called ``name`` (a test's toy, a plug-in being replaced)."""
    try:
        return _REGISTRY.pop(name)
    except KeyError:
        raise ValueError(f"estimator {name!r} is not registered") from None


def estimator_of(name: str) -> Estimator:
    """The estimator called ``name``, or an error listing the valid names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"estimator ({name!r}) is not one of {sorted(_REGISTRY)}") from None
