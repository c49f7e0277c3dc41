"""`dpate check` names the study's one estimand and the adjusted estimator's weighting every
site's release would use (a public rule on every site's declared n, |X| and eps, made once for
the whole study; docs/explanation/adjusted.md), and no weighting for the other estimators."""

from __future__ import annotations

from typer.testing import CliRunner

from dpate.cli.main import app
from tests.cli.test_check import write_study

runner = CliRunner()


def _site_part(out: str, site: str, nxt: str | None) -> str:
    part = out.split(f"site {site}")[1]
    return part.split(f"site {nxt}")[0] if nxt else part


def test_check_prints_one_weighting_for_the_whole_study(tmp_path, home):
    # |X| = 3, eps 1, default split: one site alone would choose subclassification iff
    # N / 6 >= 10 * sqrt(2) 2 / (9/10) (a count's noise the histogram's two bins), N >= 189:
    # the small site would choose fixed effects
    spec = write_study(
        tmp_path,
        {"small": {"n": 150, "declared": 150}, "big": {"n": 400, "declared": 400}},
        estimator='"adjusted"',
    )
    out = runner.invoke(app, ["check", str(spec)]).output
    assert (
        "every site's release would use: fixed_effects (adjusted_weighting = 'auto': 1 of 2" in out
    )
    assert "estimand (every site): the average of the effects within strata" in out
    for site, nxt in (("small", "big"), ("big", None)):
        assert "the release would use: fixed_effects (the study's" in _site_part(out, site, nxt)
    both_big = write_study(
        tmp_path / "b",
        {"a": {"n": 400, "declared": 400}, "b": {"n": 450, "declared": 450}},
        estimator='"adjusted"',
    )
    out = runner.invoke(app, ["check", str(both_big)]).output
    assert "estimand (every site): the average effect over the patients in strata where both" in out
    assert out.count("the release would use: subclassification") == 2
    undeclared = write_study(tmp_path / "u", {"a": {"n": 400}}, estimator='"adjusted"')
    out = runner.invoke(app, ["check", str(undeclared)]).output
    assert "not every site declares its record count n" in out
    assert "the release would use: fixed_effects" in out
    forced = write_study(
        tmp_path / "f",
        {"small": {"n": 300}},
        estimator='"adjusted"',
        adjusted_weighting='"subclassification"',
    )
    out = runner.invoke(app, ["check", str(forced)]).output
    assert "the release would use: subclassification" in out
    assert "declared in the spec (adjusted_weighting = 'subclassification')" in out
    # 30 records in 3 strata, subclassification declared: about 5 records per arm per stratum
    # against a threshold of 3.1, so the release reads only part of its strata; check repeats
    # the plan's note at the declared n
    sparse = write_study(
        tmp_path / "s",
        {"small": {"n": 30, "declared": 30}},
        estimator='"adjusted"',
        adjusted_weighting='"subclassification"',
    )
    out = runner.invoke(app, ["check", str(sparse)]).output
    assert "site small: subclassification is predicted to read the strata of" in out
    assert "at the declared n and `dpate plan`'s default assumptions" in out
    assert "caution: site small: subclassification" in " ".join(out.split())
    assert "predicted to read the strata" not in runner.invoke(app, ["check", str(forced)]).output
    other = write_study(tmp_path / "o", {"a": {}})
    out = runner.invoke(app, ["check", str(other)]).output
    assert "the release would use" not in out
    assert "estimand (every site): the " in out


def test_check_says_when_the_declared_n_is_not_the_sites_n(tmp_path, home):
    spec = write_study(tmp_path, {"a": {"n": 400, "declared": 380}}, estimator='"adjusted"')
    out = runner.invoke(app, ["check", str(spec)]).output
    assert "the spec declares n = 380 for this site (its N here: 400)" in out


def test_plan_names_the_estimand_and_when_the_given_n_would_choose_otherwise(tmp_path, home):
    import json

    spec = write_study(tmp_path, {"a": {"n": 100}, "b": {"n": 100}}, estimator='"adjusted"')
    sizes = ["--n", "a=5000", "--n", "b=6000"]
    res = runner.invoke(app, ["plan", str(spec), *sizes, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    # no n declared: the releases use fixed effects, whatever --n says
    assert doc["variant"] == "fixed_effects"
    assert doc["estimand"].startswith("the average of the effects within strata")
    assert {s["weighting"] for s in doc["sites"]} == {"fixed_effects"}
    assert any(
        "--n) the study's public rule would choose subclassification" in n for n in doc["notes"]
    )
    # and why, as the spec makes the choice ("auto" without n), not as a declared weighting
    assert any(
        n.startswith("fixed_effects at every site: adjusted_weighting = 'auto' and not every")
        for n in doc["notes"]
    ), doc["notes"]
    table = runner.invoke(app, ["plan", str(spec), *sizes], env={"COLUMNS": "200"})
    assert "estimand (one for the whole study): the average of the effects" in table.output
    declared = write_study(
        tmp_path / "d",
        {"a": {"n": 100, "declared": 5000}, "b": {"n": 100, "declared": 6000}},
        estimator='"adjusted"',
    )
    doc = json.loads(runner.invoke(app, ["plan", str(declared), *sizes, "--json"]).output)
    assert doc["variant"] == "subclassification"
    assert not any("--n)" in n for n in doc["notes"])


def test_plan_reads_each_sites_declared_n_and_a_given_n_wins(tmp_path, home):
    import json

    declared = write_study(
        tmp_path, {"a": {"declared": 4000}, "b": {"declared": 5000}}, estimator='"propensity"'
    )
    res = runner.invoke(app, ["plan", str(declared), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [s["n"] for s in doc["sites"]] == [4000, 5000]
    # the study's public choice from the smallest n x epsilon (4,000): half the budget to the
    # model (the defaults, a quarter, when n is not declared)
    assert doc["variant"] == "K = 5 bands, model share 1/2"
    given = json.loads(runner.invoke(app, ["plan", str(declared), "--n", "b=900", "--json"]).output)
    assert [s["n"] for s in given["sites"]] == [4000, 900]
    partly = write_study(tmp_path / "p", {"a": {"declared": 2000}, "b": {}})
    res = runner.invoke(app, ["plan", str(partly)])
    assert res.exit_code != 0
    assert "missing ['b'] (declare n for the site in the spec, or give e.g. --n b=5000)" in (
        " ".join(res.output.split())
    )
