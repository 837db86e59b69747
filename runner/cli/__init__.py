"""The ``flow-runner`` command line (typer): see :mod:`runner.cli.app`."""

from runner.cli.app import app, main

__all__ = ["app", "main"]
