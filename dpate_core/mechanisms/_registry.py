"""The estimators a study may name, each declared once: what it is, what it costs, what it needs.

One :class:`Estimator` per release mechanism. The study spec, the report schema, the site task and
the experiments take their choices from :data:`ESTIMATORS` instead of repeating string lists:

- ``name`` (the spec's ``estimator = "..."``) and ``label`` (tables and figures);
- ``parts``: the names of the budget parts, in the order of a ``budget_split``; the difference in
  means has a third part (a DP treated count) when the arm sizes are private (ERRATA section 5,
  ``docs/corrections.md``);
- ``default_split``: the split used when a site gives none (the paper's even split for the paper's
  mechanisms, so that the paper's releases do not change; a searched split for the adjusted
  estimator, ``docs/adjusted.md``);
- ``searched_shares``: the split a search on simulations found best (``docs/results.md``, "Budget
  split presets"); a site opts in with ``budget_split = "default"``; ``"paper"`` is the even
  split (:data:`PRESETS`);
- ``binary_parts``: the parts when the outcome is binary (0 or ``B``; the difference in means then
  needs no sums of squares);
- ``pure``: the mechanism is ``(epsilon, 0)``-DP, so the ledger charges no delta (:meth:`cost`);
- ``needs_covariates`` and ``designs``: what a spec must declare for it;
- ``plan``: builds the :class:`~dpate_core.release.MechanismPlan` from a site's prepared records;
- ``order_dependent``: the estimate depends on record order (Algorithm 1), so a site must present
  its records in an order that does not depend on the data (``docs/privacy.md``, Record order);
- ``unresolved_reasons``: the public reasons a release of it may give for not resolving an
  estimate (``SiteEstimate.unresolved_reason``); empty for a mechanism that always resolves. The
  server refuses an unresolved report with any other reason (``dpate.schemas.plausibility``).

Adding an estimator is one module with its ``plan_*`` function and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpate_core.privacy import BudgetSplit, PrivacyParams

if TYPE_CHECKING:  # release imports this module
    from dpate_core.release import MechanismPlan

__all__ = ["ESTIMATORS", "PRESETS", "Estimator", "PlanInputs", "estimator_of"]

#: named budget splits a spec may give instead of explicit shares
PRESETS = ("paper", "default")


@dataclass(frozen=True)
class PlanInputs:
    """A site's prepared records and the public constants a plan needs."""

    w: np.ndarray
    y: np.ndarray
    x: np.ndarray
    domain_size: int
    bound: float
    privacy: PrivacyParams
    split: Sequence[Fraction] | None
    arm_sizes_public: bool | None = None
    #: the matching estimators' variance mode: "appendix" (the paper's) or "stratified"
    variance: str = "appendix"
    #: the outcome is 0 or B in every record (the difference in means drops its squares)
    binary: bool = False
    #: the adjusted estimator's post-processing: "auto", "subclassification" or "fixed_effects"
    weighting: str = "auto"


@dataclass(frozen=True)
class Estimator:
    """One release mechanism as a study names it (see the module docstring)."""

    name: str
    label: str
    parts: tuple[str, ...]
    pure: bool
    needs_covariates: bool
    designs: tuple[str, ...]
    build: Callable[[PlanInputs], MechanismPlan]
    default_shares: tuple[str, ...] | None = None  # None: the even split
    #: the estimate depends on the order of the records (Algorithm 1 pairs records by rank)
    order_dependent: bool = False
    private_arm_parts: tuple[str, ...] | None = None  # parts when arm sizes are private
    #: the searched split, used with budget_split = "default" (None: same as default_shares)
    searched_shares: tuple[str, ...] | None = None
    binary_parts: tuple[str, ...] | None = None  # parts for a binary outcome (0 or B)
    binary_private_arm_parts: tuple[str, ...] | None = None
    #: variance modes of plan_matching this estimator accepts (the first is the default)
    variance_modes: tuple[str, ...] = ()
    #: the public reasons of an unresolved release (empty: every release resolves)
    unresolved_reasons: tuple[str, ...] = ()

    def part_names(
        self, arm_sizes_public: bool | None = None, binary: bool = False
    ) -> tuple[str, ...]:
        private = arm_sizes_public is False
        if binary and self.binary_parts is not None:
            if private and self.binary_private_arm_parts is not None:
                return self.binary_private_arm_parts
            return self.binary_parts
        if private and self.private_arm_parts is not None:
            return self.private_arm_parts
        return self.parts

    def n_parts(self, arm_sizes_public: bool | None = None, binary: bool = False) -> int:
        return len(self.part_names(arm_sizes_public, binary))

    def default_split(
        self, arm_sizes_public: bool | None = None, binary: bool = False
    ) -> BudgetSplit:
        n = self.n_parts(arm_sizes_public, binary)
        if self.default_shares is not None and len(self.default_shares) == n:
            return BudgetSplit.of(self.default_shares, n)
        return BudgetSplit.even(n)

    def searched_split(
        self, arm_sizes_public: bool | None = None, binary: bool = False
    ) -> BudgetSplit:
        """The ``"default"`` preset: the searched split where one is documented for these parts,
        else the estimator's default split."""
        n = self.n_parts(arm_sizes_public, binary)
        if self.searched_shares is not None and len(self.searched_shares) == n:
            return BudgetSplit.of(self.searched_shares, n)
        return self.default_split(arm_sizes_public, binary)

    def split(
        self,
        shares: Sequence[object] | str | None,
        arm_sizes_public: bool | None = None,
        binary: bool = False,
    ) -> BudgetSplit:
        """The site's split: its own shares, a preset (``"paper"``: even; ``"default"``: the
        searched split), else this estimator's default (the even split for the paper's
        mechanisms, so that a spec without a split releases exactly what the paper does)."""
        if shares is None:
            return self.default_split(arm_sizes_public, binary)
        if isinstance(shares, str):
            if shares == "paper":
                return BudgetSplit.even(self.n_parts(arm_sizes_public, binary))
            if shares == "default":
                return self.searched_split(arm_sizes_public, binary)
            raise ValueError(
                f"budget_split ({shares!r}) must be explicit shares or one of {list(PRESETS)}"
            )
        n = self.n_parts(arm_sizes_public, binary)
        return BudgetSplit.of(shares, n)  # type: ignore[arg-type]

    def cost(self, privacy: PrivacyParams) -> PrivacyParams:
        """What one release charges the ledger: a pure mechanism spends no delta."""
        return PrivacyParams(privacy.epsilon, Fraction(0)) if self.pure else privacy

    def plan(self, inputs: PlanInputs) -> MechanismPlan:
        """The :class:`~dpate_core.release.MechanismPlan` on a site's records (private)."""
        return self.build(inputs)


