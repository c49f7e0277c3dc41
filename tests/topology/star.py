"""The deployed 4-site STAR study on real components: data files and ledgers per site, the spec in
the bucket, work pools, ``prefect deploy`` of deployments/prefect.yaml, one ``dpate site worker`` per
site (its site-local environment only) and the coordinator's Prefect process worker.

The STAR study of docs/how-to/deploying.md is set up by the guide's own commands (:mod:`tests.topology.guide`:
the marked blocks, run as written with this test's folders, ports and hosts), its Prefect server,
SeaweedFS and workers included (:meth:`StarTopology.by_the_guide_on`); on given
components, or with other sites or another publication root (bench/bench_topology.py), by the
equivalent Python calls."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.topology.guide import Machine, env_file
from tests.topology.services import (
    QUIET_PREFECT_ENV,
    WORKER_POLLING,
    PrefectServer,
    SeaweedS3,
    Service,
    create_process_pools,
    free_port,
    prefect_cli,
    run_command,
    start_site_worker,
    start_worker,
)

REPO = Path(__file__).resolve().parents[2]
PREFECT_YAML = REPO / "deployments" / "prefect.yaml"
#: The example spec the guide deploys (shipped in the package, deployments/examples/).
SHIPPED_SPEC = REPO / "deployments" / "examples" / "star.toml"
STAR_SITES = ("rural", "suburban", "inner-city", "urban")
STUDY_ID = "star-small-classes"
SPEC_KEY = "specs/star.toml"  # deployments/prefect.yaml: spec = s3://dpate/specs/star.toml
COORDINATOR_POOL = "dpate-server"
SITE_EPSILON = {"rural": "1", "suburban": "1", "inner-city": "1/2", "urban": "1/2"}


def star_spec_toml(sites: tuple[str, ...], reports: str) -> str:
    """The STAR study spec: difference in means (randomised), MVAgg; Y = entry-grade maths score
    on its declared public scale [200, 800] (offset 200, B = 600)."""
    lines = [
        "spec_version = 1",
        f'study_id = "{STUDY_ID}"',
        'title = "Small classes and entry-grade maths scores (Tennessee STAR), by urbanicity"',
        'design = "randomized"',
        'estimator = "dim"',
        "arm_sizes_public = true",
        'aggregator = "mvagg"',
        'missing = "reject"',
        'release = "1"',
        f'reports = "{reports}"',
        "require_all_sites = false",
        "",
        "[treatment]",
        'column = "small_class"',
        "",
        "[outcome]",
        'column = "math_score"',
        "offset = 200.0",
        "bound = 600.0",
        'policy = "reject"',
    ]
    for site in sites:
        lines += [
            "",
            "[[sites]]",
            f'id = "{site}"',
            f'data = "{site}/star.parquet"',
            f'epsilon = "{SITE_EPSILON.get(site, "1/2")}"',
            'delta = "0"',
            'lifetime_cap = { epsilon = "20", delta = "0" }',
        ]
    return "\n".join(lines) + "\n"


def write_star_sites(root: Path) -> dict[str, Path]:
    """Each STAR site's records as the site would hold them (raw scores), one file per site:
    what ``dpate data extracts star ROOT`` writes (docs/how-to/deploying.md)."""
    from dpate.data.extracts import write_star_extracts

    return write_star_extracts(root)


def site_key(root: Path, site: str) -> Path:
    """Where the site keeps its private report-signing key (its ``site_key``): where the guide's
    ``dpate site keygen SITE --out /etc/dpate`` writes it, on the site's machine ``root/SITE``."""
    return root / site / "etc" / "dpate" / f"{site}.ed25519.pem"


def with_site_keys(spec: str, root: Path, sites: tuple[str, ...]) -> str:
    """The spec text with each site's ``public_key`` (reports are signed by default): what each
    site's ``dpate site keygen SITE --spec`` does, the private key made at :func:`site_key`."""
    from dpate.signing import ensure_private_key, with_public_key

    for site in sites:
        key = site_key(root, site)
        key.parent.mkdir(parents=True, exist_ok=True)
        spec = with_public_key(spec, site, ensure_private_key(key))
    return spec


