"""``dpate experiments --quick`` on the paper's data: it runs, writes its outputs, and the paper's
orderings that are robust at 30 repetitions hold (fixed seed, so the check is not flaky; the
thresholds leave room well beyond the Monte Carlo error of the quick run).
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from dpate.cli.main import app
from dpate.experiments.settings import PAPER_ESTIMATORS

pytestmark = pytest.mark.slow


def _data_available() -> bool:
    from dpate.data.datasets import DataUnavailableError, load_lalonde

    try:
        load_lalonde()
    except DataUnavailableError:
        return False
    return True


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    if not _data_available():
        pytest.skip("the paper's data sets are not in DPATE_DATA_DIR")
    out = tmp_path_factory.mktemp("quick")
    result = CliRunner().invoke(app, ["experiments", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "experiments.csv")
    return out, table, pd.read_csv(out / "sensitivity.csv"), result.output


def _wide(table, **f):
    """The paper's mechanisms only (its claims are about them); the adjusted estimator has its
    own tests below."""
    sel = table[table["estimator"].isin(PAPER_ESTIMATORS)]
    for k, v in f.items():
        sel = sel[sel[k] == v]
    return sel.pivot_table(
        index=["dataset", "J", "proportions", "estimator", "alpha"],
        columns="aggregator",
        values="mae_mean",
    )


def test_outputs_are_written(quick):
    out, table, _, output = quick
    for name in (
        "experiments.parquet",
        "claims.md",
        "timings.json",
        "fig3_4_ist_two_sites_star.png",
        "fig5_ist_three_sites.png",
        "fig6_7_smooth_sensitivity.png",
        "fig8_obs_two_sites.png",
        "fig9_synth_three_sites.png",
        "fig10_ihdp_three_sites.png",
        "fig11_lalonde_three_sites.png",
    ):
        assert (out / name).stat().st_size > 0, name
    assert set(table["dataset"]) == {"IST", "STAR", "Synth", "IHDP", "Lalonde"}
    assert (table["reps"] == 30).all()
    meta = json.loads((out / "timings.json").read_text())
    assert meta["settings"]["reps"] == 30 and meta["points"] == len(table)
    assert "claims" in output.lower()


def test_smooth_matching_beats_global_matching(quick):
    _, table, _, _ = quick
    mv = table[table["aggregator"] == "mvagg"].pivot_table(
        index=["dataset", "J", "proportions", "alpha"], columns="estimator", values="mae_mean"
    )
    ratio = mv["smooth_matching"] / mv["global_matching"]
    # Synth (N = 10,000): an order of magnitude at every point
    assert ratio.loc["Synth"].max() < 0.5
    assert ratio.loc["Synth"].median() < 0.15
    # IHDP and Lalonde (N ~ 740): lower at the median (sites of 37 records can go either way)
    assert ratio.loc["Lalonde"].median() < 0.7
    assert ratio.loc["IHDP"].median() < 0.9


def test_mvagg_tracks_the_better_rule(quick):
    _, table, _, _ = quick
    w = _wide(table)
    rel = w["mvagg"] / np.minimum(w["all"], w["largest"])
    assert (rel <= 1.05).mean() >= 0.75
    assert rel.max() < 2.5  # 30 repetitions: single points are noisy (full run worst: 1.14)


def test_mvagg_is_safe_when_other_sites_have_a_much_smaller_epsilon(quick):
    _, table, _, _ = quick
    w = _wide(table)
    small = w[[Fraction(a) <= Fraction(1, 4) for a in w.index.get_level_values("alpha")]]
    assert (small["mvagg"] / small["all"]).max() < 1.5
    # and AggAll is badly hurt there where the noise dominates (Synth, two sites)
    synth = w.loc[("Synth", 2, "1:1", "smooth_matching", "1/8")]
    assert synth["all"] > 3 * synth["mvagg"]


def test_smooth_sensitivity_shape(quick):
    _, _, sens, _ = quick
    bal = sens[(sens["sweep"] == "N") & (sens["a"] == "0.0")].groupby("N")["smooth_sensitivity"]
    s = bal.mean()
    n = s.index.to_numpy()
    tail = np.log(s.iloc[-1] / s.iloc[-2]) / np.log(n[-1] / n[-2])
    assert -1.15 <= tail <= -0.85  # O(1/N) once strata hold a few hundred records
    imb = sens[sens["sweep"] == "a"]
    s_a = imb.groupby(imb["a"].astype(float))["smooth_sensitivity"].mean()
    assert s_a.iloc[-1] > 2 * s_a.iloc[0]  # grows with imbalance
    assert s_a.max() < 1.0  # and stays below the global sensitivity (2B = 2; paper B = 1)


def test_adjusted_estimator_is_drawn_beside_the_papers_and_beats_smooth_matching(quick):
    _, table, _, _ = quick
    assert set(table.loc[table["estimator"] == "adjusted", "dataset"]) == {
        "IST",
        "STAR",
        "Synth",
        "IHDP",
        "Lalonde",
    }
    mv = table[table["aggregator"] == "mvagg"].pivot_table(
        index=["dataset", "J", "proportions", "alpha"], columns="estimator", values="mae_mean"
    )
    ratio = mv["smooth_matching"] / mv["adjusted"]
    # Synth (N = 10,000, |X| = 100): lower MAE at every point, several times lower at the median
    # (the 10x goal is met only where noise, not sampling error, dominates:
    # docs/explanation/results.md)
    assert ratio.loc["Synth"].min() > 1
    assert ratio.loc["Synth"].median() >= 3
    # randomized trials: the adjusted estimator stays near the difference in means
    rct = mv.loc[["IST", "STAR"]]
    assert (rct["adjusted"] / rct["dim"]).median() < 2


def test_propensity_estimator_is_drawn_on_the_observational_sets(quick):
    _, table, _, _ = quick
    drawn = table[table["estimator"] == "propensity"]
    assert set(drawn["dataset"]) == {"Synth", "IHDP", "Lalonde"}
    assert drawn["mae_mean"].notna().all() and (drawn["no_answer_share"] == 0).all()
    mv = table[table["aggregator"] == "mvagg"].pivot_table(
        index=["dataset", "J", "proportions", "alpha"], columns="estimator", values="mae_mean"
    )
    # one categorical column of |X| levels: far below SmoothDPMatching at every Synth point
    assert (mv.loc["Synth", "smooth_matching"] / mv.loc["Synth", "propensity"]).min() > 1
