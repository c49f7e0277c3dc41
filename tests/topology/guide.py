"""The commands of docs/how-to/deploying.md as the topology tests run them: each fenced block preceded by
``<!-- guide-test: NAME -->`` is extracted verbatim and run with bash (or written, for a TOML
block), after replacing only what differs between a real machine and a test's temporary folder
(docs/how-to/deploying.md, "Testing this topology"):

* ``/opt/dpate`` is the test's virtual environment (``sys.prefix``);
* every other absolute folder of the guide (``/etc``, ``/var``, ``/srv``, ``/tmp``) lives under
  the machine's root folder: the coordinator's, or each site's own;
* the hosts and ports: the Prefect API and the S3 endpoint the test started;
* the guide's example site ``rural`` is the site being set up;
* ``sudo -u dpate`` is dropped: the test's user plays the ``dpate`` user;
* the placeholders in angle brackets (``<setup accessKey>``, ``<hash>``, ...) are the values the
  guide says to fill in.

Nothing else is changed: a command the guide gets wrong fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "deploying.md"
_MARKER = re.compile(r"^\s*<!-- guide-test: ([\w-]+) -->\s*$")
_FOLDERS = re.compile(r"(?<![\w.~-])/(etc|var|srv|tmp)/")
#: The guide's example site, replaced by the site being set up.
GUIDE_SITE = "rural"
#: The guide's hosts: the Prefect API and the S3 endpoint as the coordinator and the sites see them.
PREFECT_URLS = ("https://prefect.coordinator.example/api", "http://127.0.0.1:4200/api")
S3_URLS = ("https://s3.coordinator.example", "http://127.0.0.1:8333")


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
        for name, value in self.fill.items():
            text = text.replace(f"<{name}>", value)
        if left := re.findall(r"<[a-z][\w .-]*>", text):
            raise ValueError(f"guide placeholders left unfilled: {sorted(set(left))}")
        return text

    def run(
        self, *names: str, env: Mapping[str, str] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        """Run the guide's blocks ``names`` in one bash (``set -euo pipefail``) on this machine;
        raises with the script and its output when it fails."""
        blocks = guide_blocks()
        script = "set -euo pipefail\n" + "".join(self.adapt(blocks[n]) for n in names)
        self.root.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            ["bash", "-c", script],
            env={**os.environ, **(env or {})},
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if res.returncode != 0:
            raise RuntimeError(
                f"guide blocks {names} failed ({res.returncode}):\n{script}\n"
                f"--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"
            )
        return res

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


def env_file(path: Path) -> dict[str, str]:
    """A systemd ``EnvironmentFile`` (``KEY=value`` lines, ``#`` comments) as a mapping."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out
