"""Where a run finds its spec, data, ledger and publication root (no Prefect here).

Only the site decides where its ledger, its data and its publication target live. The study spec
and every run parameter come from the coordinator (untrusted): they name the study, the site and
the round, nothing else a site keeps. One resolver, :func:`resolve_site`, applies one precedence
(docs/reference/pipeline.md, "Settings", whose table :func:`settings_table` generates from
:class:`SiteSettings`' field descriptions): 1. the site's environment (``DPATE_`` + the setting's
name, e.g. ``DPATE_LEDGER_URL``), 2. the site config file, 3. a fallback that only a local run
has for the ledger, the data and the publication root. Over all three, a local command's own
options (:func:`command_options`).

The site config file is a TOML file named by ``DPATE_SITE_CONFIG`` (e.g. ``/etc/dpate/site.toml``).
Values may contain ``{site}`` and ``{study}`` (one worker serving several sites). ``DPATE_HOME``
defaults to ``$XDG_DATA_HOME/dpate`` or ``~/.local/share/dpate``. The spec's ``ledger`` fields are
ignored: a ledger's location is a site setting only. The local command line (``dpate run
--ledger``, ``dpate site-release --data``) is the site operator: its options are this command's
settings (:func:`command_options`, a context variable: the flows it runs in its own process and
their task threads see them; the process environment is not changed).

A *deployed* run is one started by a Prefect worker (``PREFECT__FLOW_RUN_ID`` in the process
environment) or from a deployment: there nothing falls back to the spec or to a default ledger,
and the ``spec`` parameter is a spec hash the site's operator approved (:mod:`dpate.site.approvals`),
never a path or URL.

Every name is imported from this package; its modules are private: :class:`SiteSettings`, its
sources and the docs' table in ``_site_settings``, a run's contexts and their resolvers in
``_context``.
"""

from dpate.settings._context import (
    SiteContext,
    SiteRun,
    StudyContext,
    is_deployed_process,
    load_study_spec,
    resolve_site,
    resolve_study,
    site_key_path,
    site_ledger_url,
    validate_round,
)
from dpate.settings._site_settings import (
    IDENTIFIER,
    Identifier,
    SettingsError,
    SiteSettings,
    command_options,
    dpate_home,
    settings_table,
    site_config,
)

__all__ = [
    "IDENTIFIER",
    "Identifier",
    "SettingsError",
    "SiteContext",
    "SiteRun",
    "SiteSettings",
    "StudyContext",
    "command_options",
    "dpate_home",
    "is_deployed_process",
    "load_study_spec",
    "resolve_site",
    "resolve_study",
    "settings_table",
    "site_config",
    "site_key_path",
    "site_ledger_url",
    "validate_round",
]
