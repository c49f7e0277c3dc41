"""The published reports anchor the site's ledger: four tamperings, each caught with no extra input
(``dpate ledger verify --against-reports`` with only the site's own configuration).

Each tampering also recomputes the hash chain (a careful attacker with write access to the
database), so ``PrivacyLedger.verify()`` alone passes: only the published heads catch it. The
aggregator's result documents repeat the heads it used, so deleting the site's newest report as
well does not hide a truncation.
"""

from __future__ import annotations

import json

import fsspec
import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from dpate.ledger import (
    GENESIS,
    PrivacyLedger,
    check_anchors,
    published_heads,
    release_id,
    row_hash,
    verify_against_reports,
)
from dpate.schemas.reports import SiteReport, read_report
from dpate.schemas.spec import StudySpec
from dpate.signing import SITE_KEY_ENV, seal_site_report
from dpate.storage import Store
from dpate_core.mechanisms.matching import smooth_dp_matching
from dpate_core.privacy import PrivacyParams
from tests.schemas.test_spec import UNSIGNED, base

ROUNDS = ("r1", "r2", "r3")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Site 'a' released three rounds; each report published with its ledger head, and the
    aggregator's result of the last round repeats that head.
    Rows: 1 CAP, then RESERVE/COMMIT pairs at (2, 3), (4, 5), (6, 7)."""
    monkeypatch.delenv(SITE_KEY_ENV, raising=False)
    spec = StudySpec.from_dict({**base(), **UNSIGNED})  # the ledger heads are the subject
    s = spec.site("a")
    url = f"sqlite:///{tmp_path / 'a.sqlite'}"
    store = Store(str(tmp_path / "published"))
    rng = np.random.default_rng(3)
    with PrivacyLedger.init(url, "a", PrivacyParams.of("3", "1e-4")) as led:
        for rnd in ROUNDS:
            rid = release_id(spec.study_id, "a", spec.spec_hash, rnd)
            led.reserve(
                release_id=rid,
                study_id=spec.study_id,
                site_id="a",
                spec_hash=spec.spec_hash,
                round=rnd,
                privacy=s.privacy,
                cap=s.lifetime_cap.params,
            )
            n = 300
            est = smooth_dp_matching(
                rng.integers(0, 2, n),
                rng.random(n),
                rng.integers(0, 6, n),
                bound=1.0,
                epsilon=s.epsilon,
                delta=s.delta,
                domain_size=6,
                rng=rng,
            )
            committed = led.commit(rid, {"estimate": est.public_fields()})
            report = SiteReport.from_estimate(est, spec=spec, site_id="a", release_id=rid)
            data = seal_site_report(report, spec, "a", committed, None).to_json_bytes()
            assert read_report(data, spec).ledger_head.seq == committed.seq
            store.publish(Store.site_report_key(spec.study_id, "a", rid), data)
    head = {"seq": committed.seq, "row_hash": committed.row_hash}  # round r3's, as aggregated
    result = {"sites": [{"site_id": "a", "release_id": rid, "status": "used", "ledger_head": head}]}
    store.publish(Store.result_key(spec.study_id, "r3"), json.dumps(result).encode())
    return url, store


def rewrite(url: str, change) -> None:
    """Apply ``change`` to the rows' content, renumber and recompute the whole chain."""
    with PrivacyLedger(url) as led:
        rows = change([e.content() for e in led.events()])
        prev, new = GENESIS, []
        for i, r in enumerate(rows, start=1):
            r = dict(r, seq=i, prev_hash=prev)
            prev = row_hash(prev, r)
            new.append(dict(r, row_hash=prev))
        with led._engine.begin() as conn:
            conn.execute(led.table.delete())
            for r in new:
                conn.execute(sa.insert(led.table).values(**r))


def check(url: str, store: Store):
    heads, bare, bad = published_heads(store, "a")
    assert [h.seq for h in heads] == [3, 5, 7] and bare == [] and bad == []
    with PrivacyLedger(url) as led:
        return led.verify(), check_anchors(led, heads)


