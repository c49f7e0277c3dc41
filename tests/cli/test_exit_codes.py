"""Every command's exit code, per situation, is the one docs/reference/pipeline.md's table documents, and its
message shows no Python ``None`` or repr. None of these cases starts Prefect."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpate.cli.main import app
from tests.cli.test_run_preflight import BAD_DATA, GOOD, init_ledgers, write_spec

runner = CliRunner()
DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "pipeline.md"


def documented() -> dict[tuple[str, str], int]:
    """The per-command table of docs/reference/pipeline.md: (command, situation) -> exit code."""
    text = DOCS.read_text(encoding="utf-8")
    table = text[text.index("| command | situation | exit |") :]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        command, situation, code = (c.strip() for c in line.strip("|").split("|"))
        rows[(command.strip("`"), situation)] = int(code)
    return rows


def _bad_spec(tmp: Path) -> str:
    spec = tmp / "bad.toml"
    spec.write_text('spec_version = 1\nstudy_id = "x"\n', encoding="utf-8")
    return str(spec)


def _unsigned_spec(tmp: Path) -> str:
    """A valid spec whose site ``a`` lists no public key (reports are signed by default)."""
    spec = Path(_good_spec(tmp))
    text = "".join(
        ln for ln in spec.read_text(encoding="utf-8").splitlines(True) if "public_key" not in ln
    )
    spec.write_text(text, encoding="utf-8")
    return str(spec)


def _good_spec(tmp: Path, b: str = GOOD) -> str:
    return str(write_spec(tmp, {"a": GOOD, "b": b}))


def _ledger(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'nowhere.sqlite'}"


def _released_under_another_spec(tmp: Path) -> list[str]:
    from dpate.ledger import PrivacyLedger
    from dpate.settings import resolve_site

    spec = _good_spec(tmp)
    init_ledgers("a", "b")
    ctx = resolve_site(spec, "a", None)
    with PrivacyLedger(ctx.ledger_url) as led:
        led.reserve(
            release_id=ctx.rid,
            study_id=ctx.study_id,
            site_id="a",
            spec_hash=ctx.spec.spec_hash,
            round=ctx.round,
            privacy=ctx.spec.release_cost("a"),
            cap=ctx.spec.site("a").lifetime_cap.params,
        )
    Path(spec).write_text(Path(spec).read_text().replace('epsilon = "1"', 'epsilon = "1/2"', 1))
    return ["run", spec]


def _ready(tmp: Path) -> list[str]:
    spec = _good_spec(tmp)
    init_ledgers("a", "b")
    return ["check", spec]


CASES: dict[tuple[str, str], Callable[[Path], list[str]]] = {
    ("run", "invalid spec"): lambda t: ["run", _bad_spec(t)],
    ("run --init-ledgers", "invalid spec"): lambda t: ["run", _bad_spec(t), "--init-ledgers"],
    ("run", "a site's ledger missing"): lambda t: ["run", _good_spec(t)],
    ("run", "one site's data invalid"): lambda t: [
        "run",
        _good_spec(t, BAD_DATA["unknown-level"]),
        "--init-ledgers",
    ],
    ("run", "round released under another spec"): _released_under_another_spec,
    ("site-release", "invalid spec"): lambda t: ["site-release", _bad_spec(t), "--site", "a"],
    ("site-release", "unknown site id"): lambda t: ["site-release", _good_spec(t), "--site", "z"],
    ("aggregate", "invalid spec"): lambda t: ["aggregate", _bad_spec(t)],
    ("report", "invalid spec"): lambda t: ["report", _bad_spec(t)],
    ("report", "no result published"): lambda t: [
        "report",
        _good_spec(t),
        "-o",
        str(t / "r.html"),
    ],
    ("check", "invalid spec"): lambda t: ["check", _bad_spec(t)],
    ("check", "data invalid, no ledger"): lambda t: ["check", _good_spec(t, BAD_DATA["one-row"])],
    ("check", "data ready, no ledger"): lambda t: ["check", _good_spec(t)],
    ("check", "ready"): _ready,
    ("plan", "invalid spec"): lambda t: ["plan", _bad_spec(t)],
    ("ledger init", "malformed epsilon"): lambda t: [
        "ledger",
        "init",
        "a",
        "--epsilon",
        "abc",
        "--delta",
        "1e-5",
    ],
    ("ledger show", "ledger missing"): lambda t: ["ledger", "show", "a"],
    ("ledger set-cap", "ledger missing"): lambda t: [
        "ledger",
        "set-cap",
        "a",
        "--epsilon",
        "2",
        "--delta",
        "1e-5",
        "--reason",
        "more",
    ],
    ("ledger verify", "neither SITE nor --ledger"): lambda t: ["ledger", "verify"],
    ("ledger verify", "ledger missing"): lambda t: ["ledger", "verify", "--ledger", _ledger(t)],
    ("ledger verify --against-reports", "no publication root"): lambda t: (
        init_ledgers("a"),
        ["ledger", "verify", "a", "--against-reports"],
    )[1],
    ("ledger init-commands", "invalid spec"): lambda t: ["ledger", "init-commands", _bad_spec(t)],
    ("site keygen", "site id that cannot name a file"): lambda t: ["site", "keygen", "a/../b"],
    ("site keygen", "a key file already there"): lambda t: (
        runner.invoke(app, ["site", "keygen", "a", "--out", str(t)]),
        ["site", "keygen", "a", "--out", str(t)],
    )[1],
    ("site approve", "spec without the site's public key"): lambda t: [
        "site",
        "approve",
        _unsigned_spec(t),
        "--site",
        "a",
    ],
}


def test_every_documented_case_is_tested():
    assert set(documented()) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda c: f"{c[0]}: {c[1]}")
def test_exit_code_as_documented(tmp_path, home, case):
    argv = CASES[case](tmp_path)
    r = runner.invoke(app, argv)
    assert r.exit_code == documented()[case], r.output
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), repr(
        r.exception
    )
    # no Python None or repr in what the user reads
    assert not re.search(r"\bNone\b|<[a-z_.]+ object at|\w+Error\(", r.output), r.output


def test_a_publication_conflict_is_7_from_run_as_from_aggregate(capsys):
    from dpate.cli.study import study_failed
    from dpate.errors import ExitCode

    error = (
        "StudyIncompleteError: study s round r1: PublicationConflictError: results/r1.json "
        "already exists with different content"
    )
    assert study_failed(error, []).exit_code == ExitCode.STORAGE
    err = capsys.readouterr().err
    assert "error: study failed" in err and "PublicationConflictError" not in err
