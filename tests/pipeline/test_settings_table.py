"""docs/reference/pipeline.md's settings table is the one :class:`dpate.settings.SiteSettings` generates, and
a malformed setting is refused naming the setting and where it is set, never its value."""

from __future__ import annotations

import pytest

from dpate.settings import SettingsError, SiteSettings, settings_table
from tests.golden import REPO

DOCS = REPO / "docs" / "reference" / "pipeline.md"


def test_the_docs_settings_table_is_the_generated_one(golden):
    golden.same_block(DOCS, "settings table", settings_table())


def test_every_setting_is_described_and_named_by_its_variable(monkeypatch):
    for name, field in SiteSettings.model_fields.items():
        assert field.description, name
        monkeypatch.setenv(f"DPATE_{name.upper()}", "north" if name != "allow_spec_data" else "1")
    settings = SiteSettings.load()
    assert settings.sites == ("north",) and settings.allow_spec_data
    assert settings.source("ledger_url") == "DPATE_LEDGER_URL"


def test_a_malformed_setting_names_the_setting_and_the_file_not_the_value(tmp_path, monkeypatch):
    for name in SiteSettings.model_fields:
        monkeypatch.delenv(f"DPATE_{name.upper()}", raising=False)
    cfg = tmp_path / "site.toml"
    cfg.write_text('sites = 12345\ndata_secret = "hunter2-block"\n', encoding="utf-8")
    monkeypatch.setenv("DPATE_SITE_CONFIG", str(cfg))
    with pytest.raises(SettingsError, match="'sites' in the site configuration must be") as info:
        SiteSettings.load()
    assert str(cfg) in str(info.value)
    assert "12345" not in str(info.value) and "hunter2" not in str(info.value)
    cfg.write_text('sites = ["north"]\ndata_secret = "{site}-db"\n', encoding="utf-8")
    settings = SiteSettings.load()
    assert settings.for_site("north", "s").data_secret == "north-db"
    assert settings.source("data_secret") == f"{cfg} (data_secret)"
    assert settings.source("storage_url") == "default"
