"""Small studies written to a temporary folder for the pipeline tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

LEVELS = 8


@dataclass
class Site:
    id: str
    n: int
    epsilon: str = "1"
    cap: str = "3"
    bad_level: str | None = None  # a marker value put in the covariate of a few rows (invalid)
    bad_rows: tuple[int, ...] = (3, 11, 17)  # where the marker goes


@dataclass
class Study:
    spec: Path
    root: Path
    outcomes: dict[str, np.ndarray] = field(default_factory=dict)
    markers: list[str] = field(default_factory=list)
    caps: dict[str, str] = field(default_factory=dict)

    @property
    def published(self) -> Path:
        return self.root / "published"

    def ledger_url(self, site: str) -> str:
        return f"sqlite:///{self.root / 'ledgers' / f'{site}.sqlite'}"

    def operator_log(self, site: str) -> Path:
        return self.root / "logs" / f"{site}.log"

    #: where the sites' private signing keys are: ``$DPATE_HOME/keys`` when the study was
    #: written, where a local run looks (``dpate site keygen SITE``)
    keys: Path | None = None

    def key_path(self, site: str) -> Path:
        """The site's private report-signing key (its public half is in the spec)."""
        assert self.keys is not None
        return self.keys / f"{site}.ed25519.pem"

    def site_env(self) -> dict[str, str]:
        """The sites' own configuration for this study (what a site's worker environment holds)."""
        return {
            "DPATE_LEDGER_URL": f"sqlite:///{self.root / 'ledgers'}/{{site}}.sqlite",
            "DPATE_SITE_LOG": str(self.root / "logs" / "{site}.log"),
            "DPATE_SITE_KEY": str(self.key_path("{site}")),
        }

    def init_ledgers(self, *sites: str) -> None:
        """``dpate ledger init`` for each site (default: all), with the spec's cap."""
        from dpate.ledger import PrivacyLedger
        from dpate_core.privacy import PrivacyParams

        for site in sites or tuple(self.caps):
            cap = PrivacyParams.of(self.caps[site], "1e-4")
            PrivacyLedger.init(self.ledger_url(site), site, cap).close()

    def snapshot(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.published)): p.read_bytes()
            for p in sorted(self.published.rglob("*"))
            if p.is_file()
        }


def write_study(
    root: Path,
    sites: list[Site],
    *,
    study_id: str = "test-study",
    require_all_sites: bool = False,
    seed: int = 7,
    unsigned_reason: str | None = None,
) -> Study:
    """An observational study (SmoothDPMatching, MVAgg) whose outcomes have many distinctive
    digits, so a leak of any raw value is recognisable. Each site gets a signing key where a
    local run looks (``$DPATE_HOME/keys``, made once: :meth:`Study.key_path`) and its public_key
    in the spec, as reports are signed by default;
    ``unsigned_reason`` writes the opt-out (``signing = "none"``) and no keys instead."""
    from dpate.settings import dpate_home
    from dpate.signing import ensure_private_key

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    study = Study(root / "study.toml", root, keys=dpate_home() / "keys")
    site_blocks = []
    for s in sites:
        level = rng.integers(0, LEVELS, s.n)
        w = (rng.random(s.n) < 0.3 + 0.05 * level).astype(np.int8)
        y = np.clip(0.1 + 0.05 * level + 0.3 * w + rng.normal(0, 0.1, s.n), 0.0, 1.0)
        y = y + rng.uniform(1e-9, 1e-8, s.n)  # many distinctive digits
        y = np.minimum(y, 0.999999)
        study.outcomes[s.id] = y
        study.caps[s.id] = s.cap
        levels = [str(v) for v in level]
        if s.bad_level is not None:
            for j in s.bad_rows:
                levels[j] = s.bad_level
            study.markers.append(s.bad_level)
        folder = root / "sites" / s.id
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.table({"treated": w, "outcome": y, "stratum": levels}), folder / "records.parquet"
        )
        site_blocks.append(
            f'''
[[sites]]
id = "{s.id}"
data = "sites/{s.id}/records.parquet"
epsilon = "{s.epsilon}"
delta = "1e-5"
lifetime_cap = {{ epsilon = "{s.cap}", delta = "1e-4" }}
'''
        )
        if unsigned_reason is None:
            site_blocks[-1] += f'public_key = "{ensure_private_key(study.key_path(s.id))}"\n'
    signing = (
        ""
        if unsigned_reason is None
        else f'signing = "none"\nunsigned_reason = "{unsigned_reason}"\n'
    )
    levels_toml = ", ".join(f'"{k}"' for k in range(LEVELS))
    study.spec.write_text(
        f'''spec_version = 1
study_id = "{study_id}"
design = "observational"
estimator = "smooth_matching"
aggregator = "mvagg"
missing = "reject"
release = "1"
reports = "published"
require_all_sites = {"true" if require_all_sites else "false"}
{signing}
[treatment]
column = "treated"

[outcome]
column = "outcome"
bound = 1.0
policy = "clip"

[[covariates]]
kind = "categorical"
column = "stratum"
levels = [{levels_toml}]
'''
        + "".join(site_blocks),
        encoding="utf-8",
    )
    return study


def leaked(text: str, values: np.ndarray) -> list[str]:
    """Raw values (``0 <= v < 1``) found in ``text``, written in full (``repr``), to 10
    significant digits or to 12 decimals (also as the start of a longer number)."""
    import re

    tokens: set[str] = set()
    for t in re.findall(r"\d+\.\d+", text):
        tokens.update((t, t[:12], t[:14]))
    found = []
    for v in values:
        for form in (repr(float(v)), f"{v:.10g}", f"{v:.12f}"):
            if form in tokens:
                found.append(form)
    return found
