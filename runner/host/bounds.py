"""What the host may spend on a run tree's behalf: memory held in sum, loop time per step.

**Memory.** What the host holds for the components of one run tree (a root run and its
children) is charged to one :class:`TreeBudget`, kept by the tree's channel hub: answers
owed (frames not yet taken by a component's stdin transport, handed at most
:data:`WRITE_SLICE` at a time), channel items queued or waiting for room, operation
results kept for replay, and the params of pending requests over :data:`SMALL_REQUEST`.

Past :data:`TREE_BYTES` the host refuses new work ``RESOURCE_EXHAUSTED`` where the
protocol lets a request be refused (a ``channel/send``, a new ``operationId``, a large
request), and stops running a run's calls and reading its stdout where it cannot; a run
that owes no more than 64 KiB may always run one more call, so a tree whose budget
another run spent is slowed, never stalled. So, with the default limits:

    peak RSS of a tree's host  <=  PEAK_RSS = 512 MiB, as
       60 MiB    the interpreter, its imports and the loop
    + 256 MiB    TREE_BYTES
    +  96 MiB    large frames decoding (pump.BIG_DECODES at once: a payload of up to
                 16 MiB and its value, capped by JSON/1's 262,144-value bound)
    +  34 MiB    stderr kept: 1 MiB per running run (the root and 16 children), 64 KiB
                 for each of the 256 ended children's reports kept
    +  66 MiB    slack: an answer per run that owed little, a 1 MiB write per run,
                 the allocator's fragmentation

Not counted: what a provider or child run does with a call while it runs, including the
result it hands back; and raised limits, which scale the per-run terms.

**Time.** Work a component can make expensive (Schema/1 checks, encoding a large value,
a large result's identity) runs in a worker thread through :func:`offload`, or on the
loop in slices of :data:`SLICE_UNITS`, so the deadline and signals are served on time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

MIB: Final = 1 << 20
TREE_BYTES: Final = 256 * MIB
"""What one run tree's host holds on its components' behalf, in sum (see above)."""
PEAK_RSS: Final = 512 * MIB
"""The bound on the peak RSS of one run tree's host with the default limits (see above)."""
SMALL_REQUEST: Final = 1 << 16
"""Requests up to this many bytes are never refused for the budget: 64 pending of them
hold 4 MiB, and ``channel/close`` or ``channel/release`` must stay possible."""
WRITE_SLICE: Final = 1 << 20
"""The most the driver hands a component's stdin at once."""
SLICE_UNITS: Final = 20_000
"""Schema/1 work units one check may spend on the event loop (about 10 ms); a check that
needs more starts again in a worker thread."""
WORKERS: Final = 1
"""Worker threads one event loop keeps busy at once; the rest wait. One: a thread of pure
Python holds the interpreter's lock, and the loop gets it back once per switch interval
from each such thread."""
SWITCH_INTERVAL: Final = 0.001
"""The interpreter's switch interval once work is offloaded (Python's default is 5 ms):
how long a worker thread may keep the lock the loop waits for."""
_workers: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar("bounds_workers")
_T = TypeVar("_T")


class TreeBudget:
    """The bytes one run tree's host holds for its components, against ``limit``: holders
    charge what they keep and release it when it goes (on the event loop: no lock)."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int = TREE_BYTES) -> None:
        self.limit = limit
        self.held = 0

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes stay within the budget."""
        return self.held + size <= self.limit

    def refusal(self, what: str) -> str:
        """The message of a ``RESOURCE_EXHAUSTED`` for ``what`` the budget cannot take."""
        return (
            f"{what}: this run tree's host already holds {self.held:,} of the "
            f"{self.limit:,} bytes it keeps for its components (unread answers and channel "
            "items, results kept for replay); read what waits, then retry"
        )


async def offload(work: Callable[..., _T], *args: object) -> _T:
    """``work(*args)`` in a worker thread, at most :data:`WORKERS` at once on this loop,
    the process's switch interval at most :data:`SWITCH_INTERVAL` from then on. ``work``
    must touch nothing the loop changes; cancelled, the caller returns at once and the
    thread finishes alone, its result dropped."""
    if sys.getswitchinterval() > SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)
    limiter = loop_limiter(_workers, WORKERS)
    return await anyio.to_thread.run_sync(work, *args, abandon_on_cancel=True, limiter=limiter)


def loop_limiter(
    var: anyio.lowlevel.RunVar[anyio.CapacityLimiter], tokens: int
) -> anyio.CapacityLimiter:
    """The limiter of ``tokens`` that ``var`` keeps for this event loop, made on first use
    (a limiter belongs to the loop it was made in)."""
    try:
        return var.get()
    except LookupError:
        var.set(limiter := anyio.CapacityLimiter(tokens))
        return limiter
