"""Plug-ins: a distribution that declares a module in the entry-point group ``dpate.plugins``
has its estimators and aggregators registered before any study spec is read (dpate.plugins);
here a distribution made on the fly declares the toys of the registry contract."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpate_core.aggregation as aggregators
import dpate_core.mechanisms as mechanisms
from dpate.plugins import GROUP, load_plugins
from dpate.schemas.spec import StudySpec

from .test_registry_contract import spec_dict

PLUGIN = """
from dpate_core.aggregation import register as register_aggregator
from dpate_core.mechanisms import register

from tests.tasks.toy_aggregator import MEDIAN_SITE
from tests.tasks.toy_estimator import TOY

register(TOY)
register_aggregator(MEDIAN_SITE)
"""


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "dpate_toy_plugin.py").write_text(PLUGIN, encoding="utf-8")
    info = tmp_path / "dpate_toy_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dpate-toy-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\ntoys = dpate_toy_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    load_plugins.cache_clear()
    try:
        yield
    finally:
        load_plugins.cache_clear()
        for name, unregister in (
            ("toy", mechanisms.unregister),
            ("median_site", aggregators.unregister),
        ):
            try:
                unregister(name)
            except ValueError:
                pass


def test_a_declared_plugin_is_loaded_before_a_spec_is_read(installed_plugin):
    assert "toy" not in mechanisms.ESTIMATORS
    spec = StudySpec.from_dict(spec_dict_toy())
    assert spec.estimator_info.name == "toy" and spec.aggregator == "median_site"
    assert load_plugins() == ("toys",)  # once per process: the module is not imported again


def spec_dict_toy() -> dict:
    from .toy_estimator import TOY

    mechanisms.register(TOY)  # spec_dict reads the registry; the spec then loads the plug-in
    try:
        d = spec_dict("toy", "mvagg")
    finally:
        mechanisms.unregister("toy")
    d["aggregator"] = "median_site"
    return d
