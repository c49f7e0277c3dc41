"""Fixed effects' sampling variance against repeated sampling: the released sandwich (noise-free),
the delete-one jackknife and the bootstrap, each over the variance of the estimate across fresh
samples (docs/explanation/adjusted.md, "The sampling part against repeated sampling"). Prints
figures; asserts nothing.

- Synth with five covariates (:func:`dpate_core.synth.synth_strata`, 384 strata, most of them a
  handful of patients): 4,000 independent samples per size; the truth is the variance of the
  fixed-effects estimate across them.
- IHDP and Lalonde on their loaders' strata and the "rich" ones (``bench_adjusted_realistic``):
  the whole cohort is the population, a site a third or a half of it drawn without replacement
  (2,000 subsamples); the truth is the variance across subsamples with the finite-population
  factor ``1 - n / N`` divided out (what a sample from an unbounded population would show).

"sandwich": the mean over the samples of the release's own sampling variance
(``sampling_variance_dp``, fixed effects) at a budget so large that its noise and the noise
corrections are nil, so the figure is the formula's; "jackknife": the delete-one jackknife of the
ratio (computed from the cell statistics: leaving out a treated record of stratum ``x`` moves the
estimate by ``-h_i / (D - n_c)``); "bootstrap": 200 resamples of each of 10 samples. Each over the
truth.

Run: ``python bench/bench_adjusted_sampling.py`` (about five minutes; the real rows need
``DPATE_DATA_DIR``).

``python bench/bench_adjusted_sampling.py --noise``: the other part, at a site's fixed records
(eps 1, 4,000 seeded releases, the delta method's variance everywhere): for the resolved releases,
the released noise variance times ``D_hat^2`` (the estimated numerator ``Var(A_hat - tau
D_hat)``) over its value at the true cell statistics, the realised ``((tau_hat - tau) D_hat)^2``
over the same, and the sd and coverage of the standardised error ``(tau_hat - tau) /
sqrt(variance)`` (its variance holds the sampling part, which fixed records do not show).
"""

from __future__ import annotations

import sys

import numpy as np
from bench_adjusted_realistic import estimand
from bench_adjusted_refusal import fixed_effects_draws

from dpate.data.datasets import DataUnavailableError
from dpate_core.mechanisms.adjusted import histogram_vectors, plan_constants
from dpate_core.statistics import histogram_cells
from dpate_core.synth import synth_strata

#: a budget at which the release's noise, and its corrections for noise, are nil
NOISELESS = "1000000"


def released_sampling(w, y, x, size: int, bound: float = 1.0) -> float:
    """The fixed-effects release's sampling variance (unclamped) at a noiseless budget."""
    plan, noisy = fixed_effects_draws(w, y, x, size, bound, NOISELESS, 1, 0)
    return float(plan.assemble(noisy).diagnostics["sampling_variance_dp"][0])


def jackknife(w, y, x, size: int) -> float:
    """The delete-one jackknife variance of ``A / D`` from the cell statistics, its deviations
    taken from the whole sample's estimate (leaving out record ``i`` moves it by exactly ``-h_i /
    (D - n_other)``, ``h_i`` the record's influence in the release's sandwich)."""
    g = 2 * x.astype(np.int64) + w.astype(np.int64)
    n = np.bincount(g, minlength=2 * size).astype(float)
    s = np.bincount(g, weights=y, minlength=2 * size)
    q = np.bincount(g, weights=y * y, minlength=2 * size)
    n_c, n_t, s_c, s_t, q_c, q_t = n[0::2], n[1::2], s[0::2], s[1::2], q[0::2], q[1::2]
    big_d = np.sum(n_t * n_c)
    tau = np.sum(s_t * n_c - s_c * n_t) / big_d
    # sum over a cell's records of the squared influence h_i (as in the release's sandwich)
    treated = n_c**2 * q_t - 2 * n_c * s_t * (s_c + tau * n_c) + n_t * (s_c + tau * n_c) ** 2
    control = n_t**2 * q_c - 2 * n_t * s_c * (s_t - tau * n_t) + n_c * (s_t - tau * n_t) ** 2
    spread = (
        treated / np.maximum(big_d - n_c, 1.0) ** 2 + control / np.maximum(big_d - n_t, 1.0) ** 2
    )
    return float(np.sum(spread) * (w.size - 1) / w.size)


def bootstrap(w, y, x, size: int, rng, reps: int = 200) -> float:
    n = w.size
    return float(
        np.var([estimand(w[i], y[i], x[i], size, "fixed_effects")
                for i in (rng.integers(0, n, n) for _ in range(reps))])
    )  # fmt: skip


