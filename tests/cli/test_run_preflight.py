"""`dpate run` checks every site before any site spends: a study that cannot complete (bad data
at one site, a round already released under another spec) reserves nothing anywhere."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dpate.cli.main import app
from dpate.errors import ExitCode
from tests.cli.conftest import public_key_line

runner = CliRunner()

HEADER = "w,y,x"


def good_rows(n: int = 60, seed: int = 3) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"{i % 2},{rng.random():.4f},{i % 3}" for i in range(n)]


#: a good site's data
GOOD = "\n".join([HEADER, *good_rows()]) + "\n"


#: the site data a new user gets wrong, each as the file's text (the good site is unchanged)
BAD_DATA = {
    "missing-column": "w,x\n"
    + "\n".join(r.rsplit(",", 2)[0] + "," + r.rsplit(",", 1)[1] for r in good_rows())
    + "\n",
    "string-outcome": "\n".join([HEADER, *good_rows()[:5], "1,high,0", *good_rows()[5:]]) + "\n",
    "out-of-range-outcome": "\n".join([HEADER, *good_rows(), "1,7.5,1"]) + "\n",
    "unknown-level": "\n".join([HEADER, *good_rows(), "0,0.5,9"]) + "\n",
    "empty-file": "",
    "header-only": HEADER + "\n",
    "one-row": HEADER + "\n1,0.5,0\n",
    "one-arm": "\n".join([HEADER, *(f"1,{v.split(',')[1]},{v.split(',')[2]}" for v in good_rows())])
    + "\n",
}


def write_spec(root: Path, sites: dict[str, str], **top: str) -> Path:
    """A two-site study; ``sites[id]`` is the text of the site's CSV."""
    blocks = []
    for site, text in sites.items():
        (root / site).mkdir(parents=True, exist_ok=True)
        (root / site / "data.csv").write_text(text, encoding="utf-8")
        blocks.append(
            f'\n[[sites]]\nid = "{site}"\ndata = "{site}/data.csv"\nepsilon = "1"\n'
            f'delta = "1e-5"\nlifetime_cap = {{ epsilon = "3", delta = "1e-4" }}\n'
            + public_key_line(site)
        )
    head = {"design": '"observational"', "estimator": '"smooth_matching"', **top}
    spec = root / "study.toml"
    spec.write_text(
        'spec_version = 1\nstudy_id = "pre"\nreports = "published"\n'
        + "".join(f"{k} = {v}\n" for k, v in head.items())
        + '\n[treatment]\ncolumn = "w"\n\n[outcome]\ncolumn = "y"\nbound = 1.0\n'
        'policy = "reject"\n\n'
        '[[covariates]]\nkind = "categorical"\ncolumn = "x"\nlevels = [0, 1, 2]\n'
        + "".join(blocks),
        encoding="utf-8",
    )
    return spec


def init_ledgers(*sites: str) -> None:
    for site in sites:
        r = runner.invoke(app, ["ledger", "init", site, "--epsilon", "3", "--delta", "1e-4"])
        assert r.exit_code == 0, r.output


def events(home: Path, site: str) -> list[str]:
    from dpate.ledger import PrivacyLedger

    with PrivacyLedger(f"sqlite:///{home / 'ledgers' / f'{site}.sqlite'}") as led:
        return [e.kind for e in led.events(site)]


def published(root: Path) -> list[Path]:
    return sorted(p for p in (root / "published").rglob("*") if p.is_file())


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_one_bad_site_spends_nothing_anywhere(tmp_path, home, case):
    spec = write_spec(
        tmp_path, {"a": "\n".join([HEADER, *good_rows()]) + "\n", "b": BAD_DATA[case]}
    )
    init_ledgers("a", "b")
    r = runner.invoke(app, ["run", str(spec)])
    assert r.exit_code == ExitCode.SITE_DATA, r.output
    assert "site b" in r.output and "site a:" not in r.output
    assert "nothing was reserved or spent at any site" in r.output
    assert events(home, "a") == ["CAP"] and events(home, "b") == ["CAP"]
    assert not (tmp_path / "published").exists() or published(tmp_path) == []
    assert "None" not in r.output and "Error(" not in r.output


def test_missing_ledger_and_bad_publication_stop_before_prefect(tmp_path, home):
    spec = write_spec(
        tmp_path, {"a": "\n".join([HEADER, *good_rows()]) + "\n", "b": BAD_DATA["one-row"]}
    )
    init_ledgers("a")
    r = runner.invoke(app, ["run", str(spec)])
    # a data problem (b) and a missing ledger (b): different causes, each named
    assert r.exit_code == ExitCode.SITES_FAILED, r.output
    assert "dpate ledger init b --epsilon 3 --delta 1/10000" in r.output
    assert events(home, "a") == ["CAP"]


