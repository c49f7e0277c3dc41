"""Where a run finds its spec, data, ledger and publication root (no Prefect here).

Only the site decides where its ledger, its data and its publication target live. The study spec
and every run parameter come from the coordinator (untrusted): they name the study, the site and
the round, nothing else a site keeps. One resolver, :func:`resolve_site`, applies one precedence
(docs/pipeline.md, "Settings"):

================  ========================  ==================  =================================
setting           1. site environment       2. site config      3. otherwise
================  ========================  ==================  =================================
ledger URL        ``DPATE_LEDGER_URL``      ``ledger``          local: ``$DPATE_HOME/ledgers/
                                                                <site>.sqlite``; deployed: refused
site data         ``DPATE_DATA_PATH``       ``data``            the spec's ``data`` if relative
                                                                and inside the spec's folder (any
                                                                with ``allow_spec_data``);
                                                                deployed: only with
                                                                ``allow_spec_data``
SQL query         ``DPATE_DATA_QUERY``      ``data_query``      none (a SQL data location needs
                                                                one)
SQL password      ``DPATE_DATA_SECRET``     ``data_secret``     none: the driver's environment
(Secret block)                                                  (``PGPASSWORD``, ``PGPASSFILE``)
publication root  ``DPATE_STORAGE_URL``     ``storage``         local: the spec's ``reports``;
                                                                deployed: refused
operator log      ``DPATE_SITE_LOG``        ``log``             ``$DPATE_HOME/logs/<site>.log``
spec data ok      ``DPATE_ALLOW_SPEC_DATA`` ``allow_spec_data`` no
sites served      ``DPATE_SITES``           ``sites``           any site of the spec
approved specs    ``DPATE_SPECS``           ``specs``           ``$DPATE_HOME/specs``
================  ========================  ==================  =================================

The site config file is a TOML file named by ``DPATE_SITE_CONFIG`` (e.g. ``/etc/dpate/site.toml``).
Values may contain ``{site}`` and ``{study}`` (one worker serving several sites). ``DPATE_HOME``
defaults to ``$XDG_DATA_HOME/dpate`` or ``~/.local/share/dpate``. The spec's ``ledger`` fields are
ignored: a ledger's location is a site setting only. The local command line (``dpate run
--ledger``, ``dpate site-release --data``) is the site operator: it sets the environment above in
its own process before any flow starts.

A *deployed* run is one started by a Prefect worker (``PREFECT__FLOW_RUN_ID`` in the process
environment) or from a deployment: there nothing falls back to the spec or to a default ledger,
and the ``spec`` parameter is a spec hash the site's operator approved (:mod:`dpate.spec_approvals`),
never a path or URL.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

from dpate.errors import DpateError, ExitCode
from dpate.ledger_chain import release_id
from dpate.ledger_engine import as_sqlalchemy_url

if TYPE_CHECKING:  # the spec's models import the estimators (numba): only where a spec is read
    from dpate.schemas.spec import StudySpec

__all__ = [
    "IDENTIFIER",
    "Identifier",
    "SettingsError",
    "SiteConfig",
    "SiteContext",
    "SiteRun",
    "StudyContext",
    "dpate_home",
    "load_study_spec",
    "resolve_site",
    "resolve_study",
    "site_config",
    "site_ledger_url",
    "validate_round",
]

#: The pattern of every identifier (study, site, round): as the spec's ``id`` and ``release``.
IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_ID_HINT = "1-128 characters: letters, digits, '_', '.', '-', starting with a letter or digit"

Identifier = Annotated[str, Field(pattern=IDENTIFIER)]


class SettingsError(DpateError, ValueError):
    """A site's settings are missing or not allowed; the message says which and how to fix it."""

    exit_code = ExitCode.SETTINGS
    cause = "site settings"


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


def dpate_home() -> Path:
    """``DPATE_HOME``, else ``$XDG_DATA_HOME/dpate``, else ``~/.local/share/dpate``."""
    home = os.environ.get("DPATE_HOME", "").strip()
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "dpate"


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


def _truthy(value: object) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class SiteConfig:
    """The site's own configuration (environment over the ``DPATE_SITE_CONFIG`` file), with
    ``{site}`` and ``{study}`` filled in. ``sources`` says where each value came from."""

    ledger: str | None = None
    data: str | None = None
    #: the SQL source's query (a ``SELECT`` or a table name); used when ``data`` is a database URL
    data_query: str | None = None
    #: the name of the Prefect Secret block holding the database password (never the password)
    data_secret: str | None = None
    storage: str | None = None
    log: str | None = None
    allow_spec_data: bool = False
    sites: tuple[str, ...] | None = None
    #: the folder of the specs this site's operator approved (dpate.spec_approvals)
    specs: str | None = None
    sources: tuple[tuple[str, str], ...] = ()

    def source(self, key: str) -> str:
        return dict(self.sources).get(key, "default")


_ENV = {
    "ledger": "DPATE_LEDGER_URL",
    "data": "DPATE_DATA_PATH",
    "data_query": "DPATE_DATA_QUERY",
    "data_secret": "DPATE_DATA_SECRET",
    "storage": "DPATE_STORAGE_URL",
    "log": "DPATE_SITE_LOG",
    "allow_spec_data": "DPATE_ALLOW_SPEC_DATA",
    "sites": "DPATE_SITES",
    "specs": "DPATE_SPECS",
}


