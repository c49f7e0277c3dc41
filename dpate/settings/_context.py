"""A run's settings resolved: the study from its spec (a deployed run's from the site's approved
copy), everything site-local from the site's :class:`SiteSettings`, with the fallbacks a local run
has (:func:`resolve_site`, :func:`resolve_study`), as the contexts the tasks read
(:class:`StudyContext`, :class:`SiteContext`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from dpate.ledger import as_sqlalchemy_url, release_id
from dpate.settings._site_settings import (
    _COMMAND_OPTIONS,
    _ID_HINT,
    IDENTIFIER,
    Identifier,
    SettingsError,
    SiteSettings,
    dpate_home,
    site_config,
)

if TYPE_CHECKING:  # the spec's models import the estimators (numba): only where a spec is read
    from dpate.schemas.spec import StudySpec


class SiteRun(BaseModel):
    """What the coordinator may ask of a site: a spec, a site id and a round. Nothing else."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str = Field(min_length=1)
    site: Identifier
    round: Identifier | None = None


def validate_round(round: str | None) -> str | None:
    if round is not None and not re.fullmatch(IDENTIFIER, round):
        raise SettingsError(f"round {round!r} is not a valid identifier ({_ID_HINT})")
    return round


def is_deployed_process() -> bool:
    """True in a flow-run process started by a Prefect worker."""
    return bool(os.environ.get("PREFECT__FLOW_RUN_ID", "").strip())


def load_study_spec(source: str) -> StudySpec:
    """Read a study spec from a local path or any fsspec URL (``s3://...``, ``https://...``)."""
    from dpate.schemas.spec import SpecError, StudySpec, load_spec

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
    """One site's release settings. ``data_location``, ``data_query``, ``ledger_url`` and
    ``log_path`` and ``key_path`` stay at the site (never logged to Prefect, never a parameter);
    ``data_secret`` is
    the *name* of a Prefect Secret block, loaded at the site when the data source is opened."""

    site_id: str
    data_location: str
    ledger_url: str
    log_path: str
    deployed: bool = False
    data_query: str | None = None
    data_secret: str | None = None
    #: the site's private report-signing key file (:func:`site_key_path`); stays at the site
    key_path: str | None = None

    @property
    def rid(self) -> str:
        return self.release_id(self.site_id)

    @property
    def balance_rid(self) -> str:
        """The release id of this round's covariate-balance table at the site (a release of
        its own in the ledger: its own budget, its own one draw)."""
        return release_id(
            self.spec.study_id, self.site_id, self.spec.spec_hash, self.round, "balance"
        )


def resolve_study(
    spec: str, round: str | None = None, storage_url: str | None = None
) -> StudyContext:
    """The study's settings for the aggregator (the coordinator's own process) and the embedded
    study flow: publication root = ``storage_url`` (the aggregator's own option), else
    ``DPATE_STORAGE_URL``, else the spec's ``reports`` (relative: from the spec's folder)."""
    validate_round(round)
    study_spec = load_study_spec(spec)
    base = _spec_dir(spec)
    given = _COMMAND_OPTIONS.get().get("storage_url") or os.environ.get("DPATE_STORAGE_URL", "")
    env = given.strip().replace("{study}", study_spec.study_id)
    storage = storage_url or env or (study_spec.reports and _local(base, study_spec.reports))
    if not storage:
        raise SettingsError(
            f"study {study_spec.study_id}: no publication root: set DPATE_STORAGE_URL (or "
            f"--storage), or 'reports' in the spec"
        )
    return StudyContext(study_spec, spec, round or study_spec.release, storage)


def _spec_data(
    spec: StudySpec, site: str, base: Path | None, cfg: SiteSettings, deployed: bool
) -> str:
    loc = spec.site(site).data
    if cfg.allow_spec_data:
        return _local(base, loc)
    how = (
        "set the site's own data location (DPATE_DATA_PATH, or 'data' in the site config "
        "file), or allow the spec's with DPATE_ALLOW_SPEC_DATA=1 (site config "
        "'allow_spec_data = true')"
    )
    if deployed:
        raise SettingsError(
            f"site {site}: a deployed run takes its data location only from "
            f"the site's configuration: {how}"
        )
    if "://" in loc or Path(loc).is_absolute() or Path(loc).drive or base is None:
        raise SettingsError(
            f"site {site}: the spec's data location {loc!r} is not a relative path inside the "
            f"spec's folder (a spec may only name data next to itself): {how}"
        )
    target = (base / loc).resolve()
    if not target.is_relative_to(base.resolve()):
        raise SettingsError(
            f"site {site}: the spec's data location {loc!r} leaves the spec's folder: {how}"
        )
    return str(base / loc)


