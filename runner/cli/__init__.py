"""The ``flow-runner`` command line (typer): the root is :mod:`runner.cli.app`, one module
per command beside it. Importing this package imports none of them:
:mod:`runner.cli.head_start` runs before the command's own imports."""
