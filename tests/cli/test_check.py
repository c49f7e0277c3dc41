"""`dpate check`: public facts, operator-only counts, feasibility and the ledger, read-only."""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dpate.cli.main import app
from dpate.errors import ExitCode
from tests.cli.conftest import public_key_line

runner = CliRunner()


def write_study(root: Path, sites: dict[str, dict], **top: str) -> Path:
    """CSV sites; ``sites[id]`` may set n, all_treated, one_stratum_per_arm, bad_outcome and
    declared (the record count the spec declares for the site)."""
    rng = np.random.default_rng(5)
    blocks = []
    for site, opts in sites.items():
        n = opts.get("n", 100)
        level = rng.integers(0, 3, n)
        w = (rng.random(n) < 0.5).astype(int)
        if opts.get("all_treated"):
            w[:] = 1
        if opts.get("one_stratum_per_arm"):
            level = np.where(w == 1, 0, 1)
        y = [f"{v:.4f}" for v in rng.random(n)]
        if opts.get("bad_outcome"):
            y[2] = "oops-5521"
        folder = root / site
        folder.mkdir(parents=True, exist_ok=True)
        rows = ["w,y,x"] + [f"{w[i]},{y[i]},{level[i]}" for i in range(n)]
        (folder / "data.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        blocks.append(
            f'\n[[sites]]\nid = "{site}"\ndata = "{site}/data.csv"\nepsilon = "1"\n'
            f'delta = "1e-5"\nlifetime_cap = {{ epsilon = "2", delta = "1e-4" }}\n'
            + (f"n = {opts['declared']}\n" if "declared" in opts else "")
            + public_key_line(site)
        )
    head = {
        "design": '"observational"',
        "estimator": '"smooth_matching"',
        **top,
    }
    spec = root / "study.toml"
    spec.write_text(
        'spec_version = 1\nstudy_id = "check-study"\nreports = "published"\n'
        + "".join(f"{k} = {v}\n" for k, v in head.items())
        + '\n[treatment]\ncolumn = "w"\n\n[outcome]\ncolumn = "y"\nbound = 1.0\n\n'
        '[[covariates]]\nkind = "categorical"\ncolumn = "x"\nlevels = [0, 1, 2]\n'
        + "".join(blocks),
        encoding="utf-8",
    )
    return spec


def test_check_prints_public_facts_and_operator_counts_and_creates_no_ledger(tmp_path, home):
    spec = write_study(tmp_path, {"a": {"n": 80}})
    r = runner.invoke(app, ["check", str(spec), "--site", "a"])
    assert r.exit_code == ExitCode.LEDGER, r.output  # no ledger yet: a release would be refused
    out = r.output
    assert "|X| = 3" in out and "publishes exactly: N" in out and "N_t" not in out
    assert "N after the missing-value policy: 80" in out
    assert "operator only, not private" in out and "80 rows read" in out
    assert "epsilon 1, delta 1/100000" in out and "no ledger at" in out
    assert not (home / "ledgers").exists()  # never created by a check

    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    url = f"sqlite:///{home / 'ledgers' / 'a.sqlite'}"
    PrivacyLedger.init(url, "a", PrivacyParams.of("2", "1e-4"), reason="test").close()
    r = runner.invoke(app, ["check", str(spec), "--site", "a"])
    assert r.exit_code == 0, r.output
    assert "remaining epsilon 2, delta 1/10000" in r.output and "nothing was spent" in r.output
    with PrivacyLedger(url) as led:  # read-only: nothing reserved
        assert led.spend("a").spent == PrivacyParams.of(0, 0)


