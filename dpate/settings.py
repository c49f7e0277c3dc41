"""Where a run finds its spec, data, ledger and publication root (no Prefect here).

Only the site decides where its ledger, its data and its publication target live. The study spec
and every run parameter come from the coordinator (untrusted): they name the study, the site and
the round, nothing else a site keeps. One resolver, :func:`resolve_site`, applies one precedence
(docs/pipeline.md, "Settings", whose table :func:`settings_table` generates from
:class:`SiteSettings`' field descriptions): 1. the site's environment (``DPATE_`` + the setting's
name, e.g. ``DPATE_LEDGER_URL``), 2. the site config file, 3. a fallback that only a local run
has for the ledger, the data and the publication root.

The site config file is a TOML file named by ``DPATE_SITE_CONFIG`` (e.g. ``/etc/dpate/site.toml``).
Values may contain ``{site}`` and ``{study}`` (one worker serving several sites). ``DPATE_HOME``
defaults to ``$XDG_DATA_HOME/dpate`` or ``~/.local/share/dpate``. The spec's ``ledger`` fields are
ignored: a ledger's location is a site setting only. The local command line (``dpate run
--ledger``, ``dpate site-release --data``) is the site operator: it sets the environment above in
its own process before any flow starts.

A *deployed* run is one started by a Prefect worker (``PREFECT__FLOW_RUN_ID`` in the process
environment) or from a deployment: there nothing falls back to the spec or to a default ledger,
and the ``spec`` parameter is a spec hash the site's operator approved (:mod:`dpate.site.approvals`),
never a path or URL.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    ValidationError,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from dpate.errors import DpateError, ExitCode
from dpate.field_tables import Column, extra, field_table
from dpate.ledger import as_sqlalchemy_url, release_id

if TYPE_CHECKING:  # the spec's models import the estimators (numba): only where a spec is read
    from dpate.schemas.spec import StudySpec

__all__ = [
    "IDENTIFIER",
    "Identifier",
    "SettingsError",
    "SiteContext",
    "SiteRun",
    "SiteSettings",
    "StudyContext",
    "dpate_home",
    "load_study_spec",
    "resolve_site",
    "resolve_study",
    "settings_table",
    "site_config",
    "site_key_path",
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


def _docs(
    file_key: str,
    local: str,
    deployed: str = "same",
    env_example: str | None = None,
    file_example: str | None = None,
) -> dict[str, JsonValue]:
    """A setting's row of the docs table, besides its description: its key in the site config
    file and its fallback in a local and in a deployed run."""
    return {
        "file_key": file_key,
        "local": local,
        "deployed": deployed,
        "env_example": env_example,
        "file_example": file_example,
    }


class _SiteEnvironment(EnvSettingsSource):
    """The ``DPATE_*`` variables of the process (their names in capitals, as written in the
    docs), stripped; a blank one is not set."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in os.environ.items() if k == k.upper()}

    def __call__(self) -> dict[str, Any]:
        values = super().__call__()
        return {
            k: v.strip() if isinstance(v, str) else v
            for k, v in values.items()
            if not (isinstance(v, str) and not v.strip())
        }


class _SiteConfigFile(PydanticBaseSettingsSource):
    """The site config file named by ``DPATE_SITE_CONFIG`` (TOML; its keys are the settings'
    ``file_key``); an empty value is not set, an unknown key is refused."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self.path, self.doc = _config_file()

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.doc.get(file_key(field_name)), field_name, False

    def __call__(self) -> dict[str, Any]:
        return {
            name: self.doc[key]
            for name in SiteSettings.model_fields
            if self.doc.get(key := file_key(name)) not in (None, "")
        }


def file_key(name: str) -> str:
    """The site config file's key of the setting ``name``."""
    extra = SiteSettings.model_fields[name].json_schema_extra
    assert isinstance(extra, dict)
    return str(extra["file_key"])


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
    allowed = sorted(file_key(name) for name in SiteSettings.model_fields)
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise SettingsError(f"site config file {path}: unknown keys {unknown}; allowed: {allowed}")
    return path, doc


_TEXT = (
    "ledger_url",
    "data_path",
    "data_query",
    "data_secret",
    "storage_url",
    "site_log",
    "site_key",
    "specs",
)