def synth_rows(samples: int = 4000) -> None:
    print("Synth, 5 covariates (384 strata): fresh samples")
    for n in (300, 600, 1000, 3000, 6000):
        taus, sand, jack = [], [], []
        for seed in range(samples):
            s = synth_strata(n, seed=5000 + seed)
            taus.append(estimand(s.w, s.y, s.x, 384, "fixed_effects"))
            sand.append(released_sampling(s.w, s.y, s.x, 384))
            jack.append(jackknife(s.w, s.y, s.x, 384))
        boots = []
        for k in range(10):
            s = synth_strata(n, seed=5000 + k)
            boots.append(bootstrap(s.w, s.y, s.x, 384, np.random.default_rng(k)))
        truth = float(np.var(taus))
        print(f"  N {n:5d}: truth {truth:.6f}   sandwich {np.mean(sand) / truth:.2f}   "
              f"jackknife {np.mean(jack) / truth:.2f}   bootstrap {np.mean(boots) / truth:.2f}",
              flush=True)  # fmt: skip


def real_rows(samples: int = 2000) -> None:
    from bench_regression_adjustment import ihdp_data, lalonde_data, strata_ids

    from dpate.data.datasets import load_ihdp, load_lalonde

    ih, la = load_ihdp(1), load_lalonde()
    xi, ki = strata_ids(ihdp_data()[0].covs)
    xl, kl = strata_ids(lalonde_data().covs)
    sets = [
        ("IHDP, 16 strata", ih.w, ih.y, ih.x, ih.domain_size),
        ("IHDP rich, 128", ih.w, ih.y, xi, ki),
        ("Lalonde, 39 ages", la.w, la.y, la.x, la.domain_size),
        ("Lalonde rich, 192", la.w, la.y, xl, kl),
    ]
    print("IHDP and Lalonde: the cohort as the population, sites drawn without replacement")
    for name, w, y, x, size in sets:
        big_n = w.size
        for frac in (1 / 3, 1 / 2):
            n = int(big_n * frac)
            rng = np.random.default_rng(3)
            taus, sand, jack = [], [], []
            for _ in range(samples):
                i = rng.choice(big_n, n, replace=False)
                taus.append(estimand(w[i], y[i], x[i], size, "fixed_effects"))
                sand.append(released_sampling(w[i], y[i], x[i], size))
                jack.append(jackknife(w[i], y[i], x[i], size))
            boots = []
            for _ in range(10):
                i = rng.choice(big_n, n, replace=False)
                boots.append(bootstrap(w[i], y[i], x[i], size, rng))
            truth = float(np.var(taus)) / (1.0 - n / big_n)
            print(f"  {name:18s} {n:3d} of {big_n}: truth {truth:.6f}   sandwich "
                  f"{np.mean(sand) / truth:.2f}   jackknife {np.mean(jack) / truth:.2f}   "
                  f"bootstrap {np.mean(boots) / truth:.2f}", flush=True)  # fmt: skip


def noise_rows(reps: int = 4000) -> None:
    from bench_adjusted_realistic import designs

    from dpate_core.mechanisms.adjusted import _weightings

    print("The noise part of resolved releases at fixed records (eps 1, delta method)")
    saved, _weightings.FIELLER_BELOW = _weightings.FIELLER_BELOW, 0.0
    try:
        for d in designs():
            if not d.name.startswith(("IHDP,", "Lalonde,", "Synth strata, 3")):
                continue
            for j, (w, y, x) in enumerate(d.sites[:2]):
                plan, noisy = fixed_effects_draws(w, y, x, d.domain_size, d.bound, "1", reps, 7 + j)
                out = plan.assemble(noisy)
                c = plan_constants(plan)
                true = histogram_cells(np.asarray(plan.noise[0].value, float), c.bound)
                counts, sums = true["counts"], true["sums"]
                n_c, n_t, s_c, s_t = counts[0::2], counts[1::2], sums[0::2], sums[1::2]
                big_d = np.sum(n_t * n_c)
                tau = np.sum(s_t * n_c - s_c * n_t) / big_d
                v_n, v_s = c.v_n, c.v_s
                true_num = np.sum(
                    v_n * ((s_t - tau * n_t) ** 2 + (s_c + tau * n_c) ** 2)
                    + v_s * (n_t**2 + n_c**2) + 2 * v_s * v_n + tau**2 * v_n**2
                )  # fmt: skip
                ok = np.isfinite(out.tau)
                noisy_n = np.clip(histogram_vectors(c, noisy)["counts"], -c.n, c.n)
                d_hat = np.sum(noisy_n[:, 1::2] * noisy_n[:, 0::2], axis=1)[ok]
                estimated = out.diagnostics["noise_variance"][ok] * d_hat**2
                realised = ((out.tau[ok] - tau) * d_hat) ** 2
                z = (out.tau[ok] - tau) / np.sqrt(out.variance[ok])
                print(f"  {d.name:24s} site {j + 1}: resolved {ok.mean():.2f}   numerator "
                      f"{np.mean(estimated) / true_num:.3f} (median "
                      f"{np.median(estimated) / true_num:.3f})   realised "
                      f"{np.mean(realised) / true_num:.3f}   z sd {z.std():.3f}, cover "
                      f"{np.mean(np.abs(z) <= 1.96):.3f}", flush=True)  # fmt: skip
    finally:
        _weightings.FIELLER_BELOW = saved


def main() -> None:
    if "--noise" in sys.argv:
        noise_rows()
        return
    synth_rows()
    try:
        real_rows()
    except DataUnavailableError as err:
        print(f"(real data skipped: {err})")


if __name__ == "__main__":
    main()
