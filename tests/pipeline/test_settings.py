"""Only the site decides where its ledger, data and publication root are (dpate.settings):
the precedence environment > site config file > (local runs only) spec or default."""

from __future__ import annotations

import shutil

import pytest

from dpate.settings import SettingsError, SiteRun, dpate_home, resolve_site
from tests.pipeline.studies import Site, write_study


@pytest.fixture
def study(tmp_path):
    return write_study(tmp_path / "a", [Site("north", 50), Site("south", 50)])


def approved(study, tmp_path, monkeypatch) -> str:
    """The study's spec approved at site north (``dpate site approve``): the hash a deployed run
    names it by."""
    from dpate.site.approvals import approve_spec

    monkeypatch.setenv("DPATE_SPECS", str(tmp_path / "approved"))
    monkeypatch.setenv("DPATE_SITE_KEY", str(study.key_path("{site}")))  # the site's own key
    return approve_spec(str(study.spec), site="north").spec_hash


def test_default_ledger_is_per_site_per_machine_not_per_spec_folder(study, tmp_path, monkeypatch):
    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "home"))
    copy = tmp_path / "b"
    shutil.copytree(study.root, copy)
    a = resolve_site(str(study.spec), "north")
    b = resolve_site(str(copy / "study.toml"), "north")
    assert a.ledger_url == b.ledger_url == f"sqlite:///{tmp_path / 'home/ledgers/north.sqlite'}"
    assert a.log_path == str(tmp_path / "home" / "logs" / "north.log")
    assert a.data_location == str(study.root / "sites" / "north" / "records.parquet")
    assert a.storage_url == str(study.root / "published")


def test_dpate_home_defaults_to_xdg_data_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DPATE_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert dpate_home() == tmp_path / "xdg" / "dpate"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert dpate_home() == tmp_path / "h" / ".local" / "share" / "dpate"


def test_environment_over_config_file_and_templates(study, tmp_path, monkeypatch):
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        f'ledger = "sqlite:///{tmp_path}/cfg/{{site}}.sqlite"\n'
        f'data = "{tmp_path}/data/{{study}}-{{site}}.parquet"\n'
        f'storage = "{tmp_path}/pub"\nlog = "{tmp_path}/log/{{site}}.log"\n'
    )
    monkeypatch.setenv("DPATE_SITE_CONFIG", str(cfg))
    ctx = resolve_site(approved(study, tmp_path, monkeypatch), "north", deployed=True)
    assert ctx.ledger_url == f"sqlite:///{tmp_path}/cfg/north.sqlite"
    assert ctx.data_location == f"{tmp_path}/data/test-study-north.parquet"
    assert ctx.storage_url == f"{tmp_path}/pub" and ctx.log_path == f"{tmp_path}/log/north.log"
    monkeypatch.setenv("DPATE_LEDGER_URL", f"sqlite:///{tmp_path}/env.sqlite")
    assert resolve_site(str(study.spec), "north").ledger_url == f"sqlite:///{tmp_path}/env.sqlite"
    cfg.write_text('ledger_url = "x"\n')
    with pytest.raises(SettingsError, match="unknown keys"):
        resolve_site(str(study.spec), "north")


def test_a_command_s_options_over_the_environment_in_its_context_only(study, tmp_path, monkeypatch):
    """``dpate run --ledger``: the command's options (:func:`command_options`) win over the
    environment for what runs in the command's context, Prefect's task threads included, and
    leave the process environment and other threads alone."""
    import os
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from contextvars import copy_context

    from dpate.settings import SiteSettings, command_options, resolve_study

    monkeypatch.setenv("DPATE_LEDGER_URL", f"sqlite:///{tmp_path}/env.sqlite")
    given = f"sqlite:///{tmp_path}/cli.sqlite"
    seen: dict[str, str] = {}
    with command_options(ledger_url=given, storage_url=str(tmp_path / "pub"), data_path=None):
        assert resolve_site(str(study.spec), "north").ledger_url == given
        assert SiteSettings.load().source("ledger_url") == "the command line"
        assert resolve_study(str(study.spec)).storage_url == str(tmp_path / "pub")
        assert os.environ["DPATE_LEDGER_URL"] == f"sqlite:///{tmp_path}/env.sqlite"
        with ThreadPoolExecutor(1) as pool:  # as Prefect's thread-pool task runner submits
            ctx = copy_context()
            seen["task"] = pool.submit(ctx.run, lambda: SiteSettings.load().ledger_url).result()
        other = threading.Thread(target=lambda: seen.update(other=SiteSettings.load().ledger_url))
        other.start()
        other.join()
    assert seen == {"task": given, "other": f"sqlite:///{tmp_path}/env.sqlite"}
    assert resolve_site(str(study.spec), "north").ledger_url == f"sqlite:///{tmp_path}/env.sqlite"
    with pytest.raises(ValueError, match="not site settings"), command_options(ledger="x"):
        pass


