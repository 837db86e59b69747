"""``python -m runner.cli``: the console script's entry point."""

from runner.cli.app import main

main()
