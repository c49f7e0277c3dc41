"""The typed study result (dpate.schemas.reports.StudyResult) and its views.

The reference views in ``tests/schemas/result_views/`` are the expected text of each view of each
document in ``result_docs.py`` (the HTML with its embedded PNG replaced by ``PNG``); the page must
also embed exactly the forest plot ``forest_plot_png`` draws. After an intended change of a view,
regenerate them (tests/golden.py), read the diff, and say in the commit what changed::

    python -m pytest tests/schemas/test_result.py --regenerate
"""

from __future__ import annotations

import base64
import io
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from rich.console import Console

from dpate.html_report import forest_plot_png, render_html
from dpate.ledger import SiteSpend
from dpate.schemas.reports import AbsentSite, ReleasedSite, StudyResult, interval_text
from dpate_core.privacy import PrivacyParams
from tests.golden import Golden

from .result_docs import DOCS, V2

VIEWS = Path(__file__).parent / "result_views"
PNG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")
SPENDS = {
    "alpha": SiteSpend("alpha", PrivacyParams.of(3, "1/10000"), PrivacyParams.of(1, "1/100000"),
                       {}, {}),
    "beta": None,
    "gamma": SiteSpend("gamma", None, PrivacyParams.of(1, 0), {}, {}),
}  # fmt: skip


def same_as_reference(golden: Golden, name: str, rendered: str) -> None:
    """``rendered`` is the reference view ``name`` (rewritten as ``rendered`` with
    ``--regenerate``)."""
    stored = golden.text(VIEWS / name, rendered)
    assert rendered == stored, golden.differs(f"the view differs from result_views/{name}")


@pytest.mark.parametrize("name", sorted(DOCS))
def test_parsing_keeps_the_document(name):
    doc = DOCS[name]
    result = StudyResult.of(doc)
    assert result.to_document() == doc
    assert StudyResult.of(result) is result


@pytest.mark.parametrize("name", sorted(DOCS))
def test_markdown_is_the_reference(name, golden):
    text = StudyResult.of(DOCS[name]).markdown()
    same_as_reference(golden, f"{name}.md", text)


@pytest.mark.parametrize("width", [140, 80])
@pytest.mark.parametrize("name", sorted(DOCS))
def test_cli_table_and_summary_are_the_reference(name, width, monkeypatch, golden):
    # 140 columns: the table of sites; 80 (a piped console's width), narrower than any of these
    # tables: one line per site, its notes below, never a table folded into its cells
    import dpate.cli.output as cli

    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    monkeypatch.setattr(cli, "console", console)
    runs = [
        {"site_id": "delta", "ok": False, "error": "boom at delta"},
        {"site_id": "alpha", "ok": True},
    ]
    cli.print_result(dict(DOCS[name], uri="s3://b/s1/results/2.json"), runs)
    text = console.export_text()
    same_as_reference(golden, f"{name}.cli{'' if width == 140 else width}.txt", text)


def test_a_flagged_site_interval_says_its_flag_in_the_cell_and_why_below():
    first = dict(DOCS["v3"]["sites"][0])
    why = "the privacy noise is more than 9 times the patients' own variation"
    first["interval"] = dict(
        first["interval"], rules=["noise"], note=f"mostly privacy noise: {why}"
    )
    doc = dict(DOCS["v3"], sites=[first, *DOCS["v3"]["sites"][1:]])
    console = Console(record=True, width=140, file=io.StringIO(), color_system=None)
    from dpate.cli.output import sites_table

    console.print(sites_table(StudyResult.of(doc)))
    text = console.export_text()
    assert "(mostly privacy noise)" in text and f"{first['site_id']}'s interval: " in text
    assert text.count(why) == 1  # once, in the caption: the CI column stays narrow


@pytest.mark.parametrize("name", sorted(DOCS))
def test_html_is_the_reference_with_the_forest_plot_embedded(name, golden):
    result = StudyResult.of(DOCS[name])
    page = render_html(result, "/home/x/store/s1/results/2.json", SPENDS)
    (png,) = PNG.findall(page)
    assert base64.b64decode(png) == forest_plot_png(result)
    assert base64.b64decode(png).startswith(b"\x89PNG\r\n\x1a\n")
    text = PNG.sub("data:image/png;base64,PNG", page)
    same_as_reference(golden, f"{name}.html", text)