@dataclass
class StarTopology:
    server: PrefectServer
    s3: SeaweedS3
    root: Path
    sites: tuple[str, ...]
    data: dict[str, Path]
    workers: dict[str, Service] = field(default_factory=dict)
    #: the deployments to create (bench/bench_topology.py passes one with more sites)
    prefect_yaml: Path = PREFECT_YAML
    #: set the guide's STAR study up with the guide's own commands (:meth:`set_up_by_the_guide`;
    #: tests/topology/test_star_study.py), else with the equivalent Python calls (faster: the
    #: other files that only need the topology)
    by_the_guide: bool = False

    @classmethod
    def by_the_guide_on(cls, root: Path, data: dict[str, Path], database_url: str) -> StarTopology:
        """The guide's STAR study, its Prefect server (on ``database_url``) and SeaweedFS to be
        started by the guide's own commands (:meth:`set_up_by_the_guide`): the components are
        given their folders and free ports here and started by :meth:`set_up`."""
        s3 = SeaweedS3(root=root / "seaweed", bucket="dpate", studies={STUDY_ID: STAR_SITES})
        s3.pick_ports()
        server = PrefectServer(home=root / "prefect", port=free_port(), database_url=database_url)
        return cls(server=server, s3=s3, root=root, sites=STAR_SITES, data=data, by_the_guide=True)

    # -- site-local settings: what each site's IT puts in its worker's environment ------------

    @property
    def is_the_guides_study(self) -> bool:
        """Whether this is the guide's STAR study (its sites, bucket and deployments)."""
        return (
            self.sites == STAR_SITES
            and self.s3.storage_url == "s3://dpate/studies"
            and self.prefect_yaml == PREFECT_YAML
        )

    def machine(self, site: str) -> Machine:
        """The site's machine of the guide: the folder ``root/SITE``, with the values the
        coordinator gives the site once it has them (site step 7): the Prefect secret and the
        site's key pair of ``s3.json``."""
        fill = {"the Prefect secret": self.server.auth_string.split(":", 1)[1]}
        if site in self.s3.identities:
            fill[f"{site} accessKey"] = self.s3.identities[site].access_key
            fill[f"{site} secretKey"] = self.s3.identities[site].secret_key
        return Machine(
            root=self.root / site,
            prefect_api=self.server.api_url,
            s3_endpoint=self.s3.endpoint,
            site=site,
            fill=fill,
        )

    def coordinator(self) -> Machine:
        """The coordinator's machine of the guide (S3 on loopback, as there), with the values
        the guide says to fill in: the Prefect secret and, once step 2 wrote ``s3.json``, the
        setup and aggregator key pairs."""
        p = self.s3.ports
        secret = self.server.auth_string.split(":", 1)[1]
        fill = {"a long random secret": secret, "the same secret": secret}
        for name in ("setup", "aggregator"):
            if name in self.s3.identities:
                fill[f"{name} accessKey"] = self.s3.identities[name].access_key
                fill[f"{name} secretKey"] = self.s3.identities[name].secret_key
        return Machine(
            root=self.root / "coordinator",
            prefect_api=self.server.api_url,
            s3_endpoint=f"http://127.0.0.1:{p['s3']}",
            fill=fill,
            ports={"prefect": self.server.port, **{k: p[k] for k in p if k != "public"}},
            database_url=self.server.database_url,
        )

    def ledger_url(self, site: str) -> str:
        if self.by_the_guide:  # site.toml: ledger = "sqlite:////var/lib/dpate/ledger.sqlite"
            return f"sqlite:///{self.machine(site).path('/var/lib/dpate/ledger.sqlite')}"
        return f"sqlite:///{self.root / site / 'ledger.sqlite'}"

    def site_env(self, site: str) -> dict[str, str]:
        if self.by_the_guide:  # the unit's EnvironmentFile
            return env_file(self.machine(site).path("/etc/dpate/worker.env"))
        return {
            "DPATE_DATA_PATH": str(self.data[site]),
            "DPATE_LEDGER_URL": self.ledger_url(site),
            "DPATE_STORAGE_URL": self.s3.storage_url,
            "DPATE_SITE_LOG": str(self.root / site / "operator.log"),
            "DPATE_SPECS": str(self.root / site / "approved-specs"),
            "DPATE_SITE_KEY": str(site_key(self.root, site)),
            **self.s3.env_for(site),
        }

    def coordinator_env(self) -> dict[str, str]:
        return {"DPATE_STORAGE_URL": self.s3.storage_url, **self.s3.env_for("aggregator")}

    # -- components ----------------------------------------------------------------------------

    def start_site_worker(self, site: str) -> Service:
        """``dpate site worker SITE`` (deployments/systemd/dpate-site-worker.service): set up by
        the guide, the unit its site step 7 enabled, else with this topology's settings."""
        if self.by_the_guide:
            unit = self.machine(site).unit(
                "dpate-site-worker", self.root / "logs" / site, extra_env=WORKER_POLLING
            )
            self.workers[site] = unit.start()
            return unit
        self.workers[site] = start_site_worker(
            self.server,
            site,
            self.root / "logs",
            extra_env=self.site_env(site),
            cwd=self.root / site,
        )
        return self.workers[site]

    def approve(self, site: str, spec: str) -> str:
        """The site's operator: ``dpate site approve SPEC --site SITE``; the spec's hash."""
        out = run_command(
            [sys.executable, "-m", "dpate.cli", "site", "approve", spec, "--site", site],
            env={**os.environ, **self.site_env(site)},
        )
        return out.stdout.strip().splitlines()[-1]

    def stop_site_worker(self, site: str) -> None:
        self.workers[site].stop()

    def start_coordinator_worker(self) -> Service:
        self.workers[COORDINATOR_POOL] = start_worker(
            self.server,
            COORDINATOR_POOL,
            self.root / "logs",
            extra_env=self.coordinator_env(),
            cwd=self.root,
        )
        return self.workers[COORDINATOR_POOL]

    def set_up(self) -> StarTopology:
        if self.by_the_guide:
            if not self.is_the_guides_study:
                raise ValueError("only the guide's STAR study can be set up by the guide")
            self.set_up_by_the_guide()
            return self
        if self.is_the_guides_study:
            spec = SHIPPED_SPEC.read_text()  # what the guide uploads
        else:
            spec = star_spec_toml(self.sites, self.s3.storage_url)
        spec = with_site_keys(spec, self.root, self.sites)
        (self.root / "star.toml").write_text(spec)
        self.s3.client("setup").put_object(Bucket=self.s3.bucket, Key=SPEC_KEY, Body=spec.encode())
        # a pool for every site deployments/prefect.yaml deploys to (a file may use fewer sites:
        # tests/topology/test_star_failures.py), a worker only for the sites of this topology
        declared = STAR_SITES if self.prefect_yaml == PREFECT_YAML else ()
        create_process_pools(
            self.server,
            *dict.fromkeys((COORDINATOR_POOL, *(f"site-{s}" for s in (*self.sites, *declared)))),
        )
        prefect_cli(
            self.server, "deploy", "--all", "--prefect-file", str(self.prefect_yaml), cwd=REPO
        )
        with self.server.settings():  # the coordinator's one-time setup (docs/how-to/deploying.md)
            from dpate.deployments.automations import ensure_zombie_automation

            ensure_zombie_automation()
        from dpate.ledger import PrivacyLedger
        from dpate_core.privacy import PrivacyParams

        for site in self.sites:  # each site's IT: `dpate ledger init` before the first study
            PrivacyLedger.init(self.ledger_url(site), site, PrivacyParams.of("20", "0")).close()
            self.approve(site, str(self.root / "star.toml"))
            self.start_site_worker(site)
        self.start_coordinator_worker()
        return self

    def set_up_by_the_guide(self) -> None:
        """docs/how-to/deploying.md's commands for the coordinator and each site: the marked blocks as
        written (:mod:`tests.topology.guide`), the units they enable started from the files they
        installed; the one step that needs an editor (the coordinator's ``weed-mini.options``)
        done here as the guide describes it. The machines work side by side, as real ones would:
        each site up to its signing key, then its worker (step 7, which needs the values the
        coordinator gives: its S3 pair, the Prefect secret) and its approval (step 8, which needs
        the spec upload)."""
        from dpate.signing import with_public_key

        coordinator = self.coordinator()
        logs = self.root / "logs"
        sites = {s: self.machine(s) for s in self.sites}
        with ThreadPoolExecutor(max_workers=len(sites) + 1) as pool:
            keys = {site: pool.submit(self._site_before_approval, m) for site, m in sites.items()}
            coordinator.run("coordinator-files")
            # step 2's "change a port here if it is taken": the options name this machine's ports
            coordinator.adapt_file("/etc/dpate/deploy/storage/weed-mini.options")
            coordinator.run("coordinator-prefect")  # step 3; the unit starts while S3 is set up
            self.server.service = coordinator.unit("prefect-server", logs).start()
            coordinator.run("coordinator-storage")  # step 2
            self.s3.load_identities(coordinator.path("/etc/seaweedfs/s3.json"))
            self.s3.service = coordinator.unit("seaweedfs", logs)
            self.s3.start()  # with the forwarder, the stand-in for nginx
            self.server.start()  # healthy
            coordinator = self.coordinator()  # with the key pairs of s3.json
            home = {**QUIET_PREFECT_ENV, "PREFECT_HOME": str(coordinator.root / "prefect")}
            deployed = pool.submit(coordinator.run, "client-env", "coordinator-deploy", env=home)
            spec_file = coordinator.path("/etc/dpate/deploy/examples/star.toml")
            spec = spec_file.read_text()
            for site, key in keys.items():  # the line each site sent, pasted by the coordinator
                spec = with_public_key(spec, site, key.result())
            spec_file.write_text(spec)
            (self.root / "star.toml").write_text(spec)  # the same text, for tests reading it
            spec_hash = coordinator.run("coordinator-spec").stdout.split()[-1]
            sites = {s: self.machine(s) for s in self.sites}  # with the coordinator's values
            for m in sites.values():  # and the hash it gave for step 8
                m.fill["hash"] = spec_hash
            steps = [pool.submit(m.run, "site-worker", "site-approve") for m in sites.values()]
            for done in steps:  # site steps 7 and 8
                done.result()
            deployed.result()  # step 4 before step 5: the worker would create its pool itself
        coordinator.run("coordinator-worker")  # step 5
        self.workers[COORDINATOR_POOL] = coordinator.unit(
            "dpate-worker", logs, extra_env=WORKER_POLLING
        ).start()
        for site in self.sites:  # the units the sites' step 7 enabled
            self.start_site_worker(site)

    def _site_before_approval(self, m: Machine) -> str:
        """A site's steps 1 to 6 of the guide; the public key line it sends the coordinator."""
        for folder in ("/etc/dpate", "/var/lib/dpate", "/var/log/dpate", "/srv/dpate"):
            m.path(folder).mkdir(parents=True, exist_ok=True)  # steps 1 and 2 (install -d)
        # step 2: the site's extract, where site.toml's `data` names it
        shutil.copyfile(self.data[m.site], m.path(f"/srv/dpate/{STUDY_ID}.parquet"))
        ran = m.run("site-ledger", "site-key")  # steps 4 and 5
        line = r'^\s*public_key = "(ed25519:[^"]+)"   # site ' + re.escape(m.site) + "$"
        (public_key,) = re.findall(line, ran.stderr, re.M)
        m.write("site-config")  # step 6
        return public_key

    def tear_down(self) -> None:
        """Stop the workers, and the servers the guide's commands started."""
        for w in self.workers.values():
            with contextlib.suppress(Exception):
                w.stop()
        if self.by_the_guide:
            for component in (self.server, self.s3):
                with contextlib.suppress(Exception):
                    component.stop()

    # -- running and reading -------------------------------------------------------------------

    def run_study(self, round: str, timeout: float = 900, **params: Any):
        """Trigger ``study-deployed/star`` through the API and wait; returns the final flow run."""
        from prefect.deployments import run_deployment

        parameters = {"round": round, "poll_interval_s": 1.0, "site_timeout_s": 240, **params}
        with self.server.settings():
            return run_deployment(
                "study-deployed/star", parameters=parameters, timeout=timeout, poll_interval=1
            )

    def flow_runs(self, **filters: Any) -> list:
        from prefect.client.orchestration import get_client

        with self.server.settings():
            with get_client(sync_client=True) as client:
                return client.read_flow_runs(**filters)

    def result(self, round: str) -> dict[str, Any] | None:
        """The complete result of a round, else the partial one with the most sites."""
        fs = self.s3.filesystem("aggregator")
        base = f"{self.s3.bucket}/{self.s3.prefix}/{STUDY_ID}/results"
        try:
            names = fs.ls(base, detail=False, refresh=True)
        except FileNotFoundError:
            return None
        docs = [
            json.loads(fs.cat_file(n))
            for n in names
            if n.rsplit("/", 1)[-1].startswith(f"{round}.") and n.endswith(".json")
        ]
        if not docs:
            return None
        return max(docs, key=lambda d: (d["complete"], sum("tau" in s for s in d["sites"])))

    def site_reports(self, site: str) -> dict[str, bytes]:
        fs = self.s3.filesystem("aggregator")
        base = f"{self.s3.bucket}/{self.s3.prefix}/{STUDY_ID}/sites/{site}"
        try:
            names = fs.ls(base, detail=False, refresh=True)
        except FileNotFoundError:
            return {}
        return {n.rsplit("/", 1)[-1]: fs.cat_file(n) for n in names}

    def spend(self, site: str):
        from dpate.ledger import PrivacyLedger

        with PrivacyLedger(self.ledger_url(site)) as ledger:
            return ledger.spend(site)

    def events(self, site: str):
        from dpate.ledger import PrivacyLedger

        with PrivacyLedger(self.ledger_url(site)) as ledger:
            return ledger.events(site)


def run_embedded(
    spec: Path, data_root: Path, out: Path, round: str, prefect_env: Mapping[str, str] | None = None
) -> tuple[float, dict]:
    """The same study on the embedded default (``dpate run``: flows in the command's process,
    local storage, SQLite ledgers); returns (wall seconds, result document). Prefect's API is
    an ephemeral server the command starts, or the server ``prefect_env`` names (the tests pass
    the session's, ``prefect_test_server.env``)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "AWS_", "DPATE_"))
    }
    env.update(
        PREFECT_HOME=str(out / "prefect-home"),
        DPATE_DATA_PATH=str(data_root / "{site}" / "star.parquet"),
        DPATE_SITE_KEY=str(site_key(data_root, "{site}")),
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
        **(prefect_env or {}),
    )
    storage = out / "published"
    t0 = time.perf_counter()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpate.cli",
            "run",
            str(spec),
            "--round",
            round,
            "--storage",
            str(storage),
            "--ledger",
            f"sqlite:///{out}/ledgers/{{site}}.sqlite",
            "--init-ledgers",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"dpate run failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    results = sorted((storage / STUDY_ID / "results").glob(f"{round}*.json"))
    return wall, json.loads(results[0].read_bytes())
