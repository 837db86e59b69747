"""The ``flow-runner`` command line (typer); exit statuses: see :mod:`runner.cli.app`.

Importing the package registers no command: the app imports a command's module when the
command is run or listed (:class:`runner.cli.app.LazyCommands`), so ``exec`` pays for
``exec`` alone. Heavy modules (docker-py, anyio, pydantic) stay inside the commands, so
``--version`` and ``--help`` are instant and ``exec`` pays only for what it uses.
"""

from runner.cli.app import app, main

__all__ = ["app", "main"]