def test_sites_are_typed_by_status():
    result = StudyResult.of(V2)
    kinds = {s.site_id: type(s) for s in result.sites}
    assert kinds["alpha"] is ReleasedSite and kinds["gamma"] is ReleasedSite
    assert kinds["delta"] is AbsentSite and kinds["eps<&>"] is AbsentSite
    assert [s.site_id for s in result.released] == ["alpha", "beta", "gamma", "zeta"]
    assert result.used == ["alpha", "zeta"]
    alpha = result.sites[0]
    assert isinstance(alpha, ReleasedSite) and alpha.ledger_head is not None
    assert alpha.ledger_head.seq == 3
    bad = dict(V2, sites=[{"site_id": "x", "status": "used", "reason": "r"}])
    with pytest.raises(ValidationError, match="tau"):
        StudyResult.of(bad)  # a used site carries its release
    with pytest.raises(ValidationError):
        StudyResult.of(dict(V2, sites=[{"site_id": "x", "status": "lost", "reason": "r"}]))


def test_interval_methods_agree_with_the_dict_helpers():
    result = StudyResult.of(V2)
    assert result.interval_text(6) == interval_text(V2, 6)
    for typed, raw in zip(result.released, [s for s in V2["sites"] if "tau" in s], strict=True):
        assert typed.interval_text() == interval_text(raw)
        assert typed.interval_ends() == (raw["interval"]["lo"], raw["interval"]["hi"])
    v1 = StudyResult.of(DOCS["v1"])
    assert v1.interval is None and v1.interval_ends() == (0.0808, 0.1592)
    assert not v1.uninformative and v1.schema_version == 2  # defaults, not written back
    assert "schema_version" not in v1.to_document()


def test_unknown_fields_are_ignored_when_reading():
    result = StudyResult.of(dict(V2, uri="s3://b/x.json", future_field=1))
    assert result.to_document() == V2
    assert Fraction(result.released[0].epsilon) == 1


def test_the_spend_of_a_site_with_a_balance_table_says_the_table_is_not_in_it():
    """A report's lifetime spend is the ledger's total at the estimate's reservation; a balance
    table is its own release reserved after it, so every view says so and names its epsilon."""
    alpha = V2["sites"][0]
    assert alpha.get("lifetime_spend") is not None
    plain = StudyResult.of(dict(V2, sites=[alpha])).released[0]
    table = {"epsilon": "1/10", "rows": []}
    with_table = StudyResult.of(dict(V2, sites=[dict(alpha, balance=table)])).released[0]
    assert with_table.spend_text() == (
        f"{plain.spend_text()}, before this round's balance table (epsilon 1/10)"
    )


def test_the_smd_noise_floor_is_the_least_noise_sd_of_a_released_table():
    """:func:`smd_noise_floor` from the published row, the table's scale and N: at balanced arms
    it is the realised spread of the SMD over the table's draws (delta method, within 10%), and
    at unbalanced arms below it; the HTML cell shows it."""
    from dpate.schemas.reports import StudyResult, smd_noise_floor
    from dpate_core.balance import BalanceLayout, plan_balance

    layout = BalanceLayout(("x",), (("a", "b", "c"),), (None,))
    rng = np.random.default_rng(3)
    for treated in (1000, 400):
        control = 2000 - treated
        counts = np.array([[0.5 * control, 0.5 * treated], [0.3 * control, 0.3 * treated],
                           [0.2 * control, 0.2 * treated]]).astype(np.int64)  # fmt: skip
        plan = plan_balance(counts.ravel(), layout, "1/2")  # scale 2 p / eps = 4
        smds = [plan.draw(rng).rows[0].smd_before for _ in range(3000)]
        row = {"level": "a", "mean_treated": 0.5, "mean_control": 0.5}
        floor = smd_noise_floor(row, 3, plan.scale, 2000)
        assert floor is not None
        if treated == 1000:
            assert floor == pytest.approx(float(np.std(smds)), rel=0.1)
        else:
            assert floor < 0.95 * float(np.std(smds))
    site = dict(V2["sites"][0], n=2000)
    site["balance"] = {"noise_scale": plan.scale, "within": "none",
                       "rows": [dict(covariate="x", level=lev, mean_treated=0.5, mean_control=0.5,
                                     smd_before=0.01, smd_within=None) for lev in "abc"]}  # fmt: skip
    _, rows = StudyResult.of(dict(V2, sites=[site])).balance_rows()
    assert rows[0][2] == [f"+0.01 (noise sd >= {smd_noise_floor(row, 3, plan.scale, 2000):.2f})"]


