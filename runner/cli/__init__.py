"""The ``flow-runner`` command line (typer); exit statuses: see :mod:`runner.cli.app`.

Importing the package registers every command: each module of a command adds it to the
app it imports from :mod:`runner.cli.app`, in the order ``--help`` lists them. Heavy
modules (docker-py, anyio, pydantic) stay inside the commands, so ``--version`` and
``--help`` are instant and ``exec`` pays only for what it uses.
"""

from runner.cli import exec, batch, admin, policy, job, k8s, daemon  # noqa: F401, I001  (order: --help's)
from runner.cli.app import app, main

__all__ = ["app", "main"]
