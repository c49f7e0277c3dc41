"""``dpate plan STUDY.toml --n SITE=N ...``: predicted interval widths before anything is spent.

Reads only the study spec (:func:`dpate.settings.load_study_spec`) and the public site sizes: the
``n`` the spec declares for a site, or the one given with ``--n`` (which wins). No record is read,
no noise drawn, no ledger touched, no Prefect import. The prediction and its assumptions are
described in :mod:`dpate_core.planning` and ``docs/explanation/inference.md``.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Annotated, Any, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpate.cli.environment import SpecArg
from dpate.cli.output import print_table

__all__ = ["plan"]

out = Console(soft_wrap=True, highlight=False)


def _sizes(values: list[str], declared: dict[str, int | None]) -> dict[str, int]:
    """Each site's record count: ``--n SITE=N`` where given, else the ``n`` the spec declares for
    the site (``declared``: every site's, None when not declared)."""
    site_ids = list(declared)
    sizes: dict[str, int] = {s: n for s, n in declared.items() if n is not None}
    for v in values:
        site, sep, n = v.partition("=")
        if not sep or not site:
            raise typer.BadParameter(f"{v!r} is not SITE=N (e.g. site-a=5000)", param_hint="--n")
        if site not in site_ids:
            raise typer.BadParameter(
                f"site {site!r} is not in the study; its sites are {site_ids}", param_hint="--n"
            )
        try:
            sizes[site] = int(n)
        except ValueError:
            raise typer.BadParameter(
                f"the size of site {site!r} must be a whole number of records", param_hint="--n"
            ) from None
        if sizes[site] < 2:
            raise typer.BadParameter(f"site {site!r}: N must be at least 2", param_hint="--n")
    missing = [s for s in site_ids if s not in sizes]
    if missing:
        raise typer.BadParameter(
            f"give the public record count of every site: missing {missing} (declare n for the "
            f"site in the spec, or give e.g. --n {missing[0]}=5000)",
            param_hint="--n",
        )
    return sizes


def _arm_shares(
    values: list[str], site_ids: list[str]
) -> tuple[float, tuple[tuple[str, float], ...]]:
    """``--arm-share`` values: at most one common ``SHARE`` (0.5 if none) and ``SITE=SHARE``
    overrides, each strictly between 0 and 1."""
    common: float | None = None
    per_site: dict[str, float] = {}
    for v in values:
        site, sep, text = v.rpartition("=")
        if sep and site not in site_ids:
            raise typer.BadParameter(
                f"site {site!r} is not in the study; its sites are {site_ids}",
                param_hint="--arm-share",
            )
        try:
            share = float(text)
        except ValueError:
            raise typer.BadParameter(
                f"{v!r} is not SHARE or SITE=SHARE (e.g. 0.3 or site-a=0.3)",
                param_hint="--arm-share",
            ) from None
        if not 0 < share < 1:
            raise typer.BadParameter(
                f"{v!r}: a treated share must lie strictly between 0 and 1",
                param_hint="--arm-share",
            )
        if not sep and common is not None:
            raise typer.BadParameter(
                "give one common share (SHARE) and per-site ones as SITE=SHARE",
                param_hint="--arm-share",
            )
        if sep:
            per_site[site] = share
        else:
            common = share
    ordered = tuple((s, per_site[s]) for s in site_ids if s in per_site)
    return (0.5 if common is None else common), ordered


def _level_shares(values: list[str], sizes: dict[str, int]) -> tuple[tuple[float, ...], ...]:
    """``--level-shares`` values (``COLUMN=S1,S2,...``, one share per level in the spec's level
    or bin order) as ``Assumptions.level_shares``: per covariate that gives strata (more than
    one level), in the spec's order; a column not given keeps equally common levels; shares are
    rescaled to sum to 1 (they must sum to 1 within 0.01); none given at all: ``()``."""
    stated: dict[str, tuple[float, ...]] = {}
    for v in values:
        column, sep, text = v.partition("=")
        if not sep:
            raise typer.BadParameter(
                f"{v!r} is not COLUMN=S1,S2,... (e.g. sex=0.48,0.52)", param_hint="--level-shares"
            )
        if column not in sizes:
            raise typer.BadParameter(
                f"{column!r} is not a categorical or binned covariate with more than one level in "
                f"the spec; those are {sorted(sizes)}",
                param_hint="--level-shares",
            )
        try:
            shares = tuple(float(x) for x in text.split(","))
        except ValueError:
            raise typer.BadParameter(
                f"{v!r}: the shares must be numbers separated by commas",
                param_hint="--level-shares",
            ) from None
        total = math.fsum(shares)
        if len(shares) != sizes[column] or min(shares) <= 0 or abs(total - 1.0) > 0.01:
            raise typer.BadParameter(
                f"{v!r}: give {sizes[column]} positive shares (one per level, in the spec's "
                f"order) summing to 1",
                param_hint="--level-shares",
            )
        stated[column] = tuple(x / total for x in shares)
    if not stated:
        return ()
    return tuple(stated.get(c, (1.0 / k,) * k) for c, k in sizes.items())


def _numeric_covariates(
    means: list[str], sds: list[str], bounds: dict[str, tuple[float, float]]
) -> tuple[tuple[float, float], ...]:
    """``--covariate-mean`` / ``--covariate-sd`` values (``COLUMN=VALUE``, in the covariate's
    units) as ``Assumptions.numeric_covariates``: per covariate with public bounds and no bins,
    in the spec's order, ``(mean, sd)`` of its value rescaled to ``[-1, 1]``; a column given
    neither keeps the default (the middle of its bounds, sd a third of their half-width); none
    given at all: ``()``."""
    stated: dict[str, dict[str, float]] = {}
    for option, values in (("--covariate-mean", means), ("--covariate-sd", sds)):
        for v in values:
            column, sep, text = v.rpartition("=")
            if not sep:
                raise typer.BadParameter(
                    f"{v!r} is not COLUMN=VALUE (e.g. age=42)", param_hint=option
                )
            if column not in bounds:
                raise typer.BadParameter(
                    f"{column!r} is not a numeric covariate with public bounds and no bins in "
                    f"the spec; those are {sorted(bounds)}",
                    param_hint=option,
                )
            try:
                value = float(text)
            except ValueError:
                raise typer.BadParameter(
                    f"{v!r}: the value must be a number in the covariate's units",
                    param_hint=option,
                ) from None
            lo, hi = bounds[column]
            if option == "--covariate-mean" and not lo <= value <= hi:
                raise typer.BadParameter(
                    f"{v!r}: a mean must lie within the covariate's public bounds [{lo:g}, {hi:g}]",
                    param_hint=option,
                )
            if option == "--covariate-sd" and not 0 < value <= (hi - lo) / 2:
                raise typer.BadParameter(
                    f"{v!r}: an sd must be positive and at most half the bounds' width "
                    f"({(hi - lo) / 2:g})",
                    param_hint=option,
                )
            stated.setdefault(column, {})[option] = value
    if not stated:
        return ()
    from dpate_core.mechanisms.propensity import ASSUMED_NUMERIC_CENTRE, ASSUMED_NUMERIC_SPREAD

    out = []
    for column, (lo, hi) in bounds.items():  # an unstated part keeps the plan's default
        mid, half = (lo + hi) / 2.0, (hi - lo) / 2.0
        given = stated.get(column, {})
        mean = (given["--covariate-mean"] - mid) / half if "--covariate-mean" in given else None
        sd = given["--covariate-sd"] / half if "--covariate-sd" in given else None
        out.append((
            ASSUMED_NUMERIC_CENTRE if mean is None else mean,
            math.sqrt(ASSUMED_NUMERIC_SPREAD) if sd is None else sd,
        ))  # fmt: skip
    return tuple(out)


def _opt(help: str, name: str, metavar: str = "FLOAT") -> Any:
    return typer.Option(name, help=help, metavar=metavar, show_default=False)


def plan(
    spec: SpecArg,
    n: Annotated[
        list[str] | None,
        _opt(
            "a site's public record count, SITE=N (repeat; default: the n the spec declares for "
            "the site)",
            "--n",
            "SITE=N",
        ),
    ] = None,
    target_width: Annotated[
        float | None,
        _opt(
            "the full width of the combined 95% interval you need (default: the spec's "
            "target_width)",
            "--target-width",
        ),
    ] = None,
    outcome_sd: Annotated[
        float | None,
        _opt(
            "assumed outcome sd within an arm and stratum (default B/2, the worst case)",
            "--outcome-sd",
        ),
    ] = None,
    arm_share: Annotated[
        list[str] | None,
        _opt(
            "assumed treated share: SHARE for every site (default 0.5), SITE=SHARE for one "
            "(repeat; the others keep the common share)",
            "--arm-share",
            "[SITE=]SHARE",
        ),
    ] = None,
    effect: Annotated[
        float,
        typer.Option(
            "--effect",
            help="assumed effect (the matching variance estimate, the adjusted count noise)",
        ),
    ] = 0.0,
    outcome_mean: Annotated[
        float | None,
        _opt(
            "assumed outcome mean, e.g. a baseline risk (default B/2; the adjusted estimator)",
            "--outcome-mean",
        ),
    ] = None,
    confounding: Annotated[
        float,
        typer.Option(
            "--confounding",
            help="assumed crude difference in means minus the effect (the propensity model's "
            "noise variance)",
        ),
    ] = 0.0,
    propensity_sd: Annotated[
        float | None,
        _opt(
            "assumed sd of the true propensity's logit (the propensity estimator: default 1, "
            "a c-statistic of about 0.76; the adjusted estimator: the treated share then varies "
            "between strata, default the same in every stratum)",
            "--propensity-sd",
        ),
    ] = None,
    band_occupancy: Annotated[
        float | None,
        _opt(
            "assumed effective number of filled propensity bands per release, N^2 / sum N_b^2 "
            "(1 to K; default predicted from the model's noise; the propensity estimator)",
            "--band-occupancy",
        ),
    ] = None,
    covariate_mean: Annotated[
        list[str] | None,
        _opt(
            "assumed mean of a numeric covariate with public bounds and no bins, COLUMN=VALUE "
            "in its units (repeat; default the middle of its bounds; the propensity model's "
            "noise and band occupancy)",
            "--covariate-mean",
            "COLUMN=VALUE",
        ),
    ] = None,
    covariate_sd: Annotated[
        list[str] | None,
        _opt(
            "assumed sd of such a covariate over the records, COLUMN=VALUE in its units "
            "(repeat; default a third of its bounds' half-width)",
            "--covariate-sd",
            "COLUMN=VALUE",
        ),
    ] = None,
    level_shares: Annotated[
        list[str] | None,
        _opt(
            "assumed share of the records at each level of a categorical (or binned) covariate, "
            "COLUMN=S1,S2,... in the spec's level order (repeat; default equally common levels; "
            "the propensity model's noise and band occupancy)",
            "--level-shares",
            "COLUMN=SHARES",
        ),
    ] = None,
    occupied_strata: Annotated[
        float | None,
        _opt(
            "assumed number of strata holding records, filled evenly (default |X|; with strata "
            "filled unevenly, their effective number N^2 / sum N_x^2)",
            "--occupied-strata",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the plan as JSON")] = False,
) -> None:
    """Predict each site's and the combined 95% interval width from public inputs only (spends
    nothing), the epsilon per site a target width needs, a recommended estimator and split, and
    warn when the study cannot answer its question at its budget."""
    from dpate.settings import load_study_spec
    from dpate.study_plan import plan_spec, spec_designs
    from dpate_core.planning import Assumptions

    study = load_study_spec(spec)  # SpecError: one message, exit 3 (dpate.cli.errors)
    sizes = _sizes(n or [], {s.id: s.n for s in study.sites})
    common_share, site_shares = _arm_shares(arm_share or [], [s.id for s in study.sites])
    if outcome_sd is not None and not outcome_sd >= 0:
        raise typer.BadParameter("must be at least 0", param_hint="--outcome-sd")
    if outcome_mean is not None and not 0 <= outcome_mean <= study.outcome.bound:
        raise typer.BadParameter(
            f"must lie in the outcome's range [0, B = {study.outcome.bound:g}]",
            param_hint="--outcome-mean",
        )
    if propensity_sd is not None and not propensity_sd > 0:
        raise typer.BadParameter("must be positive", param_hint="--propensity-sd")
    if band_occupancy is not None and not band_occupancy >= 1:
        raise typer.BadParameter(
            "must be at least 1 (one band holding every record)", param_hint="--band-occupancy"
        )
    if occupied_strata is not None and not 1 <= occupied_strata <= study.domain_size:
        raise typer.BadParameter(
            f"must lie in [1, |X| = {study.domain_size}] (how many strata hold records)",
            param_hint="--occupied-strata",
        )
    numeric = _numeric_covariates(
        covariate_mean or [],
        covariate_sd or [],
        {c.column: c.bounds for c in study.unbinned_covariates},
    )
    shares = _level_shares(
        level_shares or [], {c.column: c.size for c in study.binned_covariates if c.size > 1}
    )
    designs = spec_designs(study, sizes)
    assumptions = Assumptions(
        arm_share=common_share,
        site_arm_shares=site_shares,
        outcome_sd=outcome_sd,
        effect=effect,
        occupied_strata=occupied_strata,
        outcome_mean=outcome_mean,
        confounding=confounding,
        propensity_sd=propensity_sd,
        band_occupancy=band_occupancy,
        numeric_covariates=numeric,
        level_shares=shares,
    )
    result = plan_spec(
        study,
        designs,
        assumptions=assumptions,
        target_width=study.target_width if target_width is None else target_width,
    )
    doc = {"study_id": study.study_id, "spec_hash": study.spec_hash, **result.as_dict()}
    doc["notes"] += _choice_notes(study, designs)
    doc["notes"] += _target_choice_notes(study, result.epsilon_needed)
    doc["notes"] += _occupancy_notes(study, designs, assumptions)
    doc["notes"] += _balance_notes(study, designs, assumptions)
    if as_json:
        out.print_json(json.dumps(doc))
        return
    _print(doc)


def _variant_at(study: Any, sites: list[tuple[int | None, Fraction, Any]]) -> str | None:
    """The variant the study's public rule chooses for sites of these ``(n, epsilon, split)``
    (the spec's options, e.g. ``"auto"``, chosen again)."""
    from dpate_core.mechanisms import StudySite

    chosen = study.estimator_info.study_choice(
        study.options, study.domain_size, [StudySite(n, e, tuple(sp)) for n, e, sp in sites]
    )
    return cast("str | None", chosen.variant)


def _choice_notes(study: Any, designs: list[Any]) -> list[str]:
    """A note when the record counts given here (``--n``) would make the study's public choice
    differently from the spec's declared ``n``, which is what the releases read."""
    given = _variant_at(study, [(d.n, d.epsilon, d.split) for d in designs])
    if given == study.variant:
        return []
    return [
        f"with the record counts given here (--n) the study's public rule would choose "
        f"{given}, but the releases choose from the n each site declares in the spec "
        f"({study.variant}): declare n = ... in every [[sites]] block to choose with these counts"
    ]


def _target_choice_notes(study: Any, needed: dict[str, Fraction] | None) -> list[str]:
    """A note when the epsilon per site a target width needs would make the study's public
    choice (``"auto"``, read from ``n x epsilon``) differently: the plan predicts that epsilon
    with the spec's choice, and a spec changed to it releases with the other."""
    if not needed or study.variant is None:
        return []
    at = _variant_at(
        study,
        [(s.n, needed.get(s.id, s.epsilon), study.budget_split(s.id).shares) for s in study.sites],
    )
    if at == study.variant:
        return []
    return [
        f"at the epsilon per site the target needs, the study's public rule would choose "
        f"{at} (the spec's epsilon gives {study.variant}, which the prediction of that "
        f"epsilon keeps): plan again after changing epsilon in the spec"
    ]


#: the noise sd ``dpate plan`` asks of a balance table's SMD (half the usual 0.1 mark)
BALANCE_NOISE_SD = 0.05


def _balance_notes(study: Any, designs: list[Any], assumptions: Any) -> list[str]:
    """With ``[balance]``: the least noise sd the table's own noise gives an SMD at each site
    (:func:`~dpate_core.balance.smd_noise_sd`, at the site's ``N``): a two-level covariate
    held by half the patients, and each numeric covariate over its bins' midpoints at its
    assumed mean and sd (:func:`_assumed_numeric`), and the balance epsilon that brings every
    such row to :data:`BALANCE_NOISE_SD` at every site (the sd falls as ``1 / epsilon``)."""
    from dpate_core.balance import balance_scale, smd_noise_sd

    if study.balance is None:
        return []
    eps = study.balance.epsilon
    scale = balance_scale(study.balance_layout, eps)
    rows = {"": ((1.0, 0.0), 0.5, 0.25), **_assumed_numeric(study, assumptions)}
    sds = {
        label: {d.site_id: smd_noise_sd(x, m, m, var, scale, d.n) or math.inf for d in designs}
        for label, (x, m, var) in rows.items()
    }
    needed = float(eps) * max(max(v.values()) for v in sds.values()) / BALANCE_NOISE_SD

    def per_site(label: str) -> str:
        return ", ".join(f"{site} {sd:.2g}" for site, sd in sds[label].items())

    numeric = "; ".join(f"{label} {per_site(label)}" for label in sds if label)
    numeric = (
        f", and a numeric covariate's (over its bins' midpoints, around the middle of its "
        f"bounds with sd a third of their half-width unless --covariate-mean and --covariate-sd "
        f"state it) at least {numeric}; a numeric covariate's noise comes mostly from its "
        f"bins far from its mean, so one whose values fill a small part of its public bounds "
        f"is the noisiest (bounds closer to its values, with policy = 'clip', narrow it)"
        if numeric
        else ""
    )
    return [
        f"balance table at epsilon {eps}: the SMD of a two-level covariate held by half the "
        f"patients carries noise of sd at least {per_site('')}{numeric} (an |SMD| within twice "
        f"it cannot be told from noise); about epsilon {needed:.3g} for the table would bring "
        f"every such row to {BALANCE_NOISE_SD} at every site"
    ]


def _assumed_numeric(study: Any, assumptions: Any) -> dict[str, tuple[Any, float, float]]:
    """Each numeric covariate of the balance table (``StudySpec.balance_values``) as
    ``(its bins' midpoints, assumed mean, assumed variance)`` in its units: the plan's
    ``Assumptions.numeric_covariates`` for one with public bounds and no bins (stated with
    --covariate-mean, --covariate-sd), else the middle of its bounds (a binned one's: its
    first and last edge) with sd a third of their half-width."""
    stated = dict(
        zip(
            [c.column for c in study.unbinned_covariates],
            assumptions.numeric_covariates,
            strict=False,
        )
    )
    out: dict[str, tuple[Any, float, float]] = {}
    by_column = {c.column: c for c in study.covariates}
    for column, values in study.balance_values.items():
        c = by_column[column]
        lo, hi = c.bounds if c.edges is None else (c.edges[0], c.edges[-1])
        u, sd = stated.get(column, (0.0, 1.0 / 3.0))
        mid, half = (lo + hi) / 2.0, (hi - lo) / 2.0
        out[column] = (values, mid + u * half, (sd * half) ** 2)
    return out


#: below this predicted effective number of filled propensity bands, ``dpate plan`` says the
#: model is mostly noise at the site (IHDP's sites of 250-370 with 25 covariates: 1.2-1.5)
FEW_FILLED_BANDS = 2


def _occupancy_notes(study: Any, designs: list[Any], assumptions: Any) -> list[str]:
    """The propensity bands' occupancy each site's prediction assumes (predicted from public
    inputs unless --band-occupancy states it)."""
    if study.estimator != "propensity" or assumptions.band_occupancy is not None:
        return []
    from dpate_core.mechanisms.propensity import band_occupancy, bands_of
    from dpate_core.planning import PredictionInputs

    sizes = tuple(c.size for c in study.binned_covariates)
    filled = [
        band_occupancy(
            PredictionInputs(
                d,
                study.domain_size,
                study.outcome.bound,
                assumptions,
                study.study_options,
                sizes,
                len(study.unbinned_covariates),
                binary=study.outcome.binary,
            )
        )
        for d in designs
    ]
    per_site = ", ".join(f"{d.site_id} {f:.2f}" for d, f in zip(designs, filled, strict=True))
    notes = [
        f"propensity bands: predicted effective number of filled bands of "
        f"{bands_of(study.study_options)} per release: {per_site} (the noisy model's band edges "
        f"miss where the records lie at small sites; --band-occupancy states another)"
    ]
    few = [d.site_id for d, f in zip(designs, filled, strict=True) if f < FEW_FILLED_BANDS]
    if few:
        notes.append(
            f"propensity model mostly noise at {', '.join(few)}: fewer than "
            f"{FEW_FILLED_BANDS} filled bands means most records in one band, so the "
            f"estimate is close to the crude difference, corrected by extrapolation, and its "
            f"interval is wide; each covariate adds to the model query's noise (2 counts per "
            f"categorical, 9/4 per numeric one), so more epsilon, more records per site or a "
            f"shorter adjustment set give the model bands (dropping a confounder leaves its bias)"
        )
    return notes


def _print(doc: dict[str, Any]) -> None:
    table = Table(
        title=f"{doc['study_id']}: predicted 95% intervals ({doc['estimator']}, "
        f"{doc['aggregator']}; B = {doc['bound']:g})"
    )
    for col in ("site", "N", "epsilon", "delta", "split", "95% ±", "rmse", "note"):
        left = col in ("site", "split", "note")
        table.add_column(col, justify="left" if left else "right", overflow="fold")
    from dpate_core.inference import INFORMATION_RULES, uninformative_rules

    def flag(rules: tuple[str, ...]) -> str:
        if any(r in INFORMATION_RULES for r in rules):
            return "uninformative"
        return "mostly noise" if rules else ""

    b = doc["bound"]
    lines = []
    for s in doc["sites"]:
        half = s["half_width"]
        rules = uninformative_rules(-half, half, b, s["noise_variance"], s["sampling_variance"])
        table.add_row(
            s["site_id"],
            str(s["n"]),
            s["epsilon"],
            s["delta"],
            " ".join(s["split"]),
            f"{s['half_width']:.4g}",
            f"{s['rmse']:.4g}",
            flag(rules),
        )
        lines.append(
            f"{s['site_id']}: 95% ± {s['half_width']:.4g}, rmse {s['rmse']:.4g}"
            + (f" ({flag(rules)})" if rules else "")
            + f"; N {s['n']}, epsilon {s['epsilon']}, delta {s['delta']}, split "
            + " ".join(s["split"])
        )
    c = doc["combined"]
    combined_flag = flag(uninformative_rules(-c["half_width"], c["half_width"], b))
    table.add_row(
        "[bold]all[/bold]",
        "",
        "",
        "",
        f"uses {', '.join(c['used'])}" if c["used"] else "no site resolves",
        f"{c['half_width']:.4g}",
        "",
        combined_flag,
    )
    lines.append(
        f"all: 95% ± {c['half_width']:.4g}"
        + (f" ({combined_flag})" if combined_flag else "")
        + "; "
        + (f"uses {', '.join(c['used'])}" if c["used"] else "no site resolves")
    )
    print_table(table, lines, on=out)
    out.print(f"estimand (one for the whole study): {escape(doc['estimand'])}")
    if doc["epsilon_needed"]:
        need = ", ".join(f"{k} {float(Fraction(v)):g}" for k, v in doc["epsilon_needed"].items())
        out.print(f"epsilon per site for a width of {doc['target_width']:g}: {escape(need)}")
    rec = doc["recommendation"]
    if rec:
        out.print(
            f"recommended: {rec['estimator']} with split ({', '.join(rec['split'])}): predicted "
            f"combined width {rec['combined_width']:.4g} ({escape(rec['reason'])})"
        )
    for caution in doc["cautions"]:
        out.print(f"[yellow]caution:[/yellow] {escape(caution)}")
    for note in doc["notes"]:
        out.print(f"note: {escape(note)}")
    out.print("assumptions: " + escape("; ".join(doc["assumptions"])))
    for w in doc["warnings"]:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")