def test_a_numeric_rows_noise_floor_reads_its_public_bin_midpoints():
    """A numeric covariate's one row (its bins' midpoints, the spec's): at balanced arms the
    floor is the realised spread of the SMD over the table's draws (within 10%), below it at
    unbalanced arms, None without the midpoints; the HTML cell shows it when the report is
    given the spec's values, and the artifact line counts it."""
    from types import SimpleNamespace

    from dpate.schemas.reports import StudyResult, smd_noise_floor, table_noise_floors
    from dpate.tasks.site import _balance_rows
    from dpate_core.balance import BalanceLayout, plan_balance

    mids = (25.0, 45.0, 65.0, 85.0)
    layout = BalanceLayout(("age",), (("a", "b", "c", "d"),), (mids,))
    rng = np.random.default_rng(5)
    for treated in (1000, 400):
        shares = np.array([0.2, 0.3, 0.3, 0.2])
        counts = np.stack([shares * (2000 - treated), shares * treated], axis=1).astype(np.int64)
        plan = plan_balance(counts.ravel(), layout, "1/2")
        drawn = [plan.draw(rng).rows[0] for _ in range(3000)]
        spread = float(np.std([r.smd_before for r in drawn]))
        row = vars(drawn[0])
        floor = smd_noise_floor(row, 4, plan.scale, 2000, mids)
        assert floor is not None and smd_noise_floor(row, 4, plan.scale, 2000) is None
        if treated == 1000:
            assert floor == pytest.approx(spread, rel=0.1)
        else:
            assert floor < 0.95 * spread
    table = {"epsilon": "1/2", "noise_scale": plan.scale, "within": "none", "rows": [row]}
    assert table_noise_floors(table, 2000) == [None]
    assert table_noise_floors(table, 2000, {"age": mids}) == [floor]
    site = dict(V2["sites"][0], n=2000, balance=table)
    result = StudyResult.of(dict(V2, sites=[site]))
    assert "noise sd" not in result.balance_rows()[1][0][2][0]
    assert result.balance_rows({"age": mids})[1][0][2] == [
        f"{row['smd_before']:+.2f} (noise sd >= {floor:.2f})"
    ]
    (line,) = _balance_rows(table, 2000, SimpleNamespace(balance_values={"age": mids}))
    assert line["value"].endswith(f"an SMD carries noise of sd at least {floor:.2g}")


def test_the_site_artifact_names_the_least_noise_of_its_balance_table():
    """The site's Prefect artifact line for its balance table gives its largest |SMD| and the
    least noise sd a level's SMD carries there (public values only)."""
    from dpate.schemas.reports import smd_noise_floor
    from dpate.tasks.site import _balance_rows

    rows = [dict(covariate="x", level=lev, mean_treated=m, mean_control=m, smd_before=0.3,
                 smd_within=None) for lev, m in (("a", 0.5), ("b", 0.3), ("c", 0.2))]  # fmt: skip
    table = {"epsilon": "1/10", "noise_scale": 100.0, "within": "none", "rows": rows}
    (line,) = _balance_rows(table, 2400)
    least = min(smd_noise_floor(r, 3, 100.0, 2400) for r in rows)  # type: ignore[type-var]
    assert line["value"] == (
        f"3 row(s), epsilon 1/10; largest |SMD| before: 0.3; an SMD carries noise of sd at least "
        f"{least:.2g}"
    )
    assert least > 0.25  # at epsilon 1/10 and 2,400 records an |SMD| of 0.3 is one noise sd
