"""The experiments package stays light at import: the ``dpate`` command line registers
``dpate experiments`` from it without loading numpy, pandas, matplotlib or the core."""

from __future__ import annotations

import subprocess
import sys


def test_cli_module_imports_nothing_heavy():
    code = (
        "import sys, dpate, dpate.experiments, dpate.experiments.cli\n"
        "heavy = [m for m in ('numpy', 'pandas', 'matplotlib', 'prefect', 'dpate_core') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""