def test_edited_spec_rerun_refuses_before_reserving_and_names_the_choices(tmp_path, home):
    from dpate.ledger import PrivacyLedger
    from dpate.settings import resolve_site

    data = "\n".join([HEADER, *good_rows()]) + "\n"
    spec = write_spec(tmp_path, {"a": data, "b": data})
    init_ledgers("a", "b")
    # the first run of round 1 reserved at both sites under the first spec
    for site in ("a", "b"):
        ctx = resolve_site(str(spec), site, None)
        with PrivacyLedger(ctx.ledger_url) as led:
            led.reserve(
                release_id=ctx.rid,
                study_id=ctx.study_id,
                site_id=site,
                spec_hash=ctx.spec.spec_hash,
                round=ctx.round,
                privacy=ctx.spec.release_cost(site),
                cap=ctx.spec.site(site).lifetime_cap.params,
            )
    text = spec.read_text().replace('epsilon = "1"', 'epsilon = "1/2"', 1)  # site a's budget
    spec.write_text(text)
    r = runner.invoke(app, ["run", str(spec)])
    assert r.exit_code == ExitCode.STORAGE, r.output
    out = " ".join(r.output.split())
    assert "round already released under another spec" in out
    assert "--round NEW" in out and "spends again: site a epsilon 1/2" in out
    assert "re-publishes the recorded release and spends nothing" in out
    assert events(home, "a") == ["CAP", "RESERVE"] and events(home, "b") == ["CAP", "RESERVE"]
    # a new round label is a new release: the check lets it through (to Prefect, not run here)
    from dpate.study_check import check_study

    assert check_study(str(spec), "r2").can_run


def test_require_all_sites_false_runs_without_the_bad_site(tmp_path, home):
    from dpate.study_check import check_study

    spec = write_spec(
        tmp_path,
        {"a": "\n".join([HEADER, *good_rows()]) + "\n", "b": BAD_DATA["header-only"]},
        require_all_sites="false",
    )
    init_ledgers("a", "b")
    checked = check_study(str(spec))
    assert checked.can_run and [s.ok for s in checked.sites] == [True, False]
    assert [s.spends for s in checked.sites] == [True, False]


def test_public_check_names_columns_and_rules_only(tmp_path, home):
    from dpate.study_check import check_study

    spec = write_spec(
        tmp_path, {"a": "\n".join([HEADER, *good_rows()]) + "\n", "b": BAD_DATA["string-outcome"]}
    )
    init_ledgers("a", "b")
    checked = check_study(str(spec), public=True)
    (problem,) = checked.sites[1].problems
    text = str(problem)
    assert "column 'y'" in text and "not a number" in text
    assert "row" not in text.replace("rows", "").lower() or "5" not in text
    assert "high" not in text
    log = (home / "logs" / "b.log").read_text()
    assert "not a number" in log  # the details stay in the site's operator log


def test_run_tells_the_operator_what_the_clip_policy_clipped(tmp_path, home, capsys):
    from dpate.cli.study import preflight

    data = "\n".join([HEADER, *good_rows(), "1,7.5,1", "0,-2,2"]) + "\n"
    spec = write_spec(tmp_path, {"a": GOOD, "b": data})
    spec.write_text(spec.read_text().replace('policy = "reject"', 'policy = "clip"'))
    init_ledgers("a", "b")
    checked = preflight(str(spec), None)
    assert checked.can_run and not checked.spends_nothing
    err = capsys.readouterr().err
    assert "site b (operator only, not private): 62 rows read" in " ".join(err.split())
    assert "1 clipped low, 1 clipped high" in err and "site a (" not in err


def count_reads(monkeypatch) -> list[str]:
    """Each opening of a site's data by the engine (the validation read), by location."""
    import dpate.schemas.site_data._reading as reading

    opened: list[str] = []
    real = reading.open_site_table

    def counting(source, *args, **kwargs):
        opened.append(str(source))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(reading, "open_site_table", counting)
    return opened


def test_the_check_keeps_its_read_for_the_release_only_within_shared_reads(
    tmp_path, home, monkeypatch
):
    """Within ``shared_reads`` (``dpate run``), the check and the flow's public check read each
    site once and the release takes that read (once: a retry reads again); outside it every
    check reads and nothing is kept."""
    from dpate.settings import resolve_site
    from dpate.site.plans import shared_reads, take_checked
    from dpate.study_check import check_study

    spec = write_spec(tmp_path, {"a": GOOD, "b": GOOD})
    init_ledgers("a", "b")
    opened = count_reads(monkeypatch)
    ctx = {s: resolve_site(str(spec), s, None) for s in ("a", "b")}
    with shared_reads():
        assert check_study(str(spec)).can_run
        assert check_study(str(spec), public=True).can_run
        assert sorted(Path(p).parent.name for p in opened) == ["a", "b"]
        held = take_checked(ctx["a"])
        assert held is not None and held.report.n_used == 60 and held.matching is not None
        assert take_checked(ctx["a"]) is None  # taken once
    assert take_checked(ctx["b"]) is None  # dropped with the block
    opened.clear()
    assert check_study(str(spec)).can_run and len(opened) == 2
    assert take_checked(ctx["a"]) is None and take_checked(ctx["b"]) is None


def test_a_bad_site_found_within_shared_reads_still_stops_the_study(tmp_path, home, monkeypatch):
    """Sharing the read does not weaken the check: a bad site's data refuses the whole study
    before any reservation, and no data of the good site is kept past the block."""
    spec = write_spec(tmp_path, {"a": GOOD, "b": BAD_DATA["unknown-level"]})
    init_ledgers("a", "b")
    opened = count_reads(monkeypatch)
    r = runner.invoke(app, ["run", str(spec)])
    assert r.exit_code == ExitCode.SITE_DATA, r.output
    assert events(home, "a") == ["CAP"] and events(home, "b") == ["CAP"]
    assert sorted(Path(p).parent.name for p in opened) == ["a", "b"]
    from dpate.site import plans

    assert plans._held is None
