"""The ``dpate`` command line (typer): :mod:`dpate.cli.main` builds the app.

Kept empty at import, so that importing one command's module loads nothing else.
"""
