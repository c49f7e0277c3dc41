"""Fixed effects' interval where its public design predicts that few releases resolve: Fieller's
length against the delta method's (docs/explanation/adjusted.md, "The denominator's noise").
Prints figures; asserts nothing.

The designs of ``bench_adjusted_refusal.py`` (Synth's 1,000 and 3,333 records over 100 evenly
filled strata across budgets; IHDP and Lalonde split 2 and 3 ways on their coarse and rich
strata and Synth with 384 strata at eps 1), fixed effects, fixed data and seeded releases (numpy
noise, simulations only). Per site: the share predicted from the public design alone
(``design_resolution``: the release's switch, Fieller's length below ``FIELLER_BELOW``), the
realised share of releases that resolve, and for the resolved releases the coverage and mean
width of the 95% interval (clipped to ``[-B, B]``) of the site's own fixed-effects estimand,
with the release as shipped (``switch``) and with the delta method everywhere (``delta``). Then
per study the inverse-variance combination of the resolved sites (coverage of the studies' own
pooled estimand: the sites' estimands averaged by their true denominators; mean width; share
of repetitions with an answer).

Run: ``python bench/bench_adjusted_fieller.py [RELEASES]`` (2,000 by default: about a minute;
the realistic rows need ``DPATE_DATA_DIR``). ``python bench/bench_adjusted_fieller.py RELEASES
--variants``: where the design's share is at least ``FIELLER_BELOW`` (the delta method's band),
the same draws with the delta method's variance corrected for its plug-in excess and with
milder stretches than Fieller's (:data:`VARIANTS`; adjusted.md, "Milder stretches between a half
and 0.9, and a narrower delta method"), coverage and width of each. ``python
bench/bench_adjusted_fieller.py RELEASES --plug-in``: where the share is at least
``PLUG_IN_CORRECTED_FROM``, the release as shipped against the same release without its plug-in
correction (adjusted.md, "The plug-in excess").
"""

from __future__ import annotations

import sys
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

import numpy as np
from bench_adjusted_realistic import designs, estimand
from bench_adjusted_refusal import fixed_effects_draws

from dpate.experiments.settings import Z95
from dpate_core.mechanisms.adjusted import _weightings, plan_constants
from dpate_core.mechanisms.adjusted._weightings import design_resolution
from dpate_core.synth import synth

#: factors tried on the delta method's variance where the design's share is at least FIELLER_BELOW
#: (its plug-in excess divided out, and stretches towards Fieller's), as functions of Fieller's
#: ``g``, ``rho`` and factor
VARIANTS = {
    "delta": lambda g, rho, full: np.ones_like(full),
    # V(t) read at tau_hat exceeds V(tau) by V_D Var(tau_hat) = V(tau) V_D / D_hat^2 on average
    "delta, plug-in corrected": lambda g, rho, full: 1.0 / (1.0 + g / _weightings.INTERVAL_Z**2),
    "(1-g rho)/(1-g)": lambda g, rho, full: (1.0 - g * rho) / (1.0 - g),
    "root of Fieller's": lambda g, rho, full: np.sqrt(full),
    "Fieller's": lambda g, rho, full: full,
}


@contextmanager
def stretch_everywhere(variant: str) -> Any:
    """The release with its switch on at every design and Fieller's factor replaced by
    ``VARIANTS[variant]`` (unbounded Fieller sets stay unresolved); the bench applies it only
    where the design's share is at least ``FIELLER_BELOW`` (:func:`variants_line`)."""
    saved_below, saved_factor = _weightings.FIELLER_BELOW, _weightings.fieller_factor

    def factor(v_r, v_up, v_down, step, d):
        full = saved_factor(v_r, v_up, v_down, step, d)
        g, rho = _weightings.fieller_terms(v_r, v_up, v_down, step, d)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = VARIANTS[variant](g, rho, full)
        return np.where(np.isfinite(full), out, np.inf)

    _weightings.FIELLER_BELOW, _weightings.fieller_factor = 2.0, factor
    try:
        yield
    finally:
        _weightings.FIELLER_BELOW, _weightings.fieller_factor = saved_below, saved_factor


@contextmanager
def patched(name: str, value: float) -> Any:
    """The release with the switch constant ``name`` of ``_weightings`` set to ``value``."""
    saved = getattr(_weightings, name)
    setattr(_weightings, name, value)
    try:
        yield
    finally:
        setattr(_weightings, name, saved)


