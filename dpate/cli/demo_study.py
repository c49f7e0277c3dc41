"""``dpate demo``: a three-site synthetic observational study written to one folder.

The data come from the paper's Synth generator (:func:`dpate_core.synth.synth`, section 4): ``X``
uniform on ``|X|`` equally spaced levels of ``[0, 1]``, ``W ~ Bernoulli(sigmoid(a (2X - 1)))``
(confounded: larger ``X`` is treated more often), ``Y = b X + 0.5 W + e`` in ``[0, 1]``, so the
true ATE is 0.5. Sites differ in size and budget.
Everything lands under the output folder::

    <out>/study.toml                  the study spec (public)
    <out>/sites/<site>/records.parquet each site's records (private, stays "at the site")
    <out>/ledgers/<site>.sqlite       each site's privacy ledger
    <out>/published/...               reports and results (what leaves the sites)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpate_core.synth import SYNTH_TAU, synth

__all__ = ["DEMO_SITES", "DemoSite", "write_demo_study"]

DOMAIN = 20  # |X|
TRUE_ATE = SYNTH_TAU
IMBALANCE = 1.0  # a: treatment more likely at larger X
SLOPE = 0.4  # b: the outcome grows with X, so ignoring X would bias the estimate


@dataclass(frozen=True)
class DemoSite:
    id: str
    n: int
    epsilon: str
    cap: str


DEMO_SITES = (
    DemoSite("hospital-a", 100_000, "1", "3"),
    DemoSite("hospital-b", 40_000, "1/2", "2"),
    DemoSite("hospital-c", 10_000, "2", "6"),
)


def _spec_text(sites: tuple[DemoSite, ...]) -> str:
    levels = ", ".join(str(k) for k in range(DOMAIN))
    parts = [
        f"""# dpate demo: a synthetic observational study (paper's Synth design, true ATE {TRUE_ATE})
spec_version = 1
study_id = "dpate-demo"
title = "Synthetic observational study across three hospitals"
design = "observational"
estimator = "smooth_matching"
aggregator = "mvagg"
missing = "reject"
release = "1"
reports = "published"            # relative to this file: <out>/published
require_all_sites = false

[treatment]
column = "treated"

[outcome]
column = "outcome"
bound = 1.0                      # public: Synth's outcomes lie in [0, 1] by construction
policy = "clip"

[[covariates]]
kind = "categorical"
column = "x_level"
levels = [{levels}]
"""
    ]
    for s in sites:
        parts.append(
            f'''
[[sites]]
id = "{s.id}"
data = "sites/{s.id}/records.parquet"
epsilon = "{s.epsilon}"
delta = "1e-5"
lifetime_cap = {{ epsilon = "{s.cap}", delta = "1e-4" }}
'''
        )
    return "".join(parts)


def write_demo_study(out: Path, seed: int = 2026, sites: tuple[DemoSite, ...] = DEMO_SITES) -> Path:
    """Write the spec and each site's records under ``out``; returns the spec's path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for s in sites:
        data = synth(s.n, DOMAIN, a=IMBALANCE, b=SLOPE, seed=rng)
        folder = out / "sites" / s.id
        folder.mkdir(parents=True, exist_ok=True)
        table = pa.table({"treated": data.w, "outcome": data.y, "x_level": data.x})
        pq.write_table(table, folder / "records.parquet")
    spec = out / "study.toml"
    spec.write_text(_spec_text(sites), encoding="utf-8")
    return spec
