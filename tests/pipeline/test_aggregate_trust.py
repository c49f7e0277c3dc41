"""The aggregator takes nothing at face value: signed reports end to end, forged, oversized and
unsigned reports rejected with a reason, ledger heads recorded in the result."""

from __future__ import annotations

import json

import pytest

from dpate.ledger import PrivacyLedger
from dpate.schemas.reports import SiteReport
from dpate.signing import SITE_KEY_ENV, SigningError, generate_key_pair, load_private_key
from tests.pipeline.studies import Site, write_study

pytestmark = [
    pytest.mark.prefect,
    pytest.mark.usefixtures("prefect_harness"),
    # collect-reports is called as a bare task here (outside a flow run)
    pytest.mark.filterwarnings("ignore:Logger 'prefect.task_runs' attempted to send logs"),
]


def test_signed_reports_end_to_end(tmp_path, monkeypatch):
    from dpate.flows.aggregate import aggregate_study
    from dpate.flows.site_release import site_release
    from dpate.settings import resolve_study
    from dpate.tasks.aggregate import collect_reports

    st = write_study(tmp_path, [Site("one", 1200), Site("two", 1000)])  # both keyed
    key = st.key_path("one")
    forger, _ = generate_key_pair("one", tmp_path / "forger")
    for k, v in st.site_env().items():
        monkeypatch.setenv(k, v)
    st.init_ledgers()
    monkeypatch.setenv(SITE_KEY_ENV, str(tmp_path / "elsewhere" / "{site}.ed25519.pem"))

    # the spec lists a key for 'one': without its private key nothing is reserved or published
    state = site_release(spec=str(st.spec), site="one", return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, SigningError) and "DPATE_SITE_KEY" in str(exc)
    assert not any(k.startswith("test-study/sites/one/") for k in st.snapshot())
    with PrivacyLedger(st.ledger_url("one")) as led:
        assert [e.kind for e in led.events("one")] == ["CAP"]
    # with it, the release is made and published, signed
    monkeypatch.setenv(SITE_KEY_ENV, st.site_env()[SITE_KEY_ENV])
    site_release(spec=str(st.spec), site="one")
    site_release(spec=str(st.spec), site="two")

    result = aggregate_study(spec=str(st.spec))
    sites = {s["site_id"]: s for s in result["sites"]}
    assert result["complete"] and {s["status"] for s in sites.values()} <= {"used", "not_used"}
    assert sites["one"]["signed"] is True and sites["two"]["signed"] is True
    for name in ("one", "two"):
        with PrivacyLedger(st.ledger_url(name)) as led:
            commit = [e for e in led.events(name) if e.kind == "COMMIT"]
        assert len(commit) == 1
        assert sites[name]["ledger_head"] == {"seq": commit[0].seq, "row_hash": commit[0].row_hash}

    # someone with write access to the bucket replaces site one's report
    (path,) = (st.published / "test-study" / "sites" / "one").glob("*.json")
    genuine = path.read_bytes()
    report = SiteReport.model_validate_json(genuine)
    ctx = resolve_study(str(st.spec))

    def status_after(data: bytes) -> dict:
        path.write_bytes(data)
        (entry,) = [e for e in collect_reports(ctx) if e["site_id"] == "one"]
        return entry

    forged = report.model_copy(update={"signature": None}).signed_with(load_private_key(forger))
    e = status_after(forged.to_json_bytes())
    assert e["status"] == "rejected" and "does not verify" in e["reason"]
    e = status_after(report.model_copy(update={"signature": None}).to_json_bytes())
    assert e["status"] == "rejected" and "unsigned" in e["reason"]
    d = json.loads(genuine)
    d["estimate"]["tau"] = 1e308
    # an edited signed report: refused for its bytes before any of its numbers is read
    e = status_after(json.dumps(d).encode())
    assert (
        e["status"] == "rejected" and "signature: the report is not canonical JSON" in e["reason"]
    )
    # the same numbers signed with the site's own key (a site gone wrong): its signature holds,
    # and the plausibility rules refuse it
    d.pop("signature")
    rogue = SiteReport.model_validate_json(json.dumps(d)).signed_with(load_private_key(key))
    e = status_after(rogue.to_json_bytes())
    assert e["status"] == "rejected" and "tau (1e+308) is outside the range" in e["reason"]
    e = status_after(b"[" + b"0," * 40_000 + b"0]")
    assert e["status"] == "rejected" and "more than the 65536 a report may be" in e["reason"]
    assert status_after(genuine)["status"] == "valid"


def _fabricate(st, ctx, like: str, site: str) -> None:
    """What someone with write access to the bucket can do without a site's key: publish a
    plausible unsigned report in ``site``'s name (site ``like``'s numbers, ``site``'s ids)."""
    from dpate.storage import Store

    (path,) = (st.published / "test-study" / "sites" / like).glob("*.json")
    genuine = SiteReport.model_validate_json(path.read_bytes())
    fake = genuine.model_copy(
        update={
            "site_id": site,
            "release_id": ctx.release_id(site),
            "signature": None,
            "ledger_head": None,
        }
    )
    target = st.published / Store.site_report_key(ctx.study_id, site, ctx.release_id(site))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(fake.to_json_bytes())


@pytest.mark.parametrize("opt_out", [False, True], ids=["signed-by-default", "opted-out"])
def test_a_fabricated_report_is_rejected_unless_the_study_opts_out(tmp_path, monkeypatch, opt_out):
    """A spec that says nothing about signing requires signed reports: an unsigned report
    fabricated for a site is rejected with its reason and the study completes without it. The
    explicit opt-out (``signing = "none"``) aggregates the same fabrication: what it costs."""
    from dpate.flows.aggregate import aggregate_study
    from dpate.flows.site_release import site_release
    from dpate.schemas.spec import load_spec
    from dpate.settings import resolve_study

    reason = "public synthetic data" if opt_out else None
    st = write_study(tmp_path, [Site("one", 1200), Site("two", 1000)], unsigned_reason=reason)
    if not opt_out:  # the spec says nothing about signing and lists no key for site two
        text = st.spec.read_text()
        block = text.index('id = "two"')
        start = text.index("public_key = ", block)
        st.spec.write_text(text[:start] + text[text.index("\n", start) + 1 :])
        assert "two" not in [s.id for s in load_spec(st.spec).sites if s.public_key]
    for k, v in st.site_env().items():
        monkeypatch.setenv(k, v)
    st.init_ledgers()
    site_release(spec=str(st.spec), site="one")  # genuine; site two releases nothing
    ctx = resolve_study(str(st.spec))
    _fabricate(st, ctx, like="one", site="two")

    result = aggregate_study(spec=str(st.spec))
    sites = {s["site_id"]: s for s in result["sites"]}
    assert sites["one"]["status"] in ("used", "not_used")
    if opt_out:
        assert sites["two"]["status"] in ("used", "not_used") and sites["two"]["signed"] is False
    else:
        assert sites["two"]["status"] == "rejected"
        assert "signed by default" in sites["two"]["reason"]
        assert "dpate site keygen two" in sites["two"]["reason"]
    with PrivacyLedger(st.ledger_url("two")) as led:
        assert [e.kind for e in led.events("two")] == ["CAP"]  # site two never released


def test_a_round_that_is_no_plain_id_writes_nowhere(tmp_path, monkeypatch):
    from dpate.flows.aggregate import aggregate_study

    st = write_study(tmp_path, [Site("one", 600)])
    state = aggregate_study(spec=str(st.spec), round="../sites/one/x", return_state=True)
    assert state.is_failed()
    assert st.snapshot() == {}
