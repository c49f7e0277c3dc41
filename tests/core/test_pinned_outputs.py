"""The core's numbers at fixed numpy seeds, pinned to recorded values: every release plan
(difference in means, general and binary, public and private arms; both matching estimators with
both variance modes; both weightings of the adjusted estimator) assembled over seeded draws, the
sensitivity bounds, the simulated Laplace and Gaussian draws, the bootstrap intervals of sites and
combiners, and two study plans with their recommendations, against ``pinned_outputs.json``.

A relative tolerance of 1e-12 allows only last-bit differences of the platform's maths library,
not a change of formula. A change of formula that is meant re-records the file with
``python -m pytest tests/core/test_pinned_outputs.py --regenerate`` (tests/golden.py), in a commit
of its own that says which entries moved and why (the file's history is in git)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpate_core import inference, noise
from dpate_core.mechanisms.adjusted import plan_adjusted
from dpate_core.mechanisms.difference_in_means import plan_difference_in_means
from dpate_core.mechanisms.matching import _sensitivity as sensitivity
from dpate_core.mechanisms.matching import plan_matching
from dpate_core.planning import SiteDesign, plan_study
from dpate_core.release import draw_many, noise_free
from dpate_core.statistics import (
    cell_statistics,
    exact_matching,
    matching_statistics,
    matching_variance,
)
from dpate_core.synth import synth
from tests.golden import Golden

PINNED = Path(__file__).with_name("pinned_outputs.json")


def _floats(v: Any) -> list[float]:
    return np.asarray(v, dtype=float).ravel().tolist()


def outputs() -> dict[str, Any]:
    out: dict[str, Any] = {}
    d = synth(3000, 20, seed=3)
    y_binary = (d.y > d.bound / 2) * d.bound
    stats = matching_statistics(d.w, d.y, d.x, 20, bound=d.bound)
    cells = cell_statistics(d.w, d.y, d.x, domain_size=20, bound=d.bound)
    plans = {}
    for pub in (True, False):
        plans[f"dim{pub}"] = plan_difference_in_means(
            d.w, d.y, bound=d.bound, epsilon=1, arm_sizes_public=pub
        )
        plans[f"dimbin{pub}"] = plan_difference_in_means(
            d.w, y_binary, bound=d.bound, epsilon=1, arm_sizes_public=pub, binary=True
        )
    for est in ("smooth_matching", "global_matching"):
        for var in ("appendix", "stratified"):
            plans[f"{est}{var}"] = plan_matching(
                est, stats, bound=d.bound, epsilon=1, delta="1e-5", domain_size=20,
                variance=var, cells=cells,
            )  # fmt: skip
    for wt in ("fixed_effects", "subclassification"):
        plans[f"adj{wt}"] = plan_adjusted(
            d.w, d.y, d.x, bound=d.bound, epsilon=1, domain_size=20, weighting=wt
        )
    for name, plan in plans.items():
        o = plan.assemble(draw_many(plan, np.random.default_rng(7), 50))
        out[name + ".tau"] = _floats(o.tau)
        out[name + ".var"] = _floats(o.variance)
        out[name + ".raw"] = _floats(o.raw_variance)
        for k, v in sorted(o.diagnostics.items()):
            out[name + ".d." + k] = _floats(np.broadcast_to(v, np.shape(o.tau)))
        out[name + ".est"] = plan.estimate(noise_free(plan)).public_fields()
        shifted = plan.estimate({k: v + 0.01 for k, v in noise_free(plan).items()})
        ci = inference.site_bootstrap_interval(shifted, draws=2000)
        out[name + ".ci"] = list(ci.as_dict().values())
    for t, c, n in (([3, 0, 5, 1], [2, 4, 0, 1], 16), ([10, 1], [1, 10], 22)):
        for fn in ("matching_local_sensitivity_bound", "matching_variance_local_sensitivity_bound"):
            out[f"{fn}{t}"] = getattr(sensitivity, fn)(t, c, n, 1.5)
        for fn in ("matching_smooth_sensitivity", "matching_variance_smooth_sensitivity"):
            for dom in (None, 6):
                out[f"{fn}{t}{dom}"] = getattr(sensitivity, fn)(t, c, n, 1.5, 0.05, dom)
    chosen = (
        "dimTrue",
        "smooth_matchingappendix",
        "adjsubclassification",
        "global_matchingstratified",
    )
    sites = [plans[k].estimate(noise_free(plans[k])) for k in chosen]
    for agg in ("mvagg", "all", "random_effects"):
        ci = inference.combined_bootstrap_interval(sites, agg, draws=2000)
        out["comb" + agg] = list(ci.as_dict().values())
    designs = [
        SiteDesign.of("a", 8000, "1/2", "1e-5", None, 3),
        SiteDesign.of("b", 4000, 1, "1e-5", None, 3),
    ]
    for design in ("observational", "randomized"):
        p = plan_study(
            "smooth_matching", "mvagg", designs, domain_size=50, bound=1.0, design=design,
            target_width=0.1,
        )  # fmt: skip
        rec = p.recommendation.as_dict() if p.recommendation else None
        out["plan" + design] = [p.combined_variance, p.used, p.epsilon_needed, rec]
    out["exact"] = exact_matching(d.w, d.y, d.x).tau
    out["mvar"] = matching_variance(d.w, d.y, d.x)
    for fn in ("laplace", "gaussian"):
        g = np.random.default_rng(11)
        out[fn] = [getattr(noise, fn)(float(i), 1.5, g) for i in range(5)]
    return out


def _same(got: Any, want: Any, key: str, golden: Golden) -> None:
    """``got`` is the pinned ``want`` (floats to 1e-12), else a failure naming ``key``."""
    why = golden.differs(f"{PINNED.name}: {key} differs")
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), why
        for k in want:
            _same(got[k], want[k], f"{key}.{k}", golden)
    elif isinstance(want, list):
        assert len(got) == len(want), why
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _same(a, b, f"{key}[{i}]", golden)
    elif isinstance(want, float) and not isinstance(want, bool):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-300, nan_ok=True), why
    else:
        assert got == want, why


def test_outputs_are_the_recorded_ones(golden):
    got = json.loads(json.dumps(outputs(), sort_keys=True, default=str))
    want = json.loads(golden.text(PINNED, json.dumps(got, sort_keys=True, indent=0) + "\n"))
    _same(got, want, "the outputs", golden)
