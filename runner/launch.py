"""The ``flow-runner`` console script: the command goes to a warm runner, else runs here.

It imports only the standard library's cheapest parts and :mod:`runner.warm`'s client
before the hand-off; refused or not found, the command runs here
(:func:`runner.cli.app.main`, imported only then), an ``exec`` with its container started
first (:mod:`runner.cli.head_start`). ``daemon serve`` is the warm runner itself, reached
before any command-line parsing.

A command run here starts with the cyclic collector paused, since its imports live as
long as the process; :func:`runner.cli.app.before_loop` turns it on before the
event loop starts.
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

    A Ctrl-C before the command has its own handlers ends it with status 130 and no
    traceback; nothing is left, since the loop cancels (and cleans up) a started run first.
    """
    try:
        if sys.argv[1:3] == ["daemon", "serve"]:
            from runner.warm.server import serve

            serve(sys.argv[3:], _load)
        gc.disable()  # until the command's imports are done: runner.cli.app.before_loop
        from runner.warm.client import hand_off

        status = hand_off()
        if status is not None:
            os._exit(status)
        import signal  # the command imports it anyway

        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored
            signal.signal(signal.SIGINT, _interrupted)  # to runner.cli.app.before_loop
        from runner.cli import head_start

        head_start.begin(sys.argv, os.environ)  # a container started while the CLI imports
        try:
            from runner.cli.app import main as run_here

            run_here(head_start.end)
        finally:  # reached by an exception only: main ends the process with os._exit
            head_start.end()
    except KeyboardInterrupt:
        _interrupted(0, None)


def _interrupted(signum: int, frame: object) -> NoReturn:
    """A Ctrl-C before the command's event loop, in process: nothing the command made needs
    cleaning up yet but a container started ahead (:func:`runner.cli.head_start.abandon`),
    so it ends here and now. A KeyboardInterrupt raised instead could land where Python
    ignores exceptions (an import's callback), and the command would run on."""
    head_start = sys.modules.get("runner.cli.head_start")  # perhaps still being imported
    try:
        getattr(head_start, "abandon", lambda: None)()
    finally:
        os._exit(EXIT_CANCELLED)


def _load() -> Callable[[Callable[[int], object]], object]:
    from runner.cli.daemon import preload

    return preload()


if __name__ == "__main__":
    main()