def _config_file() -> tuple[str | None, dict[str, object]]:
    path = os.environ.get("DPATE_SITE_CONFIG", "").strip()
    if not path:
        return None, {}
    try:
        with open(Path(path).expanduser(), "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(
            f"cannot read the site config file {path} (DPATE_SITE_CONFIG): {exc}"
        ) from None
    unknown = sorted(set(doc) - set(_ENV))
    if unknown:
        raise SettingsError(
            f"site config file {path}: unknown keys {unknown}; allowed: {sorted(_ENV)}"
        )
    return path, doc


def site_config(site: str, study: str) -> SiteConfig:
    """The site's configuration for ``site`` in ``study`` (environment > config file)."""
    path, doc = _config_file()
    values: dict[str, object] = {}
    sources: list[tuple[str, str]] = []
    for key, env in _ENV.items():
        value: object = os.environ.get(env, "").strip() or None
        where = env
        if value is None and doc.get(key) not in (None, ""):
            value, where = doc[key], f"{path} ({key})"
        if value is None:
            continue
        if isinstance(value, str):
            value = value.replace("{site}", site).replace("{study}", study)
        values[key] = value
        sources.append((key, where))
    raw_sites = values.pop("sites", None)
    sites: tuple[str, ...] | None
    if raw_sites is None:
        sites = None
    elif isinstance(raw_sites, str):
        sites = tuple(s.strip() for s in raw_sites.split(",") if s.strip())
    elif isinstance(raw_sites, (list, tuple)):
        sites = tuple(str(s) for s in raw_sites)
    else:
        raise SettingsError(
            f"'sites' in the site configuration must be a list of site ids or one comma-separated "
            f"string (got a {type(raw_sites).__name__}): fix it in {path}"
        )
    return SiteConfig(
        ledger=_str(values.get("ledger")),
        data=_str(values.get("data")),
        data_query=_str(values.get("data_query")),
        data_secret=_str(values.get("data_secret")),
        storage=_str(values.get("storage")),
        log=_str(values.get("log")),
        allow_spec_data=_truthy(values.get("allow_spec_data", False)),
        sites=sites,
        specs=_str(values.get("specs")),
        sources=tuple(sources),
    )


def _str(value: object) -> str | None:
    return None if value is None else str(value)


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
    ``log_path`` stay at the site (never logged to Prefect, never a parameter); ``data_secret`` is
    the *name* of a Prefect Secret block, loaded at the site when the data source is opened."""

    site_id: str
    data_location: str
    ledger_url: str
    log_path: str
    deployed: bool = False
    data_query: str | None = None
    data_secret: str | None = None

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
    env = os.environ.get("DPATE_STORAGE_URL", "").strip().replace("{study}", study_spec.study_id)
    storage = storage_url or env or (study_spec.reports and _local(base, study_spec.reports))
    if not storage:
        raise SettingsError(
            f"study {study_spec.study_id}: no publication root: set DPATE_STORAGE_URL (or "
            f"--storage), or 'reports' in the spec"
        )
    return StudyContext(study_spec, spec, round or study_spec.release, storage)


def _spec_data(
    spec: StudySpec, site: str, base: Path | None, cfg: SiteConfig, deployed: bool
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
    spec: str, site: str, round: str | None = None, *, deployed: bool | None = None
) -> SiteContext:
    """One site's settings: the study from the spec, everything site-local from the site's own
    configuration (:func:`site_config`), with the precedence in the module docstring."""
    if deployed is None:
        deployed = is_deployed_process()
    run = SiteRun(spec=spec, site=site, round=round)
    if deployed:  # the site's approved copy, by hash: nothing is read at a coordinator's path
        from dpate.spec_approvals import load_approved_spec

        validate_round(run.round)
        approved = load_approved_spec(run.spec, site=site)
        study = StudyContext(approved, run.spec, run.round or approved.release, "")
    else:
        study = resolve_study_spec_only(run.spec, run.round)
    s = study.spec
    s.site(site)  # KeyError naming the study's sites
    cfg = site_config(site, s.study_id)
    if cfg.sites is not None and site not in cfg.sites:
        raise SettingsError(
            f"this site's configuration serves sites {list(cfg.sites)} "
            f"({cfg.source('sites')}), not {site!r}: refused"
        )
    base = None if deployed else _spec_dir(spec)
    data = cfg.data or _spec_data(s, site, base, cfg, deployed)
    ledger = site_ledger_url(site, s.study_id, deployed=deployed, cfg=cfg)
    if cfg.storage:
        storage = cfg.storage
    elif deployed or not s.reports:
        raise SettingsError(
            f"site {site}: no publication root: set DPATE_STORAGE_URL in the worker's "
            f"environment (or 'storage' in the site config file)"
            + ("" if deployed else ", or 'reports' in the spec")
        )
    else:
        storage = _local(base, s.reports)
    log = cfg.log or str(dpate_home() / "logs" / f"{site}.log")
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
    )


def site_ledger_url(
    site: str, study: str, *, deployed: bool = False, cfg: SiteConfig | None = None
) -> str:
    """The site's ledger URL from its configuration, else (local runs only) the per-machine
    default ``$DPATE_HOME/ledgers/<site>.sqlite``. Never from a spec or a run parameter."""
    cfg = cfg or site_config(site, study)
    if cfg.ledger:
        return as_sqlalchemy_url(cfg.ledger)
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
