"""The commands of docs/how-to/deploying.md as the topology tests run them: each fenced block preceded by
``<!-- guide-test: NAME -->`` is extracted verbatim and run with bash (or written, for a TOML
block), after replacing only what differs between a real machine and a test's temporary folder
(docs/how-to/deploying.md, "Testing this topology"):

* ``/opt/dpate`` is the test's virtual environment (``sys.prefix``);
* every other absolute folder of the guide (``/etc``, ``/var``, ``/srv``, ``/tmp``) lives under
  the machine's root folder: the coordinator's, or each site's own;
* the hosts and ports: the Prefect API and the S3 endpoint the test started, and every port the
  guide names (``4200``, ``8333``, SeaweedFS's others) a free port of the test's;
* the Prefect server's PostgreSQL URL is the test's scratch database;
* the guide's example site ``rural`` is the site being set up;
* ``sudo -u dpate`` is dropped: the test's user plays the ``dpate`` user;
* the placeholders in angle brackets (``<setup accessKey>``, ``<hash>``, ...) are the values the
  guide says to fill in.

What needs root or systemd runs through stand-ins defined before the blocks: ``useradd`` and
``chown`` do nothing and ``install`` drops ``-o``/``-g`` (the test's user plays every system
user), and ``systemctl`` only records its arguments; a unit the block enabled (``systemctl enable
--now NAME``) is then started by the test from the file the block installed (:meth:`Machine.unit`:
its ``EnvironmentFile``, ``ExecStart``, ``WorkingDirectory``, ``KillSignal`` and ``ExecStop``).

Nothing else is changed: a command the guide gets wrong fails here."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.topology.services import Service, run_command

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "deploying.md"
_MARKER = re.compile(r"^\s*<!-- guide-test: ([\w-]+) -->\s*$")
_FOLDERS = re.compile(r"(?<![\w.~-])/(etc|var|srv|tmp)/")
#: The guide's example site, replaced by the site being set up.
GUIDE_SITE = "rural"
#: The guide's hosts: the Prefect API and the S3 endpoint as the coordinator and the sites see them.
PREFECT_URLS = ("https://prefect.coordinator.example/api", "http://127.0.0.1:4200/api")
S3_URLS = ("https://s3.coordinator.example", "http://127.0.0.1:8333")
#: The Prefect server's database URL of the guide (its step 3).
GUIDE_DATABASE = "postgresql+asyncpg://prefect:<password>@127.0.0.1/prefect"
#: The ports the guide names, by what listens there: the Prefect server, SeaweedFS's S3 gateway,
#: master, volume server, filer and admin (storage/weed-mini.options).
GUIDE_PORTS = {
    "prefect": 4200,
    "s3": 8333,
    "master": 9333,
    "volume": 9340,
    "filer": 8888,
    "admin": 23646,
}
#: Stand-ins for what needs root or systemd (bash functions defined before the blocks).
_STAND_INS = """\
useradd() { :; }
chown() { :; }
install() {
    local args=()
    while (($#)); do case $1 in -o|-g) shift 2 ;; *) args+=("$1"); shift ;; esac; done
    command install "${args[@]}"
}
systemctl() { echo "$*" >> "$GUIDE_SYSTEMCTL"; }
"""
#: Environment variables a unit's process does not inherit from the test (systemd starts it
#: with its ``EnvironmentFile`` only): Prefect's, dpate's and the S3 client's.
_NOT_INHERITED = ("PREFECT_", "DPATE_", "AWS_")


def guide_blocks(text: str | None = None) -> dict[str, str]:
    """Every marked block of the guide by name: the fenced block right after its marker line,
    without the list item's indentation."""
    lines = (GUIDE.read_text() if text is None else text).splitlines()
    blocks: dict[str, str] = {}
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if not m:
            continue
        fence = lines[i + 1]
        if not fence.lstrip().startswith("```"):
            raise ValueError(f"guide-test marker {m[1]!r} is not followed by a fenced block")
        body = []
        for inner in lines[i + 2 :]:
            if inner.strip() == "```":
                break
            body.append(inner)
        if m[1] in blocks:
            raise ValueError(f"two guide-test blocks named {m[1]!r}")
        blocks[m[1]] = textwrap.dedent("\n".join(body)) + "\n"
    return blocks


@dataclass
class Machine:
    """One machine of the guide (the coordinator, or a site) as a folder of the test."""

    root: Path
    prefect_api: str
    s3_endpoint: str
    site: str = GUIDE_SITE
    #: values of the guide's ``<...>`` placeholders
    fill: dict[str, str] = field(default_factory=dict)
    #: the test's port for each of :data:`GUIDE_PORTS` this machine runs
    ports: dict[str, int] = field(default_factory=dict)
    #: the test's database for the guide's :data:`GUIDE_DATABASE`
    database_url: str | None = None

    def path(self, guide_path: str) -> Path:
        """Where an absolute path of the guide is on this machine."""
        return Path(self.adapt(guide_path))

    def adapt(self, text: str) -> str:
        """The guide's text with this machine's folders, hosts, site and placeholders."""
        text = re.sub(rf"\b{GUIDE_SITE}\b", self.site, text)  # before any path of the test
        text = text.replace("sudo -u dpate ", "")
        text = text.replace("/opt/dpate", sys.prefix)
        text = _FOLDERS.sub(lambda m: f"{self.root}/{m[1]}/", text)
        for url in PREFECT_URLS:
            text = text.replace(url, self.prefect_api)
        for url in S3_URLS:
            text = text.replace(url, self.s3_endpoint)
        if self.database_url:
            text = text.replace(GUIDE_DATABASE, self.database_url)
        for what, port in self.ports.items():  # "--port 4200", "s3.port=8333", "host:4200"
            text = re.sub(rf"(?<=[:= ]){GUIDE_PORTS[what]}(?!\d)", str(port), text)
        for name, value in self.fill.items():
            text = text.replace(f"<{name}>", value)
        if left := re.findall(r"<[a-z][\w .-]*>", text):
            raise ValueError(f"guide placeholders left unfilled: {sorted(set(left))}")
        return text

    def run(
        self, *names: str, env: Mapping[str, str] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        """Run the guide's blocks ``names`` in one bash (``set -euo pipefail``, the stand-ins for
        root and systemd) on this machine; raises with the script and its output when it fails."""
        blocks = guide_blocks()
        script = "".join(self.adapt(blocks[n]) for n in names)
        self.path("/etc/systemd/system").mkdir(parents=True, exist_ok=True)
        return run_command(
            ["bash", "-c", f"set -euo pipefail\n{_STAND_INS}{script}"],
            env={**os.environ, **(env or {}), "GUIDE_SYSTEMCTL": str(self.root / "systemctl.log")},
            cwd=self.root,
            timeout=timeout,
            what=f"guide blocks {names}:\n{script}",
        )

    def adapt_file(self, guide_path: str) -> Path:
        """The operator's edit of a file the guide copied: this machine's folders and ports."""
        path = self.path(guide_path)
        path.write_text(self.adapt(path.read_text()))
        return path

    def unit(self, name: str, log_dir: Path, extra_env: Mapping[str, str] | None = None) -> Service:
        """The systemd unit ``name`` as the blocks' ``systemctl enable --now`` left it: the file
        installed in ``/etc/systemd/system/``, read as systemd would (its environment file only,
        ``${VAR}`` from it); ``extra_env`` adds the test's own settings. Not started."""
        log = self.root / "systemctl.log"
        enabled = log.read_text().splitlines() if log.exists() else []
        if not any(ln.startswith("enable --now") and name in ln.split()[2:] for ln in enabled):
            raise RuntimeError(f"no guide block ran 'systemctl enable --now {name}'")
        installed = self.path(f"/etc/systemd/system/{name}.service").read_text().splitlines()
        settings = [ln for ln in installed if not ln.lstrip().startswith(("#", ";"))]
        service = systemd_unit(self.adapt("\n".join(settings)))["Service"]  # not its comments
        env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
        for path in service.get("EnvironmentFile", []):
            env.update(env_file(Path(path)))
        env.update(extra_env or {})

        def command(line: str) -> list[str]:
            return shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: env[m[1]], line))

        (start,) = service["ExecStart"]
        (kill,) = service.get("KillSignal", ["SIGTERM"])
        stop = service.get("ExecStop")
        return Service(
            name=name,
            argv=command(start),
            env=env,
            log_path=log_dir / f"{name}.log",
            stop_signal=signal.Signals[kill],
            stop_command=command(stop[0]) if stop else None,
            cwd=Path(service.get("WorkingDirectory", [str(self.root)])[0]),
        )

    def write(self, name: str) -> Path:
        """Write the guide's file block ``name`` where its first comment line says."""
        text = self.adapt(guide_blocks()[name])
        first = text.splitlines()[0]
        if not first.startswith("# /"):
            raise ValueError(f"guide block {name!r} does not start with '# /path'")
        path = Path(first[2:].split()[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o600)
        return path


def systemd_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """A systemd unit file as {section: {key: [values]}} (keys may repeat); raises on a line that
    is neither a comment, a section header nor ``Key=value``."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if re.fullmatch(r"\[[A-Za-z]+\]", line):
            section = line[1:-1]
            out.setdefault(section, {})
            continue
        key, eq, value = line.partition("=")
        if not (eq and section and re.fullmatch(r"[A-Za-z]+", key)):
            raise ValueError(f"unit file line {n} is not 'Key=value' in a section: {line!r}")
        out[section].setdefault(key, []).append(value)
    return out


def env_file(path: Path) -> dict[str, str]:
    """A systemd ``EnvironmentFile`` (``KEY=value`` lines, ``#`` comments) as a mapping."""
    return env_file_text(path.read_text())


def env_file_text(text: str) -> dict[str, str]:
    """The text of a systemd ``EnvironmentFile`` as a mapping (:func:`env_file`)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out
