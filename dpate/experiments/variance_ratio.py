"""The matching estimators' reported sampling variance against the truth (docs/explanation/results.md,
"Stratified variance"; ``variance_ratio.csv`` and ``.md``)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dpate.experiments.settings import ExperimentSettings, generator, seed_key
from dpate.experiments.tables import markdown_table
from dpate_core.mechanisms.matching import plan_matching
from dpate_core.release import draw_many
from dpate_core.statistics import cell_statistics, matching_statistics

__all__ = ["variance_markdown", "variance_ratio_study"]


def variance_ratio_study(
    settings: ExperimentSettings,
    sizes: Sequence[int] = (10_000, 100_000, 1_000_000),
    imbalances: Sequence[float] = (0.02, -0.48, -0.83),
    reps: int = 4000,
) -> list[dict[str, Any]]:
    """Reported over true sampling variance of SmoothDPMatching's release on Synth (``|X|`` of
    the settings, eps = 1, the even split), for ``variance = "appendix"`` and ``"stratified"``.

    True: ``Var(tau_hat | W, X)`` of Algorithm 1 (:func:`dpate_core.mechanisms.matching.
    conditional_variance` with Synth's within-cell variance ``0.1^2 / 12``; ``b`` fixed at 0.2,
    so each stratum's outcome is a constant plus the uniform error). Reported: the release's
    ``sampling_variance_dp`` (before clamping, ``raw``) and clamped at 0 (what ``variance``
    adds to the noise variance), averaged over ``reps`` draws of the plan (``draw_many`` and
    ``assemble``, seeded); ``rmse`` is the root mean squared error over the truth.
    """
    from dpate_core.mechanisms.matching import conditional_variance, stratified_variance
    from dpate_core.synth import synth

    sigma2 = 0.1**2 / 12.0
    domain = settings.synth_domain
    rows = []
    for n in sizes:
        for a in imbalances:
            d = synth(n, domain, a=a, b=0.2, seed=seed_key(settings.seed, "variance-ratio", n, a))
            stats = matching_statistics(d.w, d.y, d.x, domain, bound=1.0)
            cells = cell_statistics(d.w, d.y, d.x, domain_size=domain, bound=1.0)
            true = conditional_variance(stats.treated_counts, stats.control_counts, sigma2, sigma2)
            nonprivate = {
                "appendix": stats.variance,
                "stratified": stratified_variance(d.w, d.y, d.x, domain),
            }
            for mode in ("appendix", "stratified"):
                plan = plan_matching(
                    "smooth_matching",
                    stats,
                    bound=1.0,
                    epsilon=Fraction(1),
                    delta=settings.delta,
                    domain_size=domain,
                    variance=mode,
                    cells=cells,
                )
                rng = generator(settings, "variance-ratio", n, a, mode)
                raw = plan.assemble(draw_many(plan, rng, reps)).diagnostics["sampling_variance_dp"]
                rows.append(
                    {
                        "N": n,
                        "domain": domain,
                        "a": a,
                        "variance": mode,
                        "true_variance": true,
                        "nonprivate_ratio": nonprivate[mode] / true,
                        "raw_ratio": float(np.mean(raw)) / true,
                        "clamped_ratio": float(np.mean(np.maximum(raw, 0.0))) / true,
                        "rmse_ratio": float(np.sqrt(np.mean((raw - true) ** 2))) / true,
                        "reps": reps,
                    }
                )
    return rows


def variance_markdown(rows: list[dict[str, Any]]) -> str:
    """``variance_ratio.md``: one line per (N, a, variance mode) of :func:`variance_ratio_study`."""
    columns = ("N", "a", "variance", "non-private / true", "mean raw / true",
               "mean clamped / true", "RMSE / true")  # fmt: skip
    body = [(r["N"], r["a"], r["variance"], f"{r['nonprivate_ratio']:.3g}", f"{r['raw_ratio']:.3g}",
             f"{r['clamped_ratio']:.3g}", f"{r['rmse_ratio']:.3g}") for r in rows]  # fmt: skip
    return "\n".join(markdown_table(columns, body)) + "\n"
