"""No unintended change: ``dpate demo``'s study publishes the same bytes as the committed golden
hashes, for every published byte (reports, results, ledgers) with the same inputs and seeds. A
change that is meant re-records them with ``python -m pytest tests/pipeline/test_published_bytes.py
--regenerate`` (tests/golden.py), in a commit of its own that says what changed.

A release is random by design: its noise comes from the operating system's secure source through
OpenDP and Algorithm 1's record order is a secure random permutation; neither can be seeded, the
ledger stamps each row with the time, and the demo makes each site's signing key at random. So the
test replaces exactly those four sources, at the one place each enters, with deterministic
stand-ins, and nothing else:

- the noise: :func:`dpate_core.release.draw_once` draws through its simulation path from a numpy
  generator seeded by ``(SEED, N)`` (the same noise sites, kinds and scales as the secure path);
- the record order: :func:`dpate.site.plans.record_order` ranks each stratum's records by their place
  in a permutation of the ``N`` records seeded the same way (the order the records path would
  present them in: :class:`dpate.schemas.site_data.PermutationOrder`);
- the clock: :mod:`dpate.ledger` reads a fixed UTC time (the rows' ``created_at``, which the hash
  chain and the reports' ``created_at`` carry);
- the sites' signing keys: ``dpate demo`` makes each site's key when it has none, so the test
  writes keys from fixed seeds first (Ed25519 signatures are deterministic given the key).

The software version in the reports and the result is fixed too (``software_version`` in
:mod:`dpate.tasks.site` and :mod:`dpate.tasks.aggregate`), so a version bump alone does not change the bytes.
Everything else is the real command line (``dpate ledger init``, then ``dpate demo`` with its
default data seed) on the session's Prefect test server. The ledgers are created by ``dpate
ledger init`` first because ``dpate demo`` would record its absolute spec path in the CAP row's
reason (which feeds every later row hash); nothing else published names the output folder, so no
byte is normalised.

Compared: every file ``dpate demo`` publishes (the three site reports and the study result, byte
for byte) and every row of the three ledgers (all columns, as canonical JSON lines). Not compared:
``report.html`` (its forest plot is a PNG whose bytes depend on matplotlib and its fonts).

**When the hashes change.** A different hash means some published byte differs for the same
inputs: a report field, a number's last digit, a key's order, a ledger column. If that is an
intended change (a new report field, a new schema version), say so in the commit and regenerate::

    python -m pytest tests/pipeline/test_published_bytes.py --regenerate

which rewrites ``tests/pipeline/golden/demo_study.json``. A failing run leaves the published files
and the ledger rows under its ``tmp_path`` (``actual/``) to diff with a run of the previous
commit. The hashes also depend on numpy's floating-point results (a new numpy, or another CPU's
vector instructions, can move a last digit): look at the diff before regenerating for that reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from dpate.cli.demo_study import DEMO_SITES
from dpate.cli.main import app
from dpate.schemas.site_data import PermutationOrder

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("prefect_harness")]

GOLDEN = Path(__file__).parent / "golden" / "demo_study.json"
SEED = 20261123
FIXED_NOW = datetime(2026, 1, 31, 12, 0, 0, tzinfo=UTC)


class _FixedClock(datetime):
    """``datetime`` whose ``now`` is :data:`FIXED_NOW` (the ledger's only use of the clock)."""

    @classmethod
    def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
        return FIXED_NOW if tz is None else FIXED_NOW.astimezone(tz)


@pytest.fixture
def deterministic_release(monkeypatch):
    """The secure noise, the secure record order and the clock replaced by seeded stand-ins."""
    import dpate.ledger._privacy_ledger
    import dpate.site.plans
    import dpate.tasks.aggregate
    import dpate.tasks.site
    import dpate_core.release as core_release

    secure_draw = core_release.draw_once

    def seeded_draw(plan: Any, rng: Any = None) -> dict[str, float]:
        assert rng is None, "a release draws without a generator"
        return secure_draw(plan, np.random.default_rng([SEED, plan.n]))

    monkeypatch.setattr(core_release, "draw_once", seeded_draw)
    monkeypatch.setattr(
        dpate.site.plans,
        "record_order",
        lambda n: PermutationOrder(np.random.default_rng([SEED, n]).permutation(n)),
    )
    monkeypatch.setattr(dpate.ledger._privacy_ledger, "datetime", _FixedClock)
    monkeypatch.setattr(dpate.tasks.site, "software_version", lambda: "golden")
    monkeypatch.setattr(dpate.tasks.aggregate, "software_version", lambda: "golden")


def _published(out: Path) -> dict[str, bytes]:
    """Every file under ``<out>/published``, as published."""
    root = out / "published"
    return {
        f"published/{p.relative_to(root).as_posix()}": p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _ledger_rows(out: Path) -> dict[str, bytes]:
    """Each site's ledger rows, every column, one canonical JSON line per row."""
    from dpate.ledger import PrivacyLedger

    rows = {}
    for site in DEMO_SITES:
        with PrivacyLedger(f"sqlite:///{out / 'ledgers' / f'{site.id}.sqlite'}") as led:
            lines = [json.dumps(dataclasses.asdict(e), sort_keys=True) for e in led.events()]
        rows[f"ledgers/{site.id}.jsonl"] = "\n".join(lines).encode()
    return rows


def _seeded_site_keys(out: Path) -> None:
    """Each demo site's signing key from a fixed seed, where ``dpate demo`` keeps it (it makes a
    random one only when the file is absent): the signatures and the spec's public keys, and so
    the spec hash, are then the same on every run."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from dpate.cli.demo_study import demo_key_path

    for site in DEMO_SITES:
        seed = hashlib.sha256(f"{SEED}:{site.id}".encode()).digest()
        pem = Ed25519PrivateKey.from_private_bytes(seed).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        path = demo_key_path(out, site.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pem)
        path.chmod(0o600)


def _run_demo(out: Path) -> None:
    runner = CliRunner()
    _seeded_site_keys(out)
    for site in DEMO_SITES:
        ledger = str(out / "ledgers" / f"{site.id}.sqlite")
        args = ["ledger", "init", site.id, "--epsilon", site.cap, "--delta", "1e-4"]
        r = runner.invoke(app, [*args, "--ledger", ledger])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["demo", "--out", str(out)])
    assert r.exit_code == 0, r.output


def test_demo_study_publishes_the_golden_bytes(tmp_path, deterministic_release, golden):
    out = tmp_path / "demo"
    _run_demo(out)
    files = {**_published(out), **_ledger_rows(out)}
    assert len([k for k in files if k.endswith(".json")]) == len(DEMO_SITES) + 1  # reports, result
    actual = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
    stored = golden.text(GOLDEN, json.dumps(actual, indent=2) + "\n")
    for name, data in files.items():  # left for a diff when the hashes differ
        (tmp_path / "actual" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "actual" / name).write_bytes(data)
    hashes = json.loads(stored)
    changed = sorted(k for k in hashes.keys() | actual.keys() if hashes.get(k) != actual.get(k))
    assert not changed, golden.differs(
        f"published bytes differ from {GOLDEN.name} in {changed}; the files are under "
        f"{tmp_path / 'actual'} (see this module's docstring before regenerating)"
    )
