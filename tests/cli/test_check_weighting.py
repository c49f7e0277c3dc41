"""`dpate check` prints the adjusted estimator's weighting a release would use (a public rule on
the published N, |X| and eps; docs/adjusted.md), and nothing about it for the other estimators."""

from __future__ import annotations

from typer.testing import CliRunner

from dpate.cli.main import app
from tests.cli.test_check import home, write_study  # noqa: F401 (home: a fixture)

runner = CliRunner()


def test_check_prints_the_weighting_a_release_would_use(tmp_path, home):  # noqa: F811
    # |X| = 3, eps 1, default split: subclassification iff N / 6 >= 10 * 2 / (7/20), N >= 343
    spec = write_study(tmp_path, {"small": {"n": 300}, "big": {"n": 400}}, estimator='"adjusted"')
    out = runner.invoke(app, ["check", str(spec)]).output
    small, big = out.split("site big")[0].split("site small")[1], out.split("site big")[1]
    assert "the release would use: fixed_effects (chosen per site" in small
    assert "the release would use: subclassification (chosen per site" in big
    forced = write_study(
        tmp_path / "f",
        {"small": {"n": 300}},
        estimator='"adjusted"',
        adjusted_weighting='"subclassification"',
    )
    out = runner.invoke(app, ["check", str(forced)]).output
    assert "the release would use: subclassification (the average effect over the patients" in out
    other = write_study(tmp_path / "o", {"a": {}})
    assert "the release would use" not in runner.invoke(app, ["check", str(other)]).output