def test_untouched_ledger_matches_every_published_head(site):
    chain, anchors = check(*site)
    assert chain.ok and anchors.ok, anchors.problems


def _drop(seq):
    return lambda rows: [r for r in rows if r["seq"] != seq]


def _edit_amount(rows):
    rows[1] = dict(rows[1], epsilon="1/10")  # row 2: the first RESERVE spent less, it says
    return rows


def _swap(rows):
    return rows[:3] + rows[5:7] + rows[3:5]  # round 3's pair moved before round 2's


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_drop(7), "the ledger has no row 7 (it ends at row 6): rows were removed"),
        (_drop(3), "published ledger row 3 with hash"),
        (_edit_amount, "published ledger row 3 with hash"),
        (_swap, "published ledger row 5 with hash"),
    ],
    ids=["last-row-deleted", "middle-row-deleted", "amount-edited", "rows-reordered"],
)
def test_tampering_is_caught_by_the_published_heads(site, change, expected):
    url, store = site
    rewrite(url, change)
    chain, anchors = check(url, store)
    assert chain.ok, chain.problems  # the recomputed chain fools verify() alone
    assert not anchors.ok
    assert any(expected in p for p in anchors.problems), anchors.problems


def test_the_aggregators_copy_still_anchors_when_the_newest_report_is_deleted(site):
    """The site's storage identity may delete its own objects: the last report gone and the
    last pair of rows removed, the result document still pins row 7."""
    url, store = site
    (study,) = store.children("")
    (newest,) = [
        k
        for k in store.site_report_keys(study, "a")
        if json.loads(store.read(k) or b"{}")["ledger_head"]["seq"] == 7
    ]
    fs, path = fsspec.core.url_to_fs(store.uri(newest))
    fs.rm(path)  # the site identity deletes its own object
    rewrite(url, lambda rows: rows[:5])
    with PrivacyLedger(url) as led:
        assert led.verify().ok
        found = verify_against_reports(led, store, "a")
    assert not found.ok
    assert [(h.seq, h.source) for h in found.heads] == [(3, "report"), (5, "report"), (7, "result")]
    assert any("the aggregator's copy" in p and "rows were removed" in p for p in found.problems)


def test_unreadable_document_and_missing_heads_are_problems(site, tmp_path):
    url, store = site
    with PrivacyLedger(url) as led:
        empty = verify_against_reports(led, Store(str(tmp_path / "elsewhere")), "a")
    assert not empty.ok and "nothing anchors this ledger" in empty.problems[-1]
    study = store.children("")[0]
    store.publish(f"{study}/sites/a/{'f' * 64}.json", b"{not json")
    with PrivacyLedger(url) as led:
        found = verify_against_reports(led, store, "a")
    assert not found.ok and found.unreadable == [store.uri(f"{study}/sites/a/{'f' * 64}.json")]
    assert any("unreadable published document" in p for p in found.problems)


@pytest.mark.parametrize(
    "doc",
    [
        b'{"sites": ' + b"[" * 100000 + b"]" * 100000 + b"}",
        b'{"sites": [{"site_id": "a", "release_id": "x", "ledger_head": {"seq": 1e999, '
        b'"row_hash": "' + b"0" * 64 + b'"}}]}',
        b'{"sites": [{"site_id": "a", "release_id": "x", "ledger_head": {"seq": '
        + b"9" * 400
        + b', "row_hash": "'
        + b"0" * 64
        + b'"}}]}',
        b'{"sites": [{"site_id": "a", "release_id": "x", "ledger_head": {"seq": -4, '
        b'"row_hash": 7}}]}',
    ],
    ids=["deep", "seq-1e999", "seq-400-digits", "wrong-types"],
)
def test_a_hostile_result_document_is_unreadable_not_a_crash(site, doc):
    """A result under the aggregator's key is read with bounded nesting and numbers: the audit
    lists it as unreadable and still checks every other head."""
    url, store = site
    study = store.children("")[0]
    store.publish(f"{study}/results/hostile.json", doc)
    with PrivacyLedger(url) as led:
        found = verify_against_reports(led, store, "a")
    assert found.unreadable == [store.uri(f"{study}/results/hostile.json")]
    assert [h.seq for h in found.heads] == [3, 5, 7]


