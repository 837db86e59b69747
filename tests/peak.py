"""Run a command and write its own peak RSS (KiB) to a file: ``peak.py REPORT -- ARGV...``.

A child forked from a large process starts with that process's resident set counted in
its high-water mark (the kernel copies the parent's ``hiwater_rss`` at fork and folds it
into ``ru_maxrss`` at exec), so ``wait4`` on a child of the test process reports at least
pytest's own RSS, however small the child stays. This launcher is small: its child's
figure is the command's own. The command dies with the launcher (``PR_SET_PDEATHSIG``),
SIGINT and SIGTERM are passed on, and the launcher exits with the command's status.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    report, separator, *argv = sys.argv[1:]
    assert separator == "--" and argv, "usage: peak.py REPORT -- ARGV..."
    pid = os.fork()
    if pid == 0:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        os.execvp(argv[0], argv)
    for forwarded in (signal.SIGINT, signal.SIGTERM):
        signal.signal(forwarded, lambda number, _frame: os.kill(pid, number))
    _, status, usage = os.wait4(pid, 0)
    with open(report, "w") as out:
        out.write(f"{usage.ru_maxrss}\n")
    code = os.waitstatus_to_exitcode(status)
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
