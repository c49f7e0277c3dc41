"""The PNG figures (matplotlib, Agg), laid out like the paper's Figures 3 to 11: MAE against alpha
per combiner for every panel, and the smooth-sensitivity curves."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpate.experiments.settings import (
    AGGREGATOR_LABELS,
    COMPARED_AGGREGATORS,
    ESTIMATOR_LABELS,
    THREE_SITE_PROPORTIONS,
    frac,
)
from dpate_core.aggregation import aggregator_of

__all__ = ["make_figures"]

_STYLE = {a: aggregator_of(a).style for a in COMPARED_AGGREGATORS}
Rows = Sequence[dict[str, Any]]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _series(rows: Rows) -> dict[str, list[tuple[Fraction, float, float]]]:
    """Per combiner, its ``(alpha, mae_mean, mae_std)`` points sorted by alpha."""
    series = {}
    for agg in COMPARED_AGGREGATORS:
        pts = sorted(
            (Fraction(r["alpha"]), r["mae_mean"], r["mae_std"])
            for r in rows
            if r["aggregator"] == agg
        )
        if pts:
            series[agg] = pts
    return series


def _draw_series(
    ax: Any, i: int, agg: str, pts: Sequence[tuple[Fraction, float, float]], top: float
) -> None:
    """One combiner's line, shifted sideways by its index ``i``; points above ``top`` are drawn
    at the top edge without their bar, with their value written there."""
    x = np.log2([float(p[0]) for p in pts]) + (i - 2) * 0.06
    mean = np.array([p[1] for p in pts])
    std = np.array([p[2] for p in pts])
    st = _STYLE[agg]
    shown = np.minimum(mean, top)
    ax.errorbar(
        x,
        shown,
        yerr=np.where(mean > top, 0.0, std),
        label=AGGREGATOR_LABELS[agg],
        color=st["color"],
        marker=st["marker"],
        ls=st["ls"],
        ms=4,
        lw=1.2,
        capsize=2,
        elinewidth=0.8,
    )
    for xi, mi in zip(x, mean, strict=True):
        if mi > top:
            ax.annotate(
                f"{mi:.2g}",
                (xi, top),
                xytext=(0, -9 - 8 * (i % 2)),
                textcoords="offset points",
                ha="center",
                fontsize=6,
                color=st["color"],
            )


def _panel(ax: Any, rows: Rows, title: str, *, legend: bool = False) -> None:
    """MAE mean with +-1 std bars against alpha, one line per combiner, linear y from 0 like the
    paper. Where a combiner's error dwarfs MVAgg's (AggAll at small alpha) the axis is cut at
    4x MVAgg's largest mean + std and the cut points are written at the top edge."""
    alphas = sorted({Fraction(r["alpha"]) for r in rows})
    series = _series(rows)
    if not series:
        return
    tops = [m + s for pts in series.values() for _, m, s in pts]
    top = max(tops)
    if "mvagg" in series:
        top = min(top, 4.0 * max(m + s for _, m, s in series["mvagg"]))
    top *= 1.05
    for i, (agg, pts) in enumerate(series.items()):
        _draw_series(ax, i, agg, pts, top)
    ax.set_ylim(0, top)
    ax.set_xticks(np.log2([float(a) for a in alphas]))
    ax.set_xticklabels([frac(a) for a in alphas])
    ax.set_xlabel(r"$\alpha = \epsilon_J / \epsilon_1$")
    ax.set_ylabel("MAE")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, lw=0.4)
    if legend:
        ax.legend(fontsize=7)


def _select(rows: Rows, **f: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r[k] == v for k, v in f.items())]


