"""The study spec's cross-field rules (:class:`~dpate.schemas.spec.StudySpec`): what a valid study needs
beyond each field's own type, every broken rule as a ``(field path, message)`` problem that names
the rule and says what would be valid."""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from dpate_core.mechanisms import ESTIMATORS, Estimator

if TYPE_CHECKING:
    from dpate.schemas.spec._model import StudySpec

__all__ = [
    "MAX_DOMAIN_SIZE",
    "cross_field_problems",
    "keyed_options",
    "option_object",
    "option_values",
]

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
        *_target_problems(spec),
    ]


def _target_problems(spec: StudySpec) -> Problems:
    """A target width no interval of effects in ``[-B, B]`` needs."""
    bound = spec.outcome.bound
    if spec.target_width is not None and spec.target_width > 2 * bound:
        return [
            (
                "target_width",
                f"{spec.target_width:g} is wider than every possible effect's range (2B = "
                f"{2 * bound:g}): give the width the decision needs, at most {2 * bound:g}",
            )
        ]
    return []


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
    if (est.needs_covariates or spec.design == "observational") and not spec.covariates:
        why = (
            f"estimator {spec.estimator!r} matches on covariates"
            if est.needs_covariates
            else "an observational study must adjust for its confounders"
        )
        problems.append(("covariates", f"{why}: declare at least one [[covariates]] entry"))
    if not est.unbinned_covariates:
        takers = [e.name for e in ESTIMATORS.values() if e.unbinned_covariates]
        for i, c in enumerate(spec.covariates):
            if c.kind == "numeric" and not c.binned:
                problems.append(
                    (
                        f"covariates.{i}",
                        f"covariate {c.column!r} has public bounds and no bins: estimator "
                        f"{est.name!r} ({est.label}) takes covariates only as strata (levels "
                        f"or bins; only {takers} take a bounded value without bins): declare "
                        f"bins for it (edges = [lower, ..., upper]) or choose one of {takers}",
                    )
                )
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


def _spec_key(f: dataclasses.Field[Any]) -> str | None:
    key = f.metadata.get("spec_key")
    return None if key is None else str(key)


def keyed_options() -> dict[str, list[str]]:
    """Every top-level spec key an estimator reads an option from, with the estimators that do."""
    out: dict[str, list[str]] = {}
    for est in ESTIMATORS.values():
        for f in est.option_fields():
            key = _spec_key(f)
            if key is not None:
                out.setdefault(key, []).append(est.name)
    return out


def option_values(spec: StudySpec) -> dict[str, Any]:
    """The estimator's option values the spec gives, by field name: a field with a
    ``spec_key`` from that top-level key (when set), every other from ``[estimator_options]``."""
    est = spec.estimator_info
    values: dict[str, Any] = {}
    for f in est.option_fields():
        key = _spec_key(f)
        if key is None:
            if f.name in spec.estimator_options:
                values[f.name] = spec.estimator_options[f.name]
        elif getattr(spec, key, None) is not None:
            values[f.name] = getattr(spec, key)
    return values


@lru_cache(maxsize=64)
def _adapter(options: type) -> TypeAdapter[Any]:
    return TypeAdapter(options)


def option_object(spec: StudySpec) -> Any:
    """The estimator's options (its ``options`` dataclass, validated), None without options."""
    est = spec.estimator_info
    if est.options is None:
        return None
    return _adapter(est.options).validate_python(option_values(spec))


def _option_problems(spec: StudySpec) -> Problems:
    """The estimator's options: each one given must be one it has (a top-level key or an
    ``[estimator_options]`` entry), each one without a default must be given, each value must
    have its type; a binary outcome needs an estimator with a binary-outcome mode."""
    est = spec.estimator_info
    problems: Problems = []
    fields = est.option_fields()
    own_keys = {_spec_key(f) for f in fields} - {None}
    for key, owners in keyed_options().items():
        if key not in own_keys and getattr(spec, key, None) is not None:
            designs = {d for name in owners for d in ESTIMATORS[name].designs}
            where = "" if spec.design in designs else f", never to an {spec.design} design"
            problems.append(
                (
                    key,
                    f"estimator {est.name!r} has no option {key}: remove it (it applies to "
                    f"{_names(owners)}{where})",
                )
            )
    table = {f.name for f in fields if _spec_key(f) is None}
    for name in sorted(set(spec.estimator_options) - table):
        problems.append(
            (
                f"estimator_options.{name}",
                f"estimator {est.name!r} has no option {name!r}"
                + (f": its options are {sorted(table)}" if table else ": it has none here"),
            )
        )
    values = option_values(spec)
    for f in fields:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in values:
            where = _spec_key(f) or f"estimator_options.{f.name}"
            doc = f.metadata.get("doc", f"required by estimator {est.name!r}")
            problems.append((where, str(doc)))
    if not problems and est.options is not None:
        try:
            option_object(spec)
        except ValidationError as exc:
            problems += _validation_problems(est, exc)
    if spec.outcome.binary and not est.binary_outcome:
        owners = [e.name for e in ESTIMATORS.values() if e.binary_outcome]
        problems.append(
            (
                "outcome.binary",
                f"estimator {spec.estimator!r} has no binary-outcome mode: remove "
                f"outcome.binary (it applies to {_names(owners)})",
            )
        )
    return problems


def _names(names: list[str]) -> str:
    return f"estimator {names[0]!r}" if len(names) == 1 else f"estimators {names}"


def _validation_problems(est: Estimator, exc: ValidationError) -> Problems:
    """An option's wrong type or value, at the key the spec gives it (never echoing it)."""
    keys = {f.name: _spec_key(f) or f"estimator_options.{f.name}" for f in est.option_fields()}
    out: Problems = []
    for err in exc.errors(include_url=False, include_input=False):
        name = str(err["loc"][0]) if err["loc"] else ""
        out.append((keys.get(name, "estimator_options"), err["msg"]))
    return out


def _site_problems(spec: StudySpec) -> Problems:
    """Each site's budget split and delta against the estimator, the domain size, and the
    signing opt-out's reason. A site without a public_key under ``signing = "required"`` is not
    a spec error: that site cannot release (its report would be rejected), which
    :func:`unsigned_sites` names for ``dpate check``, the site and the aggregator."""
    est = spec.estimator_info
    problems: Problems = []
    try:  # an option problem is reported by _option_problems; count the parts without it
        options = option_object(spec)
    except ValidationError:
        options = None
    parts = est.n_parts(options, spec.outcome.binary)
    for j, s in enumerate(spec.sites):
        if isinstance(s.budget_split, list) and len(s.budget_split) != parts:
            problems.append(
                (
                    f"sites.{j}.budget_split",
                    f"estimator {spec.estimator!r} splits its budget into {parts} parts "
                    f"({', '.join(est.part_names(options, spec.outcome.binary))}) with these "
                    f"options, but budget_split has {len(s.budget_split)} shares: give exactly "
                    f"{parts}",
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
    if spec.signing == "none" and not (spec.unsigned_reason or "").strip():
        problems.append(
            (
                "unsigned_reason",
                'signing = "none" opts out of signed reports: say why in unsigned_reason '
                '(e.g. "public simulation data, no site keys"), or remove signing and give '
                "every site its public_key (dpate site keygen SITE)",
            )
        )
    if spec.signing == "required" and spec.unsigned_reason is not None:
        problems.append(
            (
                "unsigned_reason",
                'unsigned_reason applies only with signing = "none"; remove it',
            )
        )
    return problems
