"""The boundaries together: spec file -> site data -> release -> published report -> aggregate."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpate.schemas.reports import SiteReport, read_report
from dpate.schemas.site_data import prepare_site_data
from dpate.schemas.spec import load_spec
from dpate.signing import generate_key_pair, load_private_key
from dpate_core.aggregation import aggregate
from dpate_core.mechanisms.matching import smooth_dp_matching
from dpate_core.synth import split_proportions, synth

from .test_spec import EXAMPLES


def test_three_sites_from_the_example_spec(tmp_path):
    spec_path = tmp_path / "study.toml"
    text = (EXAMPLES / "synth-observational-3-sites.toml").read_text()
    # point every site at a local file next to the spec
    for loc in (
        "site-a/records.parquet",
        "s3://site-b-dpate/records.csv",
        "/data/dpate/records.csv",
    ):
        text = text.replace(f'"{loc}"', f'"{loc.rsplit("/", 2)[-2]}.{loc.rsplit(".", 1)[-1]}"')
    keys = {}  # each site's key (dpate site keygen), its public half in the spec
    for site_id in ("site-a", "site-b", "site-c"):
        path, public = generate_key_pair(site_id, tmp_path / "keys")
        keys[site_id] = load_private_key(path)
        text = text.replace(f'id = "{site_id}"\n', f'id = "{site_id}"\npublic_key = "{public}"\n')
    spec_path.write_text(text)
    spec = load_spec(spec_path)
    assert spec.domain_size == 24

    s = synth(9_000, 24, a=0.5, b=0.2, seed=11)
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "home_visits": s.w,
            "cognitive_score": 40 + 120 * s.y,
            "sex": np.where(s.x // 12 == 1, "male", "female"),
            "mother_education": np.array(["none", "high_school", "college"])[(s.x // 4) % 3],
            "birth_weight_g": np.array([1000.0, 1700.0, 2200.0, 3300.0])[s.x % 4],
            "unrelated": rng.random(s.n),
        }
    )
    parts = split_proportions(s.n, "3:2:1", seed=1)
    reports = []
    for site, idx in zip(spec.sites, parts, strict=True):
        path = tmp_path / spec.site(site.id).data
        if path.suffix == ".parquet":
            frame.iloc[idx].to_parquet(path)
        else:
            frame.iloc[idx].to_csv(path, index=False)
        data = prepare_site_data(spec.data_location(site.id), spec)
        np.testing.assert_array_equal(data.x, s.x[idx])  # strata come back exactly
        est = smooth_dp_matching(
            data.w,
            data.y,
            data.x,
            bound=data.bound,
            epsilon=site.epsilon,
            delta=site.delta,
            domain_size=data.domain_size,
            split=spec.budget_split(site.id).shares,
            rng=rng,
        )
        report = SiteReport.from_estimate(est, spec=spec, site_id=site.id)
        published = report.signed_with(keys[site.id]).to_json_bytes()
        reports.append(read_report(published, spec, site_id=site.id))
    ests = [r.to_estimate() for r in reports]
    res = aggregate(
        spec.aggregator, [e.tau for e in ests], [e.n for e in ests], [e.variance for e in ests]
    )
    # the true effect is 0.5 on [0, 1], i.e. 60 points on the score scale
    assert abs(res.estimate - 60.0) < 6 * np.sqrt(res.variance)