def _plan_dim(p: PlanInputs) -> MechanismPlan:
    from dpate_core.mechanisms.difference_in_means import plan_difference_in_means

    return plan_difference_in_means(
        p.w,
        p.y,
        bound=p.bound,
        epsilon=p.privacy.epsilon,
        delta=p.privacy.delta,
        split=p.split,
        arm_sizes_public=bool(p.arm_sizes_public),
        binary=p.binary,
    )


def _plan_matching(name: str) -> Callable[[PlanInputs], MechanismPlan]:
    def build(p: PlanInputs) -> MechanismPlan:
        from dpate_core.mechanisms.matching import plan_matching
        from dpate_core.statistics import cell_statistics, matching_statistics

        stats = matching_statistics(p.w, p.y, p.x, p.domain_size, bound=p.bound)
        cells = None
        if p.variance == "stratified":
            cells = cell_statistics(p.w, p.y, p.x, domain_size=p.domain_size, bound=p.bound)
        return plan_matching(
            name,
            stats,
            bound=p.bound,
            epsilon=p.privacy.epsilon,
            delta=p.privacy.delta,
            domain_size=p.domain_size,
            split=p.split,
            variance=p.variance,
            cells=cells,
        )

    return build


def _plan_adjusted(p: PlanInputs) -> MechanismPlan:
    from dpate_core.mechanisms.adjusted import plan_adjusted

    return plan_adjusted(
        p.w,
        p.y,
        p.x,
        bound=p.bound,
        epsilon=p.privacy.epsilon,
        delta=p.privacy.delta,
        domain_size=p.domain_size,
        split=p.split,
        weighting=p.weighting,
    )


def _adjusted_default() -> tuple[str, ...]:
    from dpate_core.mechanisms.adjusted import DEFAULT_SPLIT

    return tuple(DEFAULT_SPLIT)


def _adjusted_unresolved() -> tuple[str, ...]:
    from dpate_core.mechanisms.adjusted import (
        UNRESOLVED_FIXED_EFFECTS,
        UNRESOLVED_SUBCLASSIFICATION,
    )

    return (UNRESOLVED_FIXED_EFFECTS, UNRESOLVED_SUBCLASSIFICATION)


#: SmoothDPMatching's searched split (ATE, sampling variance, ln S): the best MSE of the search in
#: dpate/experiments/split_search.py (search_budget_split; docs/results.md, "Budget split presets")
SMOOTH_MATCHING_SEARCHED = ("11/20", "3/20", "3/10")

ESTIMATORS: dict[str, Estimator] = {
    e.name: e
    for e in (
        Estimator(
            name="dim",
            label="DP difference in means",
            parts=("arm sums", "arm sums of squares"),
            private_arm_parts=("arm sums", "arm sums of squares", "treated count"),
            binary_parts=("arm sums",),
            binary_private_arm_parts=("arm sums", "treated count"),
            pure=True,
            needs_covariates=False,
            designs=("randomized",),
            build=_plan_dim,
        ),
        Estimator(
            name="smooth_matching",
            label="SmoothDPMatching",
            parts=("ATE", "sampling variance", "ln smooth sensitivity"),
            pure=False,
            needs_covariates=True,
            designs=("randomized", "observational"),
            build=_plan_matching("smooth_matching"),
            order_dependent=True,
            searched_shares=SMOOTH_MATCHING_SEARCHED,
            variance_modes=("appendix", "stratified"),
        ),
        Estimator(
            name="global_matching",
            label="GlobalDPMatching",
            parts=("ATE", "sampling variance"),
            pure=False,
            needs_covariates=True,
            designs=("randomized", "observational"),
            build=_plan_matching("global_matching"),
            order_dependent=True,
            variance_modes=("appendix", "stratified"),
        ),
        Estimator(
            name="adjusted",
            label="DP subclassification (adjusted)",
            parts=("cell counts", "cell sums", "cell sums of squares"),
            pure=True,
            needs_covariates=False,
            designs=("randomized", "observational"),
            build=_plan_adjusted,
            default_shares=_adjusted_default(),
            unresolved_reasons=_adjusted_unresolved(),
        ),
    )
}


def estimator_of(name: str) -> Estimator:
    """The estimator called ``name``, or an error listing the valid names."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"estimator ({name!r}) is not one of {sorted(ESTIMATORS)}") from None