def resolve_site(
    spec: str,
    site: str,
    round: str | None = None,
    *,
    deployed: bool | None = None,
    settings: SiteSettings | None = None,
) -> SiteContext:
    """One site's settings: the study from the spec, everything site-local from the site's own
    configuration (``settings``, else :meth:`SiteSettings.load`), with the precedence of
    :mod:`dpate.settings`."""
    if deployed is None:
        deployed = is_deployed_process()
    run = SiteRun(spec=spec, site=site, round=round)
    if deployed:  # the site's approved copy, by hash: nothing is read at a coordinator's path
        from dpate.site.approvals import load_approved_spec

        validate_round(run.round)
        approved = load_approved_spec(run.spec, site=site)
        study = StudyContext(approved, run.spec, run.round or approved.release, "")
    else:
        study = resolve_study_spec_only(run.spec, run.round)
    s = study.spec
    s.site(site)  # KeyError naming the study's sites
    cfg = (settings or SiteSettings.load()).for_site(site, s.study_id)
    if cfg.sites is not None and site not in cfg.sites:
        raise SettingsError(
            f"this site's configuration serves sites {list(cfg.sites)} "
            f"({cfg.source('sites')}), not {site!r}: refused"
        )
    base = None if deployed else _spec_dir(spec)
    data = cfg.data_path or _spec_data(s, site, base, cfg, deployed)
    ledger = site_ledger_url(site, s.study_id, deployed=deployed, cfg=cfg)
    if cfg.storage_url:
        storage = cfg.storage_url
    elif deployed or not s.reports:
        raise SettingsError(
            f"site {site}: no publication root: set DPATE_STORAGE_URL in the worker's "
            f"environment (or 'storage' in the site config file)"
            + ("" if deployed else ", or 'reports' in the spec")
        )
    else:
        storage = _local(base, s.reports)
    log = cfg.site_log or str(dpate_home() / "logs" / f"{site}.log")
    return SiteContext(
        s,
        spec,
        study.round,
        storage,
        site_id=site,
        data_location=data,
        ledger_url=ledger,
        log_path=log,
        deployed=deployed,
        data_query=cfg.data_query,
        data_secret=cfg.data_secret,
        key_path=site_key_path(site, s.study_id, deployed=deployed, cfg=cfg),
    )


def site_key_path(
    site: str, study: str, *, deployed: bool = False, cfg: SiteSettings | None = None
) -> str | None:
    """The site's private report-signing key file: ``DPATE_SITE_KEY`` (site config
    ``site_key``), else (local runs only) ``$DPATE_HOME/keys/<site>.ed25519.pem``, where
    ``dpate site keygen SITE`` writes by default. Never from a spec or a run parameter."""
    cfg = cfg or site_config(site, study)
    if cfg.site_key:
        return cfg.site_key
    if deployed:
        return None
    return str(dpate_home() / "keys" / f"{site}.ed25519.pem")


def site_ledger_url(
    site: str, study: str, *, deployed: bool = False, cfg: SiteSettings | None = None
) -> str:
    """The site's ledger URL from its configuration, else (local runs only) the per-machine
    default ``$DPATE_HOME/ledgers/<site>.sqlite``. Never from a spec or a run parameter."""
    cfg = cfg or site_config(site, study)
    if cfg.ledger_url:
        return as_sqlalchemy_url(cfg.ledger_url)
    if deployed:
        raise SettingsError(
            f"site {site}: a deployed run needs the site's ledger set explicitly: "
            f"DPATE_LEDGER_URL in the worker's environment (or 'ledger' in the site config file "
            f"DPATE_SITE_CONFIG); create the ledger once with dpate ledger init {site} "
            f"--epsilon E --delta D --ledger URL"
        )
    return as_sqlalchemy_url(str(dpate_home() / "ledgers" / f"{site}.sqlite"))


def resolve_study_spec_only(spec: str, round: str | None) -> StudyContext:
    """The study and round without a publication root (a site resolves its own)."""
    validate_round(round)
    study_spec = load_study_spec(spec)
    return StudyContext(study_spec, spec, round or study_spec.release, "")
