"""The site's own configuration, :class:`SiteSettings`: each setting with its description, read
from a local command's own options (:func:`command_options`), the site's environment (``DPATE_`` +
its name) and the site config file (``DPATE_SITE_CONFIG``), in that order, and the settings table
of the docs generated from the descriptions (:func:`settings_table`); the identifiers' pattern
and the settings' error."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import (
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

#: The pattern of every identifier (study, site, round): as the spec's ``id`` and ``release``.
IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_ID_HINT = "1-128 characters: letters, digits, '_', '.', '-', starting with a letter or digit"

Identifier = Annotated[str, Field(pattern=IDENTIFIER)]


class SettingsError(DpateError, ValueError):
    """A site's settings are missing or not allowed; the message says which and how to fix it."""

    exit_code = ExitCode.SETTINGS
    cause = "site settings"


def dpate_home() -> Path:
    """``DPATE_HOME``, else ``$XDG_DATA_HOME/dpate``, else ``~/.local/share/dpate``."""
    home = os.environ.get("DPATE_HOME", "").strip()
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "dpate"


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


#: the local command's options (field name -> value), over the environment and the config file
_COMMAND_OPTIONS: ContextVar[Mapping[str, str]] = ContextVar(
    "dpate_command_options", default=MappingProxyType({})
)


@contextmanager
def command_options(**values: str | None) -> Iterator[None]:
    """Settings the site's operator gave on a local command line (``--ledger``, ``--data``,
    ``--storage``; the demo's log and key locations), by field name, for the duration of the
    command in this process: over the environment and the config file (:meth:`SiteSettings.source`
    says "the command line"). None or "" is not set. A context variable, not the process
    environment: the flows the command runs here see them (Prefect's task threads copy the
    context), a child process or another thread does not."""
    unknown = sorted(set(values) - set(SiteSettings.model_fields))
    if unknown:
        raise ValueError(
            f"not site settings: {unknown}; known: {sorted(SiteSettings.model_fields)}"
        )
    given = {k: v.strip() for k, v in values.items() if v and v.strip()}
    token = _COMMAND_OPTIONS.set(MappingProxyType(given))
    try:
        yield
    finally:
        _COMMAND_OPTIONS.reset(token)


class _CommandOptions(PydanticBaseSettingsSource):
    """:func:`command_options` as a settings source."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return _COMMAND_OPTIONS.get().get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_COMMAND_OPTIONS.get())


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
    setting is unset are :func:`resolve_site`'s (docs/reference/pipeline.md, "Settings")."""

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
        return (
            init_settings,
            _CommandOptions(settings_cls),
            _SiteEnvironment(settings_cls),
            _SiteConfigFile(settings_cls),
        )

    @classmethod
    def env_name(cls, name: str) -> str:
        """The environment variable of the setting ``name`` (``DPATE_LEDGER_URL``...)."""
        return f"{cls.model_config.get('env_prefix', '')}{name.upper()}"

    @classmethod
    def load(cls) -> SiteSettings:
        """The site's settings from this process's environment and its config file. Raises
        SettingsError naming the setting and where it was set (never its value)."""
        given = _COMMAND_OPTIONS.get()
        env = _SiteEnvironment(cls)()
        config = _SiteConfigFile(cls)
        found = config()
        try:
            settings = cls()
        except ValidationError as exc:
            problems = []
            for err in exc.errors(include_input=False, include_url=False):
                name = str(err["loc"][0]) if err["loc"] else ""
                where = (
                    "the command's options"
                    if name in given
                    else cls.env_name(name)
                    if name in env
                    else str(config.path)
                )
                why = str(err.get("ctx", {}).get("error", "")) or err["msg"]
                key = file_key(name) if name in cls.model_fields else name
                problems.append(f"'{key}' in the site configuration {why}: fix it in {where}")
            raise SettingsError("; ".join(problems)) from None
        for name in cls.model_fields:
            if name in given:
                settings._sources[name] = "the command line"
            elif name in env:
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


#: docs/reference/pipeline.md's settings table, a column per place a setting is found
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
    """The Markdown table of docs/reference/pipeline.md, "Settings", from :class:`SiteSettings`' fields."""
    return field_table(SiteSettings.model_fields.items(), SETTINGS_COLUMNS)