#: the release with its switch off: the delta method's variance at every design
delta_method = partial(patched, "FIELLER_BELOW", 0.0)
#: the release without its plug-in correction (the noise part as read at ``tau_hat``)
plug_in_kept = partial(patched, "PLUG_IN_CORRECTED_FROM", 2.0)


def site_draws(w, y, x, size: int, bound: float, eps: str, reps: int, seed: int) -> dict:
    """The site's releases with and without the switch (the same noise), its estimand and its
    true denominator ``D``."""
    plan, noisy = fixed_effects_draws(w, y, x, size, bound, eps, reps, seed)
    shipped = plan.assemble(noisy)
    with delta_method():
        delta = plan.assemble(noisy)
    c = plan_constants(plan)  # the public constants (functools.partial)
    share = design_resolution(c.n, c.n_strata, c.v_n)
    cnt = np.bincount(2 * x.astype(np.int64) + w.astype(np.int64), minlength=2 * size)
    big_d = float(np.sum(cnt[0::2].astype(float) * cnt[1::2]))
    return {
        "shipped": shipped,
        "delta": delta,
        "target": estimand(w, y, x, size, "fixed_effects"),
        "d": big_d,
        "share": share,
        "bound": bound,
    }


def _cover(out, target: float, bound: float) -> tuple[float, float]:
    ok = np.isfinite(out.tau)
    if not ok.any():
        return float("nan"), float("nan")
    half = np.minimum(Z95 * np.sqrt(out.variance[ok]), bound)
    return float(np.mean(np.abs(out.tau[ok] - target) <= half)), float(np.mean(2 * half))


def site_line(name: str, r: dict) -> None:
    ok = np.isfinite(r["shipped"].tau)
    cs, ws = _cover(r["shipped"], r["target"], r["bound"])
    cd, wd = _cover(r["delta"], r["target"], r["bound"])
    print(f"{name:28s} {r['share']:6.2f} {ok.mean():8.3f}   {cs:6.3f} {ws:6.3f}   "
          f"{cd:6.3f} {wd:6.3f}", flush=True)  # fmt: skip


def _pooled(sites: list[dict]) -> tuple[float, float, float]:
    """The inverse-variance combination of the sites' resolved releases (``out``): coverage of
    the pooled estimand (the sites' estimands averaged by their true denominators), mean width,
    share of repetitions with an answer."""
    target = sum(r["d"] * r["target"] for r in sites) / sum(r["d"] for r in sites)
    tau = np.stack([r["out"].tau for r in sites])
    var = np.stack([r["out"].variance for r in sites])
    ok = np.isfinite(tau)
    wts = np.where(ok, 1.0 / np.where(ok, var, 1.0), 0.0)
    any_ok = ok.any(axis=0)
    tot = np.where(any_ok, wts.sum(axis=0), 1.0)
    est = (np.where(ok, tau, 0.0) * wts).sum(axis=0) / tot
    half = np.minimum(Z95 / np.sqrt(tot), sites[0]["bound"])
    cover = float(np.mean(np.abs(est - target)[any_ok] <= half[any_ok]))
    return cover, float(np.mean(2 * half[any_ok])), float(any_ok.mean())


def pooled_line(name: str, sites: list[dict]) -> None:
    cells = []
    for key in ("shipped", "delta"):
        cover, width, answered = _pooled([{**r, "out": r[key]} for r in sites])
        cells.append(f"{cover:6.3f} {width:6.3f} {answered:5.2f}")
    print(f"{name + ' (inverse variance)':36s}          {cells[0]}   {cells[1]}", flush=True)


def compared_line(
    name: str,
    w,
    y,
    x,
    size: int,
    bound: float,
    eps: str,
    reps: int,
    seed: int,
    lowest_share: float,
    contexts: dict[str, Any],
) -> dict | None:
    """One site whose design share is at least ``lowest_share``: its releases under each of
    ``contexts`` (a name and a context manager to release under), on the same draws, their
    coverage and width printed; the releases (with the target and ``D``) for a pooled line, None
    below that share."""
    plan, noisy = fixed_effects_draws(w, y, x, size, bound, eps, reps, seed)
    c = plan_constants(plan)
    share = design_resolution(c.n, c.n_strata, c.v_n)
    if share < lowest_share:
        return None
    outs = {}
    for key, context in contexts.items():
        with context():
            outs[key] = plan.assemble(noisy)
    target = estimand(w, y, x, size, "fixed_effects")
    cells = ["{:6.3f} {:6.3f}".format(*_cover(outs[k], target, bound)) for k in outs]
    first = next(iter(outs.values()))
    print(f"{name:28s} {share:5.2f} {np.isfinite(first.tau).mean():5.2f}   "
          + "   ".join(cells), flush=True)  # fmt: skip
    cnt = np.bincount(2 * x.astype(np.int64) + w.astype(np.int64), minlength=2 * size)
    big_d = float(np.sum(cnt[0::2].astype(float) * cnt[1::2]))
    return {"outs": outs, "target": target, "d": big_d, "bound": bound}


