"""Where the deployment files shipped with dpate are, and a copy to edit (docs/how-to/deploying.md).

    python -m dpate.deployments.files             # list the shipped files with their paths
    python -m dpate.deployments.files --copy DIR  # copy them to DIR (refuses to overwrite)

Shipped: ``prefect.yaml`` (deployments of the example study), ``examples/star.toml`` (its spec),
``storage/`` (SeaweedFS options, systemd unit, nginx TLS proxy; ``config.py`` writes s3.json and
security.toml), ``systemd/`` (the site's ``dpate-site-worker.service`` and its
``worker.env.example``, the coordinator's ``dpate-worker.service`` and Prefect server unit; the
site-scheduled release: ``dpate-release.timer`` and ``.service``, ``release.env.example``).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

__all__ = ["HERE", "shipped_files"]

HERE = Path(__file__).resolve().parent
_PATTERNS = ("prefect.yaml", "examples/*.toml", "storage/*", "systemd/*")


def shipped_files() -> list[Path]:
    """The deployment files (relative to this folder), without Python sources."""
    out: set[Path] = set()
    for pattern in _PATTERNS:
        for path in HERE.glob(pattern):
            if path.is_file() and path.suffix not in (".py", ".pyc"):
                out.add(path.relative_to(HERE))
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpate.deployments.files", description=__doc__)
    ap.add_argument("--copy", metavar="DIR", help="copy the files to DIR (must not hold them)")
    args = ap.parse_args(argv)
    files = shipped_files()
    if not args.copy:
        for rel in files:
            print(HERE / rel)
        return 0
    dest = Path(args.copy)
    clash = [rel for rel in files if (dest / rel).exists()]
    if clash:
        print(f"{dest} already holds {', '.join(map(str, clash))}; choose an empty folder")
        return 1
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(HERE / rel, dest / rel)
    print(f"copied {len(files)} files to {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