def _save(fig: Any, out: Path, name: str) -> Path:
    path = out / name
    # fixed margins: tight_layout measured every text box and took half of the drawing time
    rows, cols = fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
    fig.subplots_adjust(
        left=0.08 / cols + 0.03,
        right=0.99,
        bottom=0.14 if rows == 1 else 0.08,
        top=0.92 if rows == 1 else 0.95,
        wspace=0.28,
        hspace=0.38,
    )
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _randomized_figures(rows: Rows, out: Path) -> list[Path]:
    """The paper's Figures 3 and 4 (IST two sites, STAR four sites) and 5 (IST three sites); rows:
    the paper's estimator, then the adjusted one beside it (when the run has it)."""
    plt = _plt()
    paths = []
    rct = [e for e in ("dim", "adjusted") if _select(rows, dataset="IST", estimator=e)] or ["dim"]
    fig, axes = plt.subplots(len(rct), 2, figsize=(10, 3.6 * len(rct)), squeeze=False)
    for r, est in enumerate(rct):
        name = ESTIMATOR_LABELS[est]
        _panel(
            axes[r, 0],
            _select(rows, dataset="IST", J=2, estimator=est),
            f"IST, J = 2 (equal random split), {name}",
            legend=r == 0,
        )
        _panel(
            axes[r, 1],
            _select(rows, dataset="STAR", estimator=est),
            f"STAR, J = 4 (urbanicity), {name}",
        )
    paths.append(_save(fig, out, "fig3_4_ist_two_sites_star.png"))
    fig = _three_site_figure(rows, "IST", rct, 3.6, "IST, J = 3, ", (0, 0))
    paths.append(_save(fig, out, "fig5_ist_three_sites.png"))
    return paths


def _three_site_figure(
    rows: Rows,
    dataset: str,
    estimators: Sequence[str],
    height: float,
    title: str,
    legend_at: tuple[int, int],
) -> Any:
    """One row of panels per estimator, one column per three-site split of ``dataset`` (panel
    titles ``title + "<split>, <estimator>"``; the legend in panel ``legend_at``)."""
    fig, axes = _plt().subplots(
        len(estimators), 4, figsize=(16, height * len(estimators)), squeeze=False
    )
    for r, est in enumerate(estimators):
        for c, prop in enumerate(THREE_SITE_PROPORTIONS):
            label = ":".join(map(str, prop))
            _panel(
                axes[r, c],
                _select(rows, dataset=dataset, J=3, proportions=label, estimator=est),
                f"{title}{label}, {ESTIMATOR_LABELS[est]}",
                legend=(r, c) == legend_at,
            )
    return fig


def _observational_figures(rows: Rows, out: Path) -> list[Path]:
    """Two sites (rows Global / Smooth (/ adjusted / propensity), columns Synth / IHDP / Lalonde) and three
    sites, one figure per data set (the paper's Figures 9-11)."""
    plt = _plt()
    paths = []
    obs = ("Synth", "IHDP", "Lalonde")
    obs_est = [
        e
        for e in ("global_matching", "smooth_matching", "adjusted", "propensity")
        if _select(rows, dataset="Synth", estimator=e)
    ] or ["global_matching", "smooth_matching"]
    fig, axes = plt.subplots(len(obs_est), 3, figsize=(13, 3.3 * len(obs_est)), squeeze=False)
    for r, est in enumerate(obs_est):
        for c, ds in enumerate(obs):
            _panel(
                axes[r, c],
                _select(rows, dataset=ds, J=2, estimator=est),
                f"{ds}, J = 2, {ESTIMATOR_LABELS[est]}",
                legend=(r, c) == (1, 0),
            )
    paths.append(_save(fig, out, "fig8_obs_two_sites.png"))
    for num, ds in zip((9, 10, 11), obs, strict=True):
        fig = _three_site_figure(rows, ds, obs_est, 3.3, f"{ds}, ", (1, 0))
        paths.append(_save(fig, out, f"fig{num}_{ds.lower()}_three_sites.png"))
    return paths