class SiteSettings(BaseSettings):
    """The site's own configuration: the process environment (``DPATE_*``) over the site config
    file (``DPATE_SITE_CONFIG``), else unset. :meth:`load` reads it, :meth:`for_site` fills in
    ``{site}`` and ``{study}``, :meth:`source` says where a value came from. The fallbacks when a
    setting is unset are :func:`resolve_site`'s (docs/pipeline.md, "Settings")."""

    model_config = SettingsConfigDict(
        env_prefix="DPATE_", frozen=True, extra="forbid", hide_input_in_errors=True
    )

    ledger_url: str | None = Field(
        default=None,
        description="ledger",
        json_schema_extra=_docs("ledger", "`$DPATE_HOME/ledgers/<site>.sqlite`", "refused"),
    )
    data_path: str | None = Field(
        default=None,
        description="site data",
        json_schema_extra=_docs(
            "data", "the spec's `data`, only if relative and inside the spec's folder", "refused"
        ),
    )
    data_query: str | None = Field(
        default=None,
        description="SQL query (when the data is a database URL)",
        json_schema_extra=_docs("data_query", "none: a SQL source without one is refused"),
    )
    data_secret: str | None = Field(
        default=None,
        description="SQL password: a Prefect Secret block's **name**",
        json_schema_extra=_docs(
            "data_secret",
            "none: the driver's environment (`PGPASSWORD`, `PGPASSFILE`, `PGSERVICE`)",
        ),
    )
    storage_url: str | None = Field(
        default=None,
        description="publication root",
        json_schema_extra=_docs(
            "storage", "the spec's `reports` (relative: from the spec's folder)", "refused"
        ),
    )
    site_log: str | None = Field(
        default=None,
        description="operator log",
        json_schema_extra=_docs("log", "`$DPATE_HOME/logs/<site>.log`"),
    )
    allow_spec_data: bool = Field(
        default=False,
        description="spec data allowed",
        json_schema_extra=_docs(
            "allow_spec_data",
            "no",
            "no",
            env_example="DPATE_ALLOW_SPEC_DATA=1",
            file_example="allow_spec_data = true",
        ),
    )
    sites: Annotated[tuple[str, ...] | None, NoDecode] = Field(
        default=None,
        description="sites served",
        json_schema_extra=_docs(
            "sites",
            "every site of the spec",
            env_example="DPATE_SITES=a,b",
            file_example='sites = ["a", "b"]',
        ),
    )
    site_key: str | None = Field(
        default=None,
        description="report-signing key (`dpate site keygen`)",
        json_schema_extra=_docs(
            "site_key",
            "`$DPATE_HOME/keys/<site>.ed25519.pem`",
            "refused (unless the study opts out of signing and lists no key for the site)",
        ),
    )
    specs: str | None = Field(
        default=None,
        description="approved specs (`dpate site approve`)",
        json_schema_extra=_docs(
            "specs",
            "`$DPATE_HOME/specs`",
            "same; a deployed run's `spec` is a hash found here, never a path",
        ),
    )

    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator(*_TEXT, mode="before")
    @classmethod
    def _text(cls, value: object) -> object:
        return value if value is None or isinstance(value, str) else str(value)

    @field_validator("allow_spec_data", mode="before")
    @classmethod
    def _allowed(cls, value: object) -> bool:
        return _truthy(value)

    @field_validator("sites", mode="before")
    @classmethod
    def _sites(cls, value: object) -> tuple[str, ...] | None:
        if value is None:
            return None
        if isinstance(value, str):
            return tuple(s.strip() for s in value.split(",") if s.strip())
        if isinstance(value, (list, tuple)):
            return tuple(str(s) for s in value)
        raise ValueError(
            f"must be a list of site ids or one comma-separated string "
            f"(got a {type(value).__name__})"
        )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _SiteEnvironment(settings_cls), _SiteConfigFile(settings_cls))

    @classmethod
    def env_name(cls, name: str) -> str:
        """The environment variable of the setting ``name`` (``DPATE_LEDGER_URL``...)."""
        return f"{cls.model_config.get('env_prefix', '')}{name.upper()}"

    @classmethod
    def load(cls) -> SiteSettings:
        """The site's settings from this process's environment and its config file. Raises
        SettingsError naming the setting and where it was set (never its value)."""
        env = _SiteEnvironment(cls)()
        config = _SiteConfigFile(cls)
        found = config()
        try:
            settings = cls()
        except ValidationError as exc:
            problems = []
            for err in exc.errors(include_input=False, include_url=False):
                name = str(err["loc"][0]) if err["loc"] else ""
                where = cls.env_name(name) if name in env else str(config.path)
                why = str(err.get("ctx", {}).get("error", "")) or err["msg"]
                key = file_key(name) if name in cls.model_fields else name
                problems.append(f"'{key}' in the site configuration {why}: fix it in {where}")
            raise SettingsError("; ".join(problems)) from None
        for name in cls.model_fields:
            if name in env:
                settings._sources[name] = cls.env_name(name)
            elif name in found:
                settings._sources[name] = f"{config.path} ({file_key(name)})"
        return settings

    def for_site(self, site: str, study: str) -> SiteSettings:
        """These settings with ``{site}`` and ``{study}`` filled in (one worker serving several
        sites or studies)."""
        update = {
            name: value.replace("{site}", site).replace("{study}", study)
            for name in _TEXT
            if isinstance(value := getattr(self, name), str)
        }
        return self.model_copy(update=update)

    def source(self, name: str) -> str:
        """Where the setting ``name`` came from: its variable, the config file, or "default"."""
        return self._sources.get(name, "default")


def site_config(site: str, study: str) -> SiteSettings:
    """The site's settings for ``site`` in ``study`` (environment > config file)."""
    return SiteSettings.load().for_site(site, study)


def _settings_cell(key: str) -> Callable[[str, FieldInfo], str]:
    return lambda name, field: str(extra(field)[key])


#: docs/pipeline.md's settings table, a column per place a setting is found
SETTINGS_COLUMNS = (
    Column("setting", lambda name, field: str(field.description)),
    Column(
        "1. site environment",
        lambda name, field: f"`{extra(field)['env_example'] or SiteSettings.env_name(name)}`",
    ),
    Column(
        "2. site config file",
        lambda name, field: f"`{extra(field)['file_example'] or extra(field)['file_key']}`",
    ),
    Column("3. local run (embedded, CLI)", _settings_cell("local")),
    Column("3. deployed run", _settings_cell("deployed")),
)


def settings_table() -> str:
    """The Markdown table of docs/pipeline.md, "Settings", from :class:`SiteSettings`' fields."""
    return field_table(SiteSettings.model_fields.items(), SETTINGS_COLUMNS)


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
    env = os.environ.get("DPATE_STORAGE_URL", "").strip().replace("{study}", study_spec.study_id)
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
    configuration (``settings``, else :meth:`SiteSettings.load`), with the precedence in the
    module docstring."""
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