def test_deployed_run_takes_nothing_from_the_spec_or_defaults(study, tmp_path, monkeypatch):
    spec = approved(study, tmp_path, monkeypatch)
    with pytest.raises(SettingsError, match="data location only from the site"):
        resolve_site(spec, "north", deployed=True)
    monkeypatch.setenv("DPATE_DATA_PATH", "/srv/{site}.parquet")
    with pytest.raises(SettingsError, match="DPATE_LEDGER_URL"):
        resolve_site(spec, "north", deployed=True)
    monkeypatch.setenv("DPATE_LEDGER_URL", "sqlite:////var/dpate/{site}.sqlite")
    with pytest.raises(SettingsError, match="DPATE_STORAGE_URL"):
        resolve_site(spec, "north", deployed=True)
    monkeypatch.setenv("DPATE_STORAGE_URL", "s3://bucket/studies")
    ctx = resolve_site(spec, "north", deployed=True)
    assert ctx.data_location == "/srv/north.parquet" and ctx.storage_url == "s3://bucket/studies"
    assert ctx.ledger_url == "sqlite:////var/dpate/north.sqlite"
    monkeypatch.delenv("DPATE_DATA_PATH")
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")  # the site's own choice
    assert resolve_site(spec, "north", deployed=True).data_location.endswith(
        "sites/north/records.parquet"
    )


def test_a_deployed_run_names_its_spec_by_an_approved_hash_only(study, tmp_path, monkeypatch):
    """A path, a URL or an unapproved hash is refused before anything is read, naming no path."""
    monkeypatch.setenv("DPATE_DATA_PATH", "/srv/{site}.parquet")
    monkeypatch.setenv("DPATE_LEDGER_URL", "sqlite:////var/dpate/{site}.sqlite")
    monkeypatch.setenv("DPATE_STORAGE_URL", "s3://bucket/studies")
    monkeypatch.setenv("DPATE_SPECS", str(tmp_path / "approved"))
    for spec in (str(study.spec), "/etc/dpate/site.toml", "http://127.0.0.1:5432/"):
        with pytest.raises(SettingsError, match="names its study spec by hash") as info:
            resolve_site(spec, "north", deployed=True)
        assert spec not in str(info.value) and str(tmp_path) not in str(info.value)
    with pytest.raises(SettingsError, match="is not approved at this site") as info:
        resolve_site("f" * 64, "north", deployed=True)
    assert str(tmp_path) not in str(info.value)
    spec = approved(study, tmp_path, monkeypatch)
    assert resolve_site(spec, "north", deployed=True).spec.spec_hash == spec


@pytest.mark.parametrize(
    "data", ["../outside.parquet", "/etc/records.parquet", "s3://b/x.parquet", "a/../../x.csv"]
)
def test_spec_data_must_stay_in_the_spec_folder_unless_the_site_allows(study, monkeypatch, data):
    text = study.spec.read_text().replace(
        'data = "sites/north/records.parquet"', f'data = "{data}"'
    )
    study.spec.write_text(text)
    with pytest.raises(SettingsError, match="DPATE_ALLOW_SPEC_DATA"):
        resolve_site(str(study.spec), "north")
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")
    resolve_site(str(study.spec), "north")
    monkeypatch.delenv("DPATE_ALLOW_SPEC_DATA")
    monkeypatch.setenv("DPATE_DATA_PATH", "/srv/north.parquet")  # the site's own setting wins
    assert resolve_site(str(study.spec), "north").data_location == "/srv/north.parquet"


def test_spec_ledger_fields_choose_nothing(study, tmp_path, monkeypatch):
    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "home"))
    text = study.spec.read_text().replace(
        'release = "1"', f'release = "1"\nledger = "sqlite:///{tmp_path}/spec-ledger.sqlite"'
    )
    study.spec.write_text(text)
    ctx = resolve_site(str(study.spec), "north")
    assert "spec-ledger" not in ctx.ledger_url and "home/ledgers/north.sqlite" in ctx.ledger_url


def test_a_worker_serves_only_its_sites_and_ids_are_validated(study, monkeypatch):
    monkeypatch.setenv("DPATE_SITES", "north")
    resolve_site(str(study.spec), "north")
    with pytest.raises(SettingsError, match="serves sites"):
        resolve_site(str(study.spec), "south")
    for bad in ({"round": "../x"}, {"site": "a/b"}, {"round": "1", "ledger_url": "x"}):
        with pytest.raises(ValueError):
            SiteRun.model_validate({"spec": "s.toml", "site": "north", **bad})


def test_sql_query_and_secret_block_name_are_site_settings(study, tmp_path, monkeypatch):
    """``data_query`` and ``data_secret`` in the site config file, like DPATE_DATA_QUERY and
    DPATE_DATA_SECRET (the environment wins); ``{site}`` and ``{study}`` are filled in."""
    for name in ("DPATE_DATA_QUERY", "DPATE_DATA_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")
    assert resolve_site(str(study.spec), "north").data_query is None
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        'data = "postgresql+psycopg://reader@db.local/cdm"\n'
        "data_query = \"SELECT * FROM cohorts WHERE site = '{site}'\"\n"
        'data_secret = "{study}-db"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DPATE_SITE_CONFIG", str(cfg))
    ctx = resolve_site(str(study.spec), "north")
    assert ctx.data_location == "postgresql+psycopg://reader@db.local/cdm"
    assert ctx.data_query == "SELECT * FROM cohorts WHERE site = 'north'"
    assert ctx.data_secret == "test-study-db"
    monkeypatch.setenv("DPATE_DATA_QUERY", "cdm.cohort")
    monkeypatch.setenv("DPATE_DATA_SECRET", "env-block")
    ctx = resolve_site(str(study.spec), "north")
    assert (ctx.data_query, ctx.data_secret) == ("cdm.cohort", "env-block")
    # a block's name, never its value, is in the context (a task parameter of the site flow)
    assert "env-block" in repr(ctx) and "password" not in repr(ctx)