def test_a_ledger_without_releases_needs_no_head(tmp_path):
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    with PrivacyLedger.init(url, "a", PrivacyParams.of("3", "1e-4")) as led:
        found = verify_against_reports(led, Store(str(tmp_path / "published")), "a")
    assert found.ok and found.heads == [], found.problems


@pytest.fixture
def site_env(site, monkeypatch):
    """The site's own configuration names its ledger and publication root: the command needs
    nothing else."""
    url, store = site
    monkeypatch.setenv("DPATE_LEDGER_URL", url)
    monkeypatch.setenv("DPATE_STORAGE_URL", store.url)
    monkeypatch.delenv("DPATE_SITE_CONFIG", raising=False)
    return url, store


def _verify(*extra: str):
    from dpate.cli.main import app

    return CliRunner().invoke(app, ["ledger", "verify", "a", "--against-reports", *extra])


def test_cli_verify_against_reports_passes_an_untouched_ledger(site_env):
    ok = _verify()
    assert ok.exit_code == 0, ok.output
    assert "ledger OK: 7 rows" in ok.output
    assert "matches all 3 published head(s)" in ok.output
    doc = json.loads(_verify("--json").stdout)
    assert doc["ok"] and [h["seq"] for h in doc["heads"]] == [3, 5, 7]
    assert doc["storage"] == site_env[1].url and doc["unreadable"] == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_drop(7), "rows were removed"),
        (_drop(3), "published ledger row 3 with hash"),
        (_edit_amount, "published ledger row 3 with hash"),
        (_swap, "published ledger row 5 with hash"),
    ],
    ids=["last-row-deleted", "middle-row-deleted", "amount-edited", "rows-reordered"],
)
def test_cli_verify_against_reports_catches_each_tampering(site_env, change, expected):
    from dpate.cli.main import app

    url, _ = site_env
    rewrite(url, change)
    plain = CliRunner().invoke(app, ["ledger", "verify", "a"])
    assert plain.exit_code == 0, plain.output  # the recomputed chain fools the chain check
    bad = _verify()
    assert bad.exit_code == 5  # the ledger fails verification
    assert expected in bad.output
    assert "FAILED verification against the published heads" in bad.output
    doc = json.loads(_verify("--json").stdout)
    assert not doc["ok"] and any(expected in p for p in doc["problems"])


def test_cli_verify_against_reports_needs_a_site_and_a_root(site, monkeypatch):
    from dpate.cli.main import app

    url, _ = site
    monkeypatch.delenv("DPATE_STORAGE_URL", raising=False)
    monkeypatch.delenv("DPATE_SITE_CONFIG", raising=False)
    res = CliRunner().invoke(app, ["ledger", "verify", "--ledger", url, "--against-reports"])
    assert res.exit_code == 2 and "needs the SITE" in res.output
    res = _verify("--ledger", url)
    assert res.exit_code == 2 and "--storage URL" in res.output
    assert "anchor-check" not in CliRunner().invoke(app, ["ledger", "--help"]).output


def test_cli_site_keygen(tmp_path):
    from dpate.cli.main import app
    from dpate.signing import load_private_key, public_key_text

    res = CliRunner().invoke(app, ["site", "keygen", "north", "--out", str(tmp_path / "k")])
    assert res.exit_code == 0, res.output
    pem = tmp_path / "k" / "north.ed25519.pem"
    assert pem.stat().st_mode & 0o777 == 0o600
    assert res.stdout.strip().splitlines()[-1] == public_key_text(load_private_key(pem))
    again = CliRunner().invoke(app, ["site", "keygen", "north", "--out", str(tmp_path / "k")])
    assert again.exit_code == 8 and "already exists" in again.output  # settings: the key is there
    bad = CliRunner().invoke(app, ["site", "keygen", "../x", "--out", str(tmp_path / "k")])
    assert bad.exit_code == 2 and "site id" in bad.output  # usage