def compare(reps: int, synth_grid, lowest_share: float, contexts: dict[str, Any]) -> None:
    """:func:`compared_line` on Synth's 1,000 and 3,333 records over 100 strata at the budgets of
    ``synth_grid`` and on the realistic designs at eps 1, with the inverse-variance combination
    of each realistic study whose every site is at least ``lowest_share``."""
    print("design                       share resolved   " + "   ".join(contexts)
          + " (cover width each)")  # fmt: skip
    for n, eps_grid in synth_grid:
        d = synth(n, 100, a=0.0, b=0.2, seed=7)
        for eps in eps_grid:
            compared_line(f"Synth {n} / 100, eps {eps}", d.w.astype(np.int64), d.y, d.x, 100,
                          1.0, eps, reps, 4, lowest_share, contexts)  # fmt: skip
    for d in designs():
        sites = [compared_line(f"{d.name}: {j + 1}", w, y, x, d.domain_size, d.bound, "1", reps,
                               3 + j, lowest_share, contexts)
                 for j, (w, y, x) in enumerate(d.sites)]  # fmt: skip
        if all(r is not None for r in sites):
            cells = []
            for key in contexts:
                cover, width, _ = _pooled([{**r, "out": r["outs"][key]} for r in sites])
                cells.append(f"{cover:6.3f} {width:6.3f}")
            print(f"{d.name + ' (inverse variance)':48s} " + "   ".join(cells), flush=True)


def main_variants(reps: int = 1000) -> None:
    """Every stretch of :data:`VARIANTS` where the delta method is kept (share at least
    ``FIELLER_BELOW``)."""
    contexts = {v: partial(stretch_everywhere, v) for v in VARIANTS}
    grid = ((1000, ("9/10",)), (3333, ("13/50", "3/10")))
    compare(reps, grid, _weightings.FIELLER_BELOW, contexts)


def main_plug_in(reps: int = 2000) -> None:
    """The release as shipped and without its plug-in correction, where the share is at least
    ``PLUG_IN_CORRECTED_FROM``."""
    grid = ((1000, ("6/5", "3/2", "2")), (3333, ("7/20", "2/5", "1/2", "1")))
    compare(reps, grid, _weightings.PLUG_IN_CORRECTED_FROM,
            {"shipped": nullcontext, "without the division": plug_in_kept})  # fmt: skip


def main(reps: int = 2000) -> None:
    print(
        "design                       design  resolved   switch: cover width   delta: cover width"
    )
    for n, eps_grid in ((1000, ("1/4", "9/20", "7/10", "9/10")),
                        (3333, ("9/50", "11/50", "13/50", "3/10", "7/20", "1/2"))):  # fmt: skip
        d = synth(n, 100, a=0.0, b=0.2, seed=7)
        for eps in eps_grid:
            r = site_draws(d.w.astype(np.int64), d.y, d.x, 100, 1.0, eps, reps, 4)
            site_line(f"Synth {n} / 100, eps {eps}", r)
    for d in designs():
        sites = []
        for j, (w, y, x) in enumerate(d.sites):
            r = site_draws(w, y, x, d.domain_size, d.bound, "1", reps, 3 + j)
            site_line(f"{d.name}: {j + 1}", r)
            sites.append(r)
        pooled_line(d.name, sites)


if __name__ == "__main__":
    if "--variants" in sys.argv:
        main_variants(*(int(a) for a in sys.argv[1:2] if a.isdigit()))
    elif "--plug-in" in sys.argv:
        main_plug_in(*(int(a) for a in sys.argv[1:2] if a.isdigit()))
    else:
        main(*(int(a) for a in sys.argv[1:2]))