def test_check_reports_budget_past_the_cap(tmp_path, home):
    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    spec = write_study(tmp_path, {"a": {}})
    url = f"sqlite:///{home / 'ledgers' / 'a.sqlite'}"
    with PrivacyLedger.init(url, "a", PrivacyParams.of("2", "1e-4"), reason="t") as led:
        led.reserve(
            release_id="r" * 64,
            study_id="other",
            site_id="a",
            spec_hash="0" * 64,
            round="1",
            privacy=PrivacyParams.of("3/2", "1e-5"),
            cap=PrivacyParams.of("2", "1e-4"),
        )
    r = runner.invoke(app, ["check", str(spec)])
    assert r.exit_code == ExitCode.LEDGER, r.output
    assert "exceeds what the ledger has left" in r.output


def test_check_finds_data_and_feasibility_problems_per_site(tmp_path, home):
    spec = write_study(
        tmp_path,
        {
            "bad": {"bad_outcome": True},
            "onearm": {"all_treated": True},
            "nosupport": {"one_stratum_per_arm": True},
        },
    )
    r = runner.invoke(app, ["check", str(spec)])
    assert r.exit_code == ExitCode.SITE_DATA, r.output  # data problems come first, then ledgers
    assert r.output.index("data and settings") < r.output.index("ledger state")
    out = r.output
    assert "error: site bad: invalid site data" in out and "column 'y'" in out
    assert "oops" not in out and "5521" not in out
    assert "error: site onearm: release not feasible: empty control arm" in out
    assert "error: site nosupport: release not feasible: no common support" in out


def test_check_says_when_arm_sizes_are_published_and_skips_unreachable_data(tmp_path, home):
    spec = write_study(
        tmp_path,
        {"a": {}},
        design='"randomized"',
        estimator='"dim"',
        arm_sizes_public="true",
    )
    text = spec.read_text().replace('id = "a"', 'id = "a"', 1)
    text += (
        '\n[[sites]]\nid = "far"\ndata = "far/none.csv"\nepsilon = "1"\n'
        'lifetime_cap = { epsilon = "2" }\n' + public_key_line("far")
    )
    spec.write_text(text, encoding="utf-8")
    r = runner.invoke(app, ["check", str(spec)])
    assert "N_t, N_c (public design facts)" in r.output
    assert "site far" in r.output and "skipped" in r.output
    r = runner.invoke(app, ["check", str(spec), "--site", "far"])
    assert r.exit_code == ExitCode.SITE_DATA and "no data at" in r.output
    r = runner.invoke(
        app, ["check", str(spec), "--site", "far", "--data", str(tmp_path / "a" / "data.csv")]
    )
    assert "N after the missing-value policy: 100" in r.output


def test_check_spec_error_and_no_prefect_import(tmp_path, home):
    spec = write_study(tmp_path, {"a": {}}, arm_sizes_public="true")  # refused: observational
    r = runner.invoke(app, ["check", str(spec)])
    assert r.exit_code == ExitCode.SPEC and "arm_sizes_public" in r.output
    good = write_study(tmp_path / "g", {"a": {}})
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom dpate.cli.main import app\n"
        f"r = CliRunner().invoke(app, ['check', {str(good)!r}])\n"
        "assert 'prefect' not in sys.modules, 'prefect imported'\nprint('exit', r.exit_code)\n"
    )
    env = {**os.environ, "DPATE_HOME": str(home)}
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert p.returncode == 0, p.stderr
    assert f"exit {int(ExitCode.LEDGER)}" in p.stdout


