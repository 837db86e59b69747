"""The ``flow-runner`` console script: the command goes to a warm runner, else runs here.

This module and what it imports first are the standard library's cheapest parts and
:mod:`runner.warm`'s client: with no socket directory (no warm runner was ever started)
the hand-off costs one ``lstat``; with one, a digest of the installation and a
connection. Refused or not found, the command runs in this process:
:func:`runner.cli.main`, imported only then. ``daemon serve`` is the warm runner itself
(:mod:`runner.warm.server`), reached here before any command-line parsing.

A command run here starts with Python's cyclic garbage collector paused: its imports
make objects that live as long as the process, and passes over them would only cost a
cold ``exec`` time. The command turns the collector on, with what was made so far frozen
out of its passes, just before its event loop starts
(:func:`runner.cli.app.collect_from_here`), so a run is collected as ever.
"""

from __future__ import annotations

import gc
import os
import sys

from runner.exits import EXIT_CANCELLED

TYPE_CHECKING = False  # not typing's: the console script's path does without importing it
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn


def main() -> NoReturn:
    """Hand the command to a warm runner, else run it here.

    A Ctrl-C that comes before a command has its own handlers (during its imports)
    ends it with status 130 (the status of a Ctrl-C'd run) and no traceback. Nothing is
    left: before the event loop no container exists, and in the loop before the run's
    handlers, the loop cancels the run (its cleanup removes what it made) before the
    interrupt reaches here.
    """
    try:
        if sys.argv[1:3] == ["daemon", "serve"]:
            from runner.warm.server import serve

            serve(sys.argv[3:], _load)
        gc.disable()  # until the command's imports are done: runner.cli.app.collect_from_here
        from runner.warm.client import hand_off

        status = hand_off()
        if status is not None:
            os._exit(status)
        from runner.cli import main as run_here

        run_here()
    except KeyboardInterrupt:
        os._exit(EXIT_CANCELLED)


def _load() -> Callable[[], object]:
    from runner.cli.daemon import preload

    return preload()


if __name__ == "__main__":
    main()
