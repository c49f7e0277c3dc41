"""``python -m dpate.cli``: the ``dpate`` command line."""

import sys

from dpate.cli.main import app

sys.exit(app())
