"""The whole run, ``dpate experiments``: every panel of section 4, the smooth-sensitivity curves,
the coverage and variance-ratio studies, the claims and the figures, written under ``out``.

Outputs: ``experiments.csv`` / ``.parquet`` (one row per point:
:data:`dpate.experiments.sweep.TABLE_COLUMNS`), ``sensitivity.csv`` (the smooth-sensitivity
curves), ``coverage.csv`` / ``.md``, ``variance_ratio.csv`` / ``.md``, ``claims.md`` (each claim
of the paper checked with numbers), ``timings.json`` and the PNG figures laid out like the paper's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from dpate.experiments.adjusted_claims import adjusted_claims
from dpate.experiments.claim import claims_markdown
from dpate.experiments.comparison import combiner_comparison
from dpate.experiments.coverage import COVERAGE_COLUMNS, coverage_markdown, coverage_study
from dpate.experiments.data import DataSource, Split, build_splits, default_source
from dpate.experiments.figures import make_figures
from dpate.experiments.paper_claims import evaluate_claims
from dpate.experiments.sensitivity import sensitivity_curves
from dpate.experiments.settings import PAPER_ESTIMATORS, ExperimentSettings, frac
from dpate.experiments.sweep import TABLE_COLUMNS, run_split
from dpate.experiments.tables import write_csv, write_csv_columns, write_table
from dpate.experiments.variance_ratio import variance_markdown, variance_ratio_study

__all__ = ["run_experiments"]


def _panels(
    settings: ExperimentSettings, splits: dict[str, list[list[Split]]], timings: dict[str, float]
) -> list[dict[str, Any]]:
    """Every (data set, estimator) of section 4 at its budget: the randomized trials with the
    difference in means and the adjusted estimator, the observational sets with both matchings,
    the adjusted estimator and the propensity estimator."""
    rows: list[dict[str, Any]] = []
    plan = [(ds, est, settings.eps_rct) for ds in ("IST", "STAR") for est in ("dim", "adjusted")]
    for ds, eps in (
        ("Synth", settings.eps_synth),
        ("IHDP", settings.eps_small_obs),
        ("Lalonde", settings.eps_small_obs),
    ):
        plan += [
            (ds, est, eps)
            for est in ("smooth_matching", "global_matching", "adjusted", "propensity")
        ]
    for ds, estimator, eps in plan:
        t = time.perf_counter()
        for group in splits[ds]:
            rows += run_split(group, estimator, eps, settings)
        timings[f"{ds}_{estimator}_s"] = time.perf_counter() - t
    return rows


def _coverage(
    settings: ExperimentSettings, source: DataSource, out: Path, timings: dict[str, float]
) -> list[dict[str, Any]]:
    """The coverage study and the variance-ratio study, written under ``out``."""
    t = time.perf_counter()
    coverage = coverage_study(settings, source)
    write_csv_columns(coverage, out / "coverage.csv", COVERAGE_COLUMNS)
    (out / "coverage.md").write_text(coverage_markdown(coverage))
    timings["coverage_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ratios = variance_ratio_study(settings, reps=settings.coverage_sizes()[0])
    write_csv(ratios, out / "variance_ratio.csv")
    (out / "variance_ratio.md").write_text(variance_markdown(ratios))
    timings["variance_ratio_s"] = time.perf_counter() - t
    return coverage


def _meta(settings: ExperimentSettings, timings: dict[str, float], points: int) -> dict[str, Any]:
    """``timings.json``: the settings that fix the numbers, the stage timings, the point count."""
    return {
        "settings": {
            "reps": settings.reps,
            "splits": settings.splits,
            "seed": settings.seed,
            "alphas": [frac(a) for a in settings.alphas],
            "delta": frac(settings.delta),
            "simulation_noise": "numpy.random.Generator (seeded; not private)",
        },
        "timings": timings,
        "points": points,
    }


def run_experiments(
    settings: ExperimentSettings, out: Path, source: DataSource | None = None
) -> dict[str, Any]:
    """Run every experiment, write the table, claims, timings and figures under ``out``."""
    source = source or default_source()
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    splits = build_splits(settings, source)
    timings["load_and_split_s"] = time.perf_counter() - t0
    rows = _panels(settings, splits, timings)
    t = time.perf_counter()
    sens = sensitivity_curves(settings, source.synth)
    timings["sensitivity_s"] = time.perf_counter() - t
    coverage = _coverage(settings, source, out, timings) if settings.coverage else []

    paper_rows = [r for r in rows if r["estimator"] in PAPER_ESTIMATORS]
    claims = evaluate_claims(paper_rows, sens) + adjusted_claims(rows)
    write_table(rows, out / "experiments", TABLE_COLUMNS)
    write_csv(sens, out / "sensitivity.csv")
    comparison = combiner_comparison(paper_rows)
    (out / "claims.md").write_text(claims_markdown(claims, comparison))
    figures: list[Path] = []
    if settings.figures:
        t = time.perf_counter()
        figures = make_figures(rows, sens, out)
        timings["figures_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t0
    (out / "timings.json").write_text(
        json.dumps(_meta(settings, timings, len(rows)), indent=2) + "\n"
    )
    return {
        "rows": rows,
        "sens": sens,
        "claims": claims,
        "comparison": comparison,
        "timings": timings,
        "figures": figures,
        "coverage": coverage,
    }