def test_check_refuses_what_the_ledger_refuses_a_pure_release_under_a_lowered_delta_cap(
    tmp_path, home
):
    """A cap lowered below the delta already spent: a pure release asks no delta, yet the ledger
    refuses it (spent + ask passes the cap); the check uses the same rule (dpate_core.privacy)."""
    from dpate.ledger import BudgetExceededError, PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    spec = write_study(tmp_path, {"a": {}}, estimator='"adjusted"')
    url = f"sqlite:///{home / 'ledgers' / 'a.sqlite'}"
    with PrivacyLedger.init(url, "a", PrivacyParams.of("2", "1e-3"), reason="t") as led:
        led.reserve(
            release_id="r" * 64,
            study_id="other",
            site_id="a",
            spec_hash="0" * 64,
            round="1",
            privacy=PrivacyParams.of("1/2", "1e-3"),
            cap=PrivacyParams.of("2", "1e-3"),
        )
        led.set_cap("a", PrivacyParams.of("2", "1e-4"), "lowered by the board")  # the spec's cap
    r = runner.invoke(app, ["check", str(spec), "--site", "a"])
    assert r.exit_code == ExitCode.LEDGER, r.output
    assert "exceeds what the ledger has left (epsilon 3/2, delta 0)" in r.output
    assert "privacy ledger cap" not in r.output  # the caps agree; only the budget refuses
    with PrivacyLedger(url) as led, pytest.raises(BudgetExceededError):
        led.reserve(
            release_id="s" * 64,
            study_id="check-study",
            site_id="a",
            spec_hash="0" * 64,
            round="1",
            privacy=PrivacyParams.of("1", "0"),
            cap=PrivacyParams.of("2", "1e-4"),
        )


def test_check_names_a_site_without_a_key_and_keygen_fixes_it(tmp_path, home):
    spec = write_study(tmp_path, {"a": {}})
    keyless = spec.read_text().replace(public_key_line("a"), "")
    spec.write_text(keyless, encoding="utf-8")
    r = runner.invoke(app, ["check", str(spec), "--site", "a"])
    assert r.exit_code == ExitCode.SETTINGS, r.output
    assert "signed by default" in r.output and "dpate site keygen a" in r.output
    assert 'signing = "none"' in r.output  # and the opt-out, by name

    # the site's key where a local run looks, and its public half in the spec (--spec)
    (home / "keys" / "a.ed25519.pem").unlink()
    r = runner.invoke(app, ["site", "keygen", "a", "--spec", str(spec)])
    assert r.exit_code == 0, r.output
    assert "the site's [[sites]] entry of the spec" in r.output  # printed as written, not as markup
    public = r.stdout.strip().splitlines()[-1]
    # the line to paste and where (rich markup would have eaten "[[sites]]")
    assert "[[sites]] entry" in r.output and f'public_key = "{public}"   # site a' in r.output
    assert (home / "keys" / "a.ed25519.pem").stat().st_mode & 0o777 == 0o600
    assert spec.read_text() == keyless.replace('id = "a"\n', f'id = "a"\npublic_key = "{public}"\n')
    r = runner.invoke(app, ["check", str(spec), "--site", "a"])
    assert "signed with" in r.output and "signing key" not in r.output, r.output
    # a second key for the site, or a site the spec does not have: refused, no key file made
    for site in ("a", "zz"):
        r = runner.invoke(app, ["site", "keygen", site, "--spec", str(spec), "--out", str(home)])
        assert r.exit_code == 8 and not (home / f"{site}.ed25519.pem").exists(), r.output

    # the explicit opt-out: no key needed, and check says what it costs
    spec.write_text(
        keyless.replace(
            'reports = "published"\n',
            'reports = "published"\nsigning = "none"\nunsigned_reason = "teaching data"\n',
        )
    )
    r = runner.invoke(app, ["check", str(spec), "--site", "a"])
    assert "signing key" not in r.output and "unsigned (signing" in r.output, r.output
    assert "teaching data" in r.output


def test_check_names_the_balance_table_by_its_spec_table(tmp_path, home):
    """The spend line of a ``[balance]`` study names the table literally: Rich read
    ``[balance]`` as a style tag and printed ``()``."""
    spec = write_study(tmp_path, {"a": {"n": 80}})
    spec.write_text(spec.read_text() + '\n[balance]\nepsilon = "1/10"\n', encoding="utf-8")
    r = runner.invoke(app, ["check", str(spec), "--site", "a"])
    assert "the covariate-balance table ([balance]) would spend: epsilon 1/10" in r.output, r.output


EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_dpate_plan_runs_on_every_shipped_example(name, home):
    """Each example a reader copies plans; the propensity one as study-spec.md's "Propensity
    example" walks through it: K 5 and two fifths to the model (its smallest n x epsilon is
    1,400), a binary outcome's three parts, and its target reached at the plan's defaults."""
    import json

    from dpate.schemas.spec import load_spec

    sizes = [f"--n={s.id}=1000" for s in load_spec(EXAMPLES / name).sites if s.n is None]
    args = ["plan", str(EXAMPLES / name), *sizes, "--outcome-sd", "0.45", "--json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert plan["combined"]["width"] > 0
    if name == "observational-propensity-mortality.toml":
        assert plan["variant"] == "K = 5 bands, model share 2/5"
        assert plan["recommendation"]["split"] == ["2/5", "3/5"]
        assert plan["combined"]["width"] < plan["target_width"] == 0.12
        # its balance table at epsilon 1/10 (5 covariates: scale 100): a two-level covariate's
        # SMD carries noise of sd at least 4 sqrt(2) 100 / N, 0.24 at the site of 2,400; a
        # numeric one's over ten bins' midpoints, at sd a third of the half-width, sqrt(3.3 x
        # 9 / 2) = 3.85 times that (the extreme bins' noise); 0.05 at every site needs the
        # south's 1.6 brought down 32-fold
        (note,) = [x for x in plan["notes"] if x.startswith("balance table at epsilon 1/10")]
        assert (
            "the patients carries noise of sd at least north 0.24, central 0.3, south 0.4," in note
        )
        assert "age north 0.91, central 1.1, south 1.6; aps north 0.91" in note
        assert "about epsilon 3.11 for the table" in note
        # stated: age spread over its whole bounds (sd 41 = the half-width) is 3 times less noisy
        stated = runner.invoke(app, [*args, "--covariate-sd", "age=41"])
        (note,) = [x for x in json.loads(stated.output)["notes"] if x.startswith("balance")]
        assert "age north 0.3, central 0.38, south 0.52; aps north 0.91" in note


def _two_site_spec(root: Path, estimator: str, n: int, covariates: str) -> Path:
    """A study spec of ``estimator`` with two sites declaring ``n`` records each and the
    ``[[covariates]]`` blocks ``covariates``."""
    sites = "".join(
        f'\n[[sites]]\nid = "{s}"\ndata = "{s}.csv"\nn = {n}\nepsilon = "1"\n'
        f'lifetime_cap = {{ epsilon = "2" }}\n'
        for s in ("a", "b")
    )
    spec = root / "study.toml"
    spec.write_text(
        'spec_version = 1\nstudy_id = "plan-study"\nreports = "published"\n'
        f'design = "observational"\nestimator = "{estimator}"\nsigning = "none"\n'
        'unsigned_reason = "test"\n\n[treatment]\ncolumn = "w"\n\n[outcome]\ncolumn = "y"\n'
        "bound = 1.0\n" + covariates + sites,
        encoding="utf-8",
    )
    return spec


def _propensity_spec(root: Path, n: int, binary_covariates: int) -> Path:
    """A propensity study spec of two sites declaring ``n`` records each, with
    ``binary_covariates`` two-level covariates and two numeric ones with bounds."""
    covs = "".join(
        f'\n[[covariates]]\nkind = "categorical"\ncolumn = "c{j}"\nlevels = [0, 1]\n'
        for j in range(binary_covariates)
    )
    covs += "".join(
        f'\n[[covariates]]\nkind = "numeric"\ncolumn = "v{j}"\nlower = 0\nupper = 1\n'
        for j in range(2)
    )
    return _two_site_spec(root, "propensity", n, covs)


def test_plan_says_when_the_propensity_model_is_mostly_noise(tmp_path, home):
    """Few filled bands (IHDP's sites: 25 covariates, a few hundred records) make a note that
    says what it means and what gives the model bands; a site the model resolves gets none."""
    import json

    small = json.loads(
        runner.invoke(app, ["plan", str(_propensity_spec(tmp_path, 300, 23)), "--json"]).output
    )
    (note,) = [x for x in small["notes"] if x.startswith("propensity model mostly noise")]
    assert "at a, b:" in note and "shorter adjustment set" in note
    (tmp_path / "big").mkdir()
    big = json.loads(
        runner.invoke(
            app, ["plan", str(_propensity_spec(tmp_path / "big", 5000, 3)), "--json"]
        ).output
    )
    assert not [x for x in big["notes"] if x.startswith("propensity model mostly noise")]


def test_plan_says_when_the_epsilon_a_target_needs_would_change_the_studys_choice(tmp_path, home):
    """The epsilon search keeps the spec's "auto" choice (K, model share), read from n x
    epsilon at the spec's epsilon; at the epsilon it finds the rule may choose otherwise, and
    the plan says so. A target the spec's epsilon nearly reaches makes no such note."""
    import json

    spec = str(_propensity_spec(tmp_path, 1000, 3))

    def plan(target: str) -> dict:
        args = ["plan", spec, "--target-width", target, "--outcome-sd", "0.3", "--json"]
        return json.loads(runner.invoke(app, args).output)

    far = plan("0.08")
    assert all(Fraction(e) * 1000 >= 1500 for e in far["epsilon_needed"].values())
    (note,) = [x for x in far["notes"] if x.startswith("at the epsilon per site the target")]
    assert "would choose K = 5 bands, model share 1/2" in note and "model share 2/5" in note
    near = plan("0.15")
    assert not [x for x in near["notes"] if x.startswith("at the epsilon per site the target")]


def _sparse_adjusted_spec(root: Path, n: int) -> Path:
    """An adjusted study of two sites declaring ``n`` records each, over 8 x 16 = 128 strata."""
    covs = "".join(
        f'\n[[covariates]]\nkind = "categorical"\ncolumn = "{name}"\nlevels = {list(range(k))}\n'
        for name, k in (("x1", 8), ("x2", 16))
    )
    return _two_site_spec(root, "adjusted", n, covs)


def test_check_and_the_run_say_when_fixed_effects_will_rarely_resolve(tmp_path, home):
    """Sites of 150 records with 128 strata at eps 1 (IHDP's 373 until stop 43, whose quieter
    histogram counts resolve a fifth of them): fixed effects resolves in about 5% of releases and
    those under-cover. `dpate check` says so before anything is spent (from the declared n, as
    `dpate plan` does), and so does the run's pre-spend check (its notes go to the run's log);
    sites of 20,000 records get no note."""
    from dpate.settings import load_study_spec
    from dpate.study_check import check_study, design_cautions, design_notes

    spec = _sparse_adjusted_spec(tmp_path, 150)
    r = runner.invoke(app, ["check", str(spec)])
    # with the fixed-effects queries ("auto": 0.6 records per cell), 4% (5% without them)
    assert "caution: sites a, b: fixed effects is predicted to resolve its estimate in 4%" in (
        " ".join(r.output.split())
    )
    cautions = design_cautions(load_study_spec(str(spec)), operator=True)
    (caution,) = cautions
    assert "under-cover" in caution and "--occupied-strata" in caution
    notes = design_notes(load_study_spec(str(spec)))  # a caution, not a note; the one note
    assert [n for n in notes if "resolve" in n] == []  # is the queries' --propensity-sd
    assert check_study(str(spec), public=True).notes == cautions + notes
    (tmp_path / "big").mkdir()
    big = _sparse_adjusted_spec(tmp_path / "big", 20_000)
    assert design_cautions(load_study_spec(str(big)), operator=True) == []
    assert "fixed effects is predicted" not in runner.invoke(app, ["check", str(big)]).output