def make_figures(rows: Rows, sens: Rows, out: Path) -> list[Path]:
    """The paper's figures 3 to 11 (ours: PNG files under ``out``)."""
    paths = _randomized_figures(rows, out)
    # smooth sensitivity (paper Figures 6 and 7)
    if sens:
        paths.append(_sensitivity_figure(sens, out))
    return paths + _observational_figures(rows, out)


_SENSITIVITY_SERIES = (
    ("smooth_sensitivity", "smooth sensitivity (ours, correction 1)", "-", "o"),
    ("paper_literal", "paper's formula (not DP; comparison only)", "--", "x"),
    ("local_bound", "Theorem 1 local bound", ":", "."),
)


def _sensitivity_by_n(ax: Any, sens: Rows) -> None:
    """Left panel: smooth sensitivity against N (a = 0 and a ~ U[-1, 1]), with c / N."""
    for a, colour in ((0.0, "#d62728"), ("U[-1,1]", "#1f77b4")):
        pts = [r for r in sens if r["sweep"] == "N" and r["a"] == a]
        ns = np.array(sorted({r["N"] for r in pts}))
        for key, label, ls, mk in _SENSITIVITY_SERIES[:2]:
            y = [np.mean([r[key] for r in pts if r["N"] == n]) for n in ns]
            ax.plot(ns, y, ls=ls, marker=mk, color=colour, label=f"{label}, a = {a}", ms=4)
    ns = np.array(sorted({r["N"] for r in sens if r["sweep"] == "N"}))
    if ns.size:
        # the 1/N reference through the largest N: where the bound settles on it
        last = np.mean(
            [
                r["smooth_sensitivity"]
                for r in sens
                if r["sweep"] == "N" and r["a"] == 0.0 and r["N"] == ns[-1]
            ]
        )
        ax.plot(ns, last * ns[-1] / ns, color="grey", lw=0.8, ls="-.", label="c / N")
    ax.axhline(2.0, color="k", lw=1, label="global sensitivity 2B (ours)")
    ax.axhline(1.0, color="k", lw=1, ls="--", label="global sensitivity B (paper)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N")
    ax.set_ylabel(r"$\beta$-smooth sensitivity")
    ax.set_title(r"Synth, $|\mathcal{X}| = 100$, $\epsilon = 1$, $\delta = 10^{-5}$", fontsize=9)
    ax.legend(fontsize=6, loc="upper right", bbox_to_anchor=(1.0, 0.88))
    ax.grid(alpha=0.3, which="both", lw=0.4)


def _sensitivity_by_imbalance(ax: Any, sens: Rows) -> None:
    """Right panel: smooth sensitivity, the paper's formula and Theorem 1 against a."""
    pts = [r for r in sens if r["sweep"] == "a"]
    a_vals = sorted({float(r["a"]) for r in pts})
    for key, label, ls, mk in _SENSITIVITY_SERIES:
        y = [np.mean([r[key] for r in pts if float(r["a"]) == a]) for a in a_vals]
        ax.plot(a_vals, y, ls=ls, marker=mk, label=label, ms=4)
    ax.axhline(2.0, color="k", lw=1, label="global sensitivity 2B (ours)")
    ax.axhline(1.0, color="k", lw=1, ls="--", label="global sensitivity B (paper)")
    ax.set_yscale("log")
    ax.set_xlabel("imbalance a")
    ax.set_ylabel(r"$\beta$-smooth sensitivity")
    ax.set_title(r"Synth, N = 10,000, $|\mathcal{X}| = 100$", fontsize=9)
    ax.legend(fontsize=6, loc="lower right")
    ax.grid(alpha=0.3, which="both", lw=0.4)


def _sensitivity_figure(sens: Rows, out: Path) -> Path:
    fig, axes = _plt().subplots(1, 2, figsize=(11, 4))
    _sensitivity_by_n(axes[0], sens)
    _sensitivity_by_imbalance(axes[1], sens)
    return _save(fig, out, "fig6_7_smooth_sensitivity.png")
