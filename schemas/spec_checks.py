"""The study spec's cross-field rules (:class:`~dpate.schemas.spec.StudySpec`): what a valid study needs
beyond each field's own type, every broken rule as a ``(field path, message)`` problem that names
the rule and says what would be valid."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpate_core.mechanisms import ESTIMATORS

if TYPE_CHECKING:
    from dpate.schemas.spec import StudySpec

__all__ = ["MAX_DOMAIN_SIZE", "cross_field_problems"]

#: Largest allowed |X|: stratum ids must fit comfortably in int64 and the smooth sensitivity's
#: O(N min(|X|, N)) cost must stay sane.
MAX_DOMAIN_SIZE = 10**9

Problems = list[tuple[str, str]]  # (field path, message)


def cross_field_problems(spec: StudySpec) -> Problems:
    """Every cross-field rule the spec breaks, in the order the fields are documented."""
    return [
        *_design_problems(spec),
        *_repeat_problems(spec),
        *_option_problems(spec),
        *_site_problems(spec),
    ]


def _design_problems(spec: StudySpec) -> Problems:
    """The estimator against the design, arm_sizes_public and the covariates."""
    est = spec.estimator_info
    problems: Problems = []
    if spec.design not in est.designs:
        valid = [e.name for e in ESTIMATORS.values() if spec.design in e.designs]
        problems.append(
            (
                "estimator",
                f"{est.name!r} ({est.label}) is only valid for a {' or '.join(est.designs)} "
                f"design: use one of {valid} for an {spec.design} study",
            )
        )
    if spec.estimator == "dim" and spec.arm_sizes_public is None:
        problems.append(
            (
                "arm_sizes_public",
                "estimator 'dim' publishes the arm sizes N_t and N_c exactly when they are "
                "public design facts: say so explicitly, arm_sizes_public = true (the paper's "
                "randomized-trial setting) or false (a DP treated count, a third budget part)",
            )
        )
    elif spec.estimator != "dim" and spec.arm_sizes_public is not None:
        why = (
            "arm sizes are not public in an observational design"
            if spec.design == "observational"
            else f"estimator {spec.estimator!r} publishes no arm sizes"
        )
        problems.append(
            (
                "arm_sizes_public",
                f"{why}: remove arm_sizes_public (it applies to estimator 'dim' only)",
            )
        )
    if (est.needs_covariates or spec.design == "observational") and not spec.covariates:
        why = (
            f"estimator {spec.estimator!r} matches on covariates"
            if est.needs_covariates
            else "an observational study must adjust for its confounders"
        )
        problems.append(("covariates", f"{why}: declare at least one [[covariates]] entry"))
    return problems


def _repeat_problems(spec: StudySpec) -> Problems:
    """A column used in two roles; a site id given twice."""
    problems: Problems = []
    cols = [spec.treatment.column, spec.outcome.column, *(c.column for c in spec.covariates)]
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        problems.append(
            (
                "(columns)",
                f"columns {dup} are used more than once: each role needs its own column",
            )
        )
    ids = [s.id for s in spec.sites]
    dup_ids = sorted({i for i in ids if ids.count(i) > 1})
    if dup_ids:
        problems.append(("sites", f"site ids {dup_ids} are repeated: site ids must be unique"))
    return problems


def _option_problems(spec: StudySpec) -> Problems:
    """Estimator options (variance, adjusted_weighting, outcome.binary) the estimator lacks."""
    est = spec.estimator_info
    problems: Problems = []
    if spec.variance is not None and spec.variance not in est.variance_modes:
        problems.append(
            (
                "variance",
                f"estimator {spec.estimator!r} has no variance option: remove variance (it "
                f"applies to 'smooth_matching' and 'global_matching')",
            )
        )
    if spec.adjusted_weighting is not None and spec.estimator != "adjusted":
        problems.append(
            (
                "adjusted_weighting",
                f"estimator {spec.estimator!r} has no weighting option: remove "
                f"adjusted_weighting (it applies to estimator 'adjusted' only)",
            )
        )
    if spec.outcome.binary and est.binary_parts is None:
        problems.append(
            (
                "outcome.binary",
                f"estimator {spec.estimator!r} has no binary-outcome mode: remove "
                f"outcome.binary (it applies to estimator 'dim')",
            )
        )
    return problems


def _site_problems(spec: StudySpec) -> Problems:
    """Each site's budget split and delta against the estimator, the domain size, and the
    public keys required by require_signed_reports."""
    est = spec.estimator_info
    problems: Problems = []
    parts = spec.release_parts
    for j, s in enumerate(spec.sites):
        if isinstance(s.budget_split, list) and len(s.budget_split) != parts:
            problems.append(
                (
                    f"sites.{j}.budget_split",
                    f"estimator {spec.estimator!r} splits its budget into {parts} parts, but "
                    f"budget_split has {len(s.budget_split)} shares: give exactly {parts}",
                )
            )
        if not est.pure and s.delta <= 0:
            problems.append(
                (
                    f"sites.{j}.delta",
                    f"estimator {spec.estimator!r} is (epsilon, delta)-DP and needs delta > 0: "
                    f"give a small delta such as '1e-5'",
                )
            )
    if spec.domain_size > MAX_DOMAIN_SIZE:
        problems.append(
            (
                "covariates",
                f"the covariates define {spec.domain_size} strata, more than {MAX_DOMAIN_SIZE}: "
                f"coarsen the bins or drop a covariate",
            )
        )
    if spec.require_signed_reports:  # docs/deploying.md, Trust
        for j, s in enumerate(spec.sites):
            if s.public_key is None:
                problems.append(
                    (
                        f"sites.{j}.public_key",
                        f"require_signed_reports is set but site {s.id!r} has no public_key: "
                        f"add the line printed by dpate site keygen {s.id}",
                    )
                )
    return problems
