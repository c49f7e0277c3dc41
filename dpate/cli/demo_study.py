"""``dpate demo``: a three-site synthetic observational study written to one folder.

The data come from the paper's Synth generator (:func:`dpate_core.synth.synth`, section 4): ``X``
uniform on ``|X|`` equally spaced levels of ``[0, 1]``, ``W ~ Bernoulli(sigmoid(a (2X - 1)))``
(confounded: larger ``X`` is treated more often), ``Y = b X + 0.5 W + e`` in ``[0, 1]``, so the
true ATE is 0.5. Sites differ in size and budget.
Everything lands under the output folder::

    <out>/study.toml                  the study spec (public)
    <out>/sites/<site>/records.parquet each site's records (private, stays "at the site")
    <out>/ledgers/<site>.sqlite       each site's privacy ledger
    <out>/keys/<site>.ed25519.pem     each site's report-signing key (private, stays "at the site";
                                      its public half is the site's public_key in the spec)
    <out>/published/...               reports and results (what leaves the sites)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpate_core.synth import SYNTH_TAU, synth

__all__ = ["DEMO_SITES", "DemoSite", "demo_key_path", "write_demo_study"]

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


def _spec_text(sites: tuple[DemoSite, ...], public_keys: dict[str, str]) -> str:
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
public_key = "{public_keys[s.id]}"
'''
        )
    return "".join(parts)


def demo_key_path(out: Path, site: str) -> Path:
    """Where the demo keeps ``site``'s private signing key (its site configuration's
    ``DPATE_SITE_KEY``): under the output folder, never under ``published``."""
    return out / "keys" / f"{site}.ed25519.pem"


def write_demo_study(out: Path, seed: int = 2026, sites: tuple[DemoSite, ...] = DEMO_SITES) -> Path:
    """Write the spec and each site's records under ``out``; returns the spec's path. Each
    site's signing key is made once (:func:`demo_key_path`; an existing one is kept, so a re-run
    writes the same spec) and its public half goes into the spec: the demo's reports are signed
    as every study's are by default."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dpate.signing import ensure_private_key

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for s in sites:
        data = synth(s.n, DOMAIN, a=IMBALANCE, b=SLOPE, seed=rng)
        folder = out / "sites" / s.id
        folder.mkdir(parents=True, exist_ok=True)
        table = pa.table({"treated": data.w, "outcome": data.y, "x_level": data.x})
        pq.write_table(table, folder / "records.parquet")
    spec = out / "study.toml"
    keys = {s.id: ensure_private_key(demo_key_path(out, s.id)) for s in sites}
    spec.write_text(_spec_text(sites, keys), encoding="utf-8")
    return spec
