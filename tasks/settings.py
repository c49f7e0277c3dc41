"""Where a run finds its spec, data, ledger and publication root (no Prefect here).

Precedence for each site-local setting: the flow/CLI parameter, then the worker's environment,
then the study spec, then a default next to the spec file:

===============  ===================  =================================  =============================
setting          environment          spec                               default
===============  ===================  =================================  =============================
data location    ``DPATE_DATA_PATH``  ``[[sites]] data``                 (the spec always has one)
ledger URL       ``DPATE_LEDGER_URL`` site ``ledger``, study ``ledger``  ``<spec dir>/ledgers/<site>.sqlite``
storage root     ``DPATE_STORAGE_URL`` ``reports``                       (the spec always has one)
===============  ===================  =================================  =============================

Environment values may contain ``{site}`` and ``{study}`` (one worker serving several sites,
e.g. ``DPATE_LEDGER_URL=sqlite:////var/dpate/{site}.sqlite``). Relative local paths in the spec
are read from the spec file's folder. Everything here is public configuration.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from schemas.spec import SpecError, StudySpec, load_spec
from tasks.ledger import as_sqlalchemy_url, release_id

__all__ = [
    "SiteContext",
    "StudyContext",
    "load_study_spec",
    "resolve_site",
    "resolve_study",
]


def load_study_spec(source: str) -> StudySpec:
    """Read a study spec from a local path or any fsspec URL (``s3://...``, ``https://...``)."""
    if "://" not in source or source.startswith("file://"):
        return load_spec(source.removeprefix("file://"))
    import fsspec

    try:
        with fsspec.open(source, "rt", encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError) as exc:
        raise SpecError([("(file)", f"cannot read the spec: {exc}")], source) from None
    return StudySpec.from_toml_text(text, source)


def _spec_dir(source: str) -> Path | None:
    if "://" in source and not source.startswith("file://"):
        return None
    return Path(source.removeprefix("file://")).resolve().parent


def _env(name: str, study: str, site: str | None = None) -> str | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    value = value.replace("{study}", study)
    return value.replace("{site}", site) if site is not None else value


def _local(base: Path | None, location: str) -> str:
    """A relative local path is taken relative to the spec's folder."""
    if "://" in location or base is None or Path(location).is_absolute():
        return location
    return str(base / location)


@dataclass(frozen=True)
class StudyContext:
    """A study run's public settings (what the aggregator and the study flow need)."""

    spec: StudySpec
    spec_source: str
    round: str
    storage_url: str

    @property
    def study_id(self) -> str:
        return self.spec.study_id

    @property
    def site_ids(self) -> list[str]:
        return [s.id for s in self.spec.sites]

    def release_id(self, site_id: str) -> str:
        return release_id(self.spec.study_id, site_id, self.spec.spec_hash, self.round)


@dataclass(frozen=True)
class SiteContext(StudyContext):
    """One site's release settings. ``data_location`` and ``ledger_url`` stay at the site."""

    site_id: str
    data_location: str
    ledger_url: str

    @property
    def rid(self) -> str:
        return self.release_id(self.site_id)


def resolve_study(
    spec: str, round: str | None = None, storage_url: str | None = None
) -> StudyContext:
    study_spec = load_study_spec(spec)
    base = _spec_dir(spec)
    storage = (
        storage_url
        or _env("DPATE_STORAGE_URL", study_spec.study_id)
        or _local(base, study_spec.reports)
    )
    return StudyContext(study_spec, spec, round or study_spec.release, storage)


def resolve_site(
    spec: str,
    site: str,
    round: str | None = None,
    data_path: str | None = None,
    ledger_url: str | None = None,
    storage_url: str | None = None,
) -> SiteContext:
    study = resolve_study(spec, round, storage_url)
    s = study.spec
    s.site(site)  # KeyError naming the study's sites
    base = _spec_dir(spec)
    data = data_path or _env("DPATE_DATA_PATH", s.study_id, site) or s.data_location(site, base)
    ledger = (
        ledger_url
        or _env("DPATE_LEDGER_URL", s.study_id, site)
        or s.ledger_url(site)
        or str((base or Path.cwd()) / "ledgers" / f"{site}.sqlite")
    )
    data, ledger = (
        v.replace("{site}", site).replace("{study}", s.study_id) for v in (data, ledger)
    )
    return SiteContext(
        study.spec,
        study.spec_source,
        study.round,
        study.storage_url,
        site_id=site,
        data_location=data,
        ledger_url=as_sqlalchemy_url(ledger),
    )
