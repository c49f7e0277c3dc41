"""The guide installs everything from the package ("nothing to clone"): the built wheel holds
the deployments, the example spec the guide deploys, and the storage and systemd files; the
site-scheduled release units (timer + service) parse and run the command they claim to. The wheel
installs one import namespace: ``dpate.schemas``, ``dpate.tasks``, ``dpate.flows`` and
``dpate.deployments`` (from the top-level folders), never top-level packages of those names."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.checkouts import copy_checkout
from tests.topology.guide import Machine, env_file, systemd_unit

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

SHIPPED = [
    "deployments/prefect.yaml",
    "deployments/orchestrate.py",
    "deployments/automations.py",
    "deployments/files.py",
    "deployments/site_worker.py",
    "deployments/site_runner.py",
    "deployments/examples/star.toml",
    "deployments/storage/config.py",
    "deployments/storage/weed-mini.options",
    "deployments/storage/nginx-s3.conf",
    "deployments/storage/seaweedfs.service",
    "deployments/systemd/dpate-worker.service",
    "deployments/systemd/dpate-site-worker.service",
    "deployments/systemd/prefect-server.service",
    "deployments/systemd/worker.env.example",
    "deployments/systemd/dpate-release.service",
    "deployments/systemd/dpate-release.timer",
    "deployments/systemd/release.env.example",
]
SYSTEMD = REPO / "deployments" / "systemd"


MAPPED = ("schemas", "tasks", "flows", "deployments")

_IMPORTS = """
import json, sys
import dpate.schemas.spec, dpate.tasks.site, dpate.flows.study, dpate.deployments.files
import dpate.deployments.storage.config, dpate.cli.main, dpate_core.release
print(json.dumps({
    "files": {m: sys.modules[m].__file__ for m in ("dpate.schemas.spec", "dpate.flows.study")},
    "here": str(dpate.deployments.files.HERE),
    "shipped": [str(p) for p in dpate.deployments.files.shipped_files()],
    "top_level": sorted(m for m in sys.modules if m.split(".")[0] in __MAPPED__),
}))
""".replace("__MAPPED__", repr(MAPPED))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout (a stale build/ folder of the checkout would
    otherwise reach it: setuptools does not empty build/lib)."""
    src = tmp_path_factory.mktemp("src")
    copy_checkout(src / "dpate")
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "-w", str(out), "--no-deps", "-q"],
        cwd=src / "dpate",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (built,) = out.glob("dpate-*.whl")
    return built


