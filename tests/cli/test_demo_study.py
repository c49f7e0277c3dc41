"""``dpate demo``'s study is a valid study: its spec loads and every site's records validate.

The full demo run (Prefect, ledgers, publication) is what ``tests/pipeline`` exercises on studies of
the same shape; here we check that what the README's main command writes is well-formed and what
it promises (three unequal sites with unequal budgets, the Synth design, ATE 0.5).
"""

from __future__ import annotations

from fractions import Fraction

from typer.testing import CliRunner

from dpate.cli.demo_study import DEMO_SITES, TRUE_ATE, write_demo_study
from dpate.cli.main import app
from dpate.schemas.site_data import prepare_site_data
from dpate.schemas.spec import load_spec
from dpate_core.statistics import matching_statistics


def test_demo_study_is_valid_and_unequal(tmp_path):
    spec_path = write_demo_study(tmp_path, seed=11)
    spec = load_spec(spec_path)
    assert spec.estimator == "smooth_matching" and spec.aggregator == "mvagg"
    sizes, budgets = [], []
    for site in DEMO_SITES:
        data = prepare_site_data(spec.data_location(site.id, base_dir=spec_path.parent), spec)
        assert data.n == site.n
        assert data.domain_size == spec.domain_size == 20
        stats = matching_statistics(data.w, data.y, data.x, data.domain_size, bound=1.0)
        assert abs(stats.tau - TRUE_ATE) < 0.05  # matching removes the confounding by X
        sizes.append(site.n)
        budgets.append(spec.site(site.id).epsilon)
    assert len(set(sizes)) == 3 and len(set(budgets)) == 3
    assert all(isinstance(b, Fraction) for b in budgets)


def test_demo_is_a_cli_command():
    result = CliRunner().invoke(app, ["demo", "--help"])
    assert result.exit_code == 0
    assert "--out" in result.output


def test_demo_sites_sign_with_keys_kept_outside_the_published_folder(tmp_path):
    from dpate.cli.demo_study import demo_key_path
    from dpate.signing import load_private_key, public_key_text

    spec = load_spec(write_demo_study(tmp_path, seed=11))
    assert spec.signing == "required"
    for site in DEMO_SITES:
        key = demo_key_path(tmp_path, site.id)
        assert key.stat().st_mode & 0o777 == 0o600
        assert not key.is_relative_to(tmp_path / "published")
        assert spec.site(site.id).public_key == public_key_text(load_private_key(key))
    # a re-run keeps the keys, so the spec (and every release id) is the same
    assert load_spec(write_demo_study(tmp_path, seed=11)).spec_hash == spec.spec_hash