def test_wheel_ships_the_deployment_files(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for path in SHIPPED:
            assert f"dpate/{path}" in names, path
            assert z.read(f"dpate/{path}") == (REPO / path).read_bytes(), path
        # the HTML report's template (dpate/html_report.py loads it from the package)
        template = "dpate/templates/report.html.j2"
        assert z.read(template) == (REPO / template).read_bytes()


def test_wheel_installs_one_namespace(wheel, tmp_path):
    """Every module of the four folders is in the wheel under ``dpate/``; the wheel's top level is
    ``dpate`` and ``dpate_core`` only (``top_level.txt`` too). Installed on its own (``pip install
    --target``, ahead of the editable checkout on the path) and imported from another folder,
    ``dpate.schemas`` & co. come from it, the shipped deployment files are found next to
    ``dpate.deployments.files``, and no top-level ``schemas``/``tasks``/... is imported."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert z.read(top_level).decode().split() == ["dpate", "dpate_core"]
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"dpate", "dpate_core"}
    for name in MAPPED:
        for source in (REPO / name).rglob("*.py"):
            rel = source.relative_to(REPO)
            if "__pycache__" not in rel.parts:
                assert f"dpate/{rel}" in names, rel

    target = tmp_path / "site"
    res = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert not {p.name for p in target.iterdir()} & set(MAPPED)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = subprocess.run(
        [sys.executable, "-c", _IMPORTS],
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for module, file in out["files"].items():
        assert Path(file).is_relative_to(target), (module, file)
    assert Path(out["here"]) == target / "dpate" / "deployments"
    assert {p.removeprefix("deployments/") for p in SHIPPED if not p.endswith(".py")} <= set(
        out["shipped"]
    )
    assert out["top_level"] == []


def test_files_lists_and_copies_the_shipped_files(tmp_path):
    from dpate.deployments.files import main, shipped_files

    rel = {str(p) for p in shipped_files()}
    assert {p.removeprefix("deployments/") for p in SHIPPED if not p.endswith(".py")} <= rel
    assert main(["--copy", str(tmp_path)]) == 0
    assert (tmp_path / "prefect.yaml").read_bytes() == (
        REPO / "deployments" / "prefect.yaml"
    ).read_bytes()
    assert main(["--copy", str(tmp_path)]) == 1  # never overwrites an edited copy


def _unit(path: Path) -> dict[str, dict[str, list[str]]]:
    return systemd_unit(path.read_text())


def test_release_timer_and_service_parse():
    timer = _unit(SYSTEMD / "dpate-release.timer")
    assert timer["Timer"]["Unit"] == ["dpate-release.service"]
    assert timer["Timer"]["OnCalendar"] == ["*-*-01 06:00:00 UTC"]  # prefect.yaml's monthly cron
    assert timer["Install"]["WantedBy"] == ["timers.target"]
    service = _unit(SYSTEMD / "dpate-release.service")["Service"]
    assert service["Type"] == ["oneshot"] and service["User"] == ["dpate"]
    assert service["EnvironmentFile"] == ["/etc/dpate/release.env"]
    assert service["ProtectSystem"] == ["strict"] and service["NoNewPrivileges"] == ["true"]
    env = env_file(SYSTEMD / "release.env.example")
    assert (
        "PREFECT_API_URL" not in env
    )  # an embedded Prefect: the coordinator's server is not asked
    assert {"DPATE_SITE", "DPATE_SPEC", "DPATE_SITE_CONFIG", "PREFECT_HOME"} <= set(env)
    _numba_cache_is_writable(service, env)


def _numba_cache_is_writable(service: dict, env: dict) -> None:
    """numba's compiled-code cache must sit where the unit may write: under ProtectSystem=strict
    and ProtectHome=true its default places (the package's __pycache__, ~/.cache) are not, and
    dpate_core could not even be imported."""
    writable = " ".join(service["ReadWritePaths"]).split()
    assert any(env["NUMBA_CACHE_DIR"].startswith(w + "/") for w in writable), env


def test_release_service_runs_dpate_site_release(tmp_path):
    """ExecStart, unescaped as systemd does ($$ and %% are $ and %), run through its shell with
    the example environment and a stand-in for /opt/dpate/bin/dpate: the arguments reach
    ``dpate site-release`` intact and its command line accepts them."""
    from typer.main import get_command

    from dpate.cli.main import app

    (line,) = _unit(SYSTEMD / "dpate-release.service")["Service"]["ExecStart"]
    argv = shlex.split(line.replace("$$", "$").replace("%%", "%"))
    assert argv[:2] == ["/bin/sh", "-c"] and "/opt/dpate/bin/dpate site-release" in argv[2]
    stub = tmp_path / "dpate"
    stub.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    stub.chmod(0o755)
    env = {**env_file(SYSTEMD / "release.env.example"), "PATH": os.environ["PATH"]}
    env["DPATE_SPEC"] = "s3://dpate/specs/a study.toml"  # a space survives the quoting
    script = argv[2].replace("/opt/dpate/bin/dpate", str(stub))
    res = subprocess.run(
        [shutil.which("sh") or "/bin/sh", "-c", script], env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    args = json.loads(res.stdout)
    assert args[:4] == ["site-release", env["DPATE_SPEC"], "--site", "rural"]
    assert args[4] == "--round" and re.fullmatch(r"\d{4}-\d{2}", args[5]), args
    command = get_command(app).commands["site-release"]  # type: ignore[attr-defined]
    ctx = command.make_context("site-release", args[1:])
    assert ctx.params["site"] == "rural" and ctx.params["round"] == args[5]


def test_site_worker_unit_runs_dpate_site_worker():
    """The site's unit: ``dpate site worker ${DPATE_SITE}`` (its command line accepts it), stopped
    by one SIGTERM, no ExecStop sequence; the example environment names the site, not a pool,
    and sets the heartbeats itself (a deployment's job variables do not reach its runs)."""
    from typer.main import get_command

    from dpate.cli.main import app

    service = _unit(SYSTEMD / "dpate-site-worker.service")["Service"]
    assert service["ExecStart"] == ["/opt/dpate/bin/dpate site worker ${DPATE_SITE}"]
    assert service["KillSignal"] == ["SIGTERM"] and "ExecStop" not in service
    assert service["EnvironmentFile"] == ["/etc/dpate/worker.env"]
    env = env_file(SYSTEMD / "worker.env.example")
    assert env["DPATE_SITE"] == "rural" and "DPATE_POOL" not in env
    assert env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"
    assert {"PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "DPATE_SITE_CONFIG"} <= set(env)
    _numba_cache_is_writable(service, env)
    site = get_command(app).commands["site"]  # type: ignore[attr-defined]
    ctx = site.commands["worker"].make_context("worker", [env["DPATE_SITE"]])
    assert ctx.params["site"] == "rural" and ctx.params["pool"] is None


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_accepts_the_release_units(tmp_path):
    for name in ("dpate-release.service", "dpate-release.timer"):
        shutil.copy(SYSTEMD / name, tmp_path / name)
    res = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            "./dpate-release.service",
            "./dpate-release.timer",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and "ignoring" not in res.stderr, res.stderr


def test_release_service_releases_with_the_sites_own_configuration(tmp_path, monkeypatch):
    """The guide's site-scheduled release, as written (its ``site-release`` block: release.env,
    the units, the timer enabled; tests/topology/guide.py), then the installed service's command
    as the timer starts it: an embedded Prefect (no PREFECT_API_URL), the site's settings from
    its site.toml only, the spec a local copy. It releases the month's round once, publishes
    under the site's own storage (not the spec's `reports`), and the ledger then verifies
    against the published head."""
    from typer.testing import CliRunner

    from dpate.cli.main import app
    from tests.pipeline.studies import Site, write_study

    study = write_study(tmp_path / "study", [Site("rural", 400)], study_id="svc-study")
    study.init_ledgers()
    site = Machine(
        root=tmp_path / "site",
        prefect_api="http://127.0.0.1:9/api",  # not used: the release has no Prefect server
        s3_endpoint="http://127.0.0.1:9",  # not used: it publishes to a local folder here
        fill={"rural accessKey": "AK", "rural secretKey": "SK"},
    )
    site_root = site.root
    site.path("/etc/dpate").mkdir(parents=True)  # the guide's site step 1
    site.run("site-release")
    assert "enable --now dpate-release.timer" in (site_root / "systemctl.log").read_text()
    config = site.path("/etc/dpate/site.toml")
    config.write_text(
        f'sites = ["rural"]\n'
        f'data = "{study.root / "sites" / "rural" / "records.parquet"}"\n'
        f'ledger = "{study.ledger_url("rural")}"\n'
        f'storage = "{site_root / "published"}"\n'
        f'log = "{site_root / "rural.log"}"\n'
        f'site_key = "{study.key_path("rural")}"\n'
    )
    env = env_file(site.path("/etc/dpate/release.env"))
    assert env["DPATE_SITE_CONFIG"] == str(config)
    env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
    env.update(DPATE_SPEC=str(study.spec), HOME=str(site_root), PATH=os.environ["PATH"])
    (line,) = _unit(site.path("/etc/systemd/system/dpate-release.service"))["Service"]["ExecStart"]
    argv = shlex.split(line.replace("$$", "$").replace("%%", "%"))
    script = argv[2].replace("/opt/dpate/bin/dpate", str(Path(sys.executable).parent / "dpate"))
    res = subprocess.run(
        ["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "report published" in " ".join(res.stdout.split())
    (report,) = (site_root / "published" / "svc-study" / "sites" / "rural").glob("*.json")
    assert not study.published.exists()  # the spec's `reports` was not used
    from dpate.ledger import PrivacyLedger

    with PrivacyLedger(study.ledger_url("rural")) as led:
        (reserve,) = [e for e in led.events("rural") if e.kind == "RESERVE"]
    assert re.fullmatch(r"\d{4}-\d{2}", reserve.round or ""), reserve.round  # the UTC month
    assert report.stem == reserve.release_id

    for name, value in env.items():
        if name.startswith("DPATE_"):
            monkeypatch.setenv(name, value)
    checked = CliRunner().invoke(app, ["ledger", "verify", "rural", "--against-reports"])
    assert checked.exit_code == 0, checked.output
    assert "matches all 1 published head(s)" in checked.output
