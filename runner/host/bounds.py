"""What the host may spend on a run tree's behalf: memory held in sum, loop time per step.

**Memory.** Everything the host holds for the components of one run tree (a root run and
its children) is charged to one :class:`TreeBudget`, kept by the tree's channel hub:

- answers owed: frames made for a component and not yet taken by its stdin's transport
  (the session's outbox and the driver's output; the transport itself is handed at most
  :data:`WRITE_SLICE` at a time beyond its own 64 KiB);
- channel items: queued for a reader, and the values of sends waiting for room;
- operation results kept for replay (each run's ledger);
- the params of pending component requests over :data:`SMALL_REQUEST` bytes.

Past :data:`TREE_BYTES` the host refuses new work with ``RESOURCE_EXHAUSTED`` where the
protocol lets a request be refused (a ``channel/send``, a new ``operationId``, a large
request), and stops running a run's calls and reading its stdout where it cannot (the
answers it owes a component that does not read): a run that owes no more than 64 KiB
may always run one more call, so a tree whose budget another run spent is slowed, never
stalled. So:

    peak RSS of a tree's host  <=  PEAK_RSS = 512 MiB, with the default limits, as
       60 MiB    the interpreter, its imports and the loop (a run holding nothing: 45-60)
    + 256 MiB    TREE_BYTES
    +  96 MiB    large frames decoding (driver.BIG_DECODES at once: a payload of up to
                 16 MiB and its value; JSON/1's 262,144-value bound caps the value)
    +  34 MiB    stderr kept per running run (1 MiB each: the root and the 16 children
                 the default max_children runs at once) and the reports of ended children
                 (256 kept, 64 KiB of stderr each)
    +  66 MiB    what passes one check before the next, and slack: an answer per run
                 that owed little (a large answer is a retained result or a channel item the
                 budget already counts, queued uncopied between its frame's head and
                 tail), a 1 MiB write per run, the allocator's fragmentation

Measured with every holder at its limit at once (tests/test_heavy_traffic.py: 16
channels full and unread, 64 replays of an 8 MB result unread): 343 to 359 MiB.

Not counted: what a provider or a child run does with a call while it runs (its own
process, or the provider's own bounds), including the result it hands back, which is
kept past the budget when the call was admitted before the budget ran out; and raised
limits (``max_children``, the channel limits, ``retained_result_bytes``), which scale
the per-run terms.

**Time.** Work a component can make expensive (Schema/1 evaluation of a channel item,
encoding a large value, a large result's identity) runs in a worker thread through
:func:`offload`, at most :data:`WORKERS` at once per event loop, or on the loop in slices
of :data:`SLICE_UNITS` work units; the loop itself never spends more than a few tens of
milliseconds on one step, so the deadline, cancellation and signals are served on time.
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
"""The stated bound on the peak RSS of the host of one run tree with the default limits
(the module docstring gives its parts); tests/test_heavy_traffic.py measures against it."""
SMALL_REQUEST: Final = 1 << 16
"""Requests up to this many bytes are never refused for the budget: 64 pending of them
hold 4 MiB, and ``channel/close`` or ``channel/release`` must stay possible."""
WRITE_SLICE: Final = 1 << 20
"""The most the driver hands a component's stdin at once."""
SLICE_UNITS: Final = 20_000
"""Schema/1 work units one check may spend on the event loop (about 10 ms); a check that
needs more starts again in a worker thread."""
WORKERS: Final = 1
"""Worker threads one event loop keeps busy with such work at once; the rest wait. One:
a thread of pure Python holds the interpreter's lock, and the loop gets it back once per
switch interval from each such thread (measured with two: loop stalls of 100-160 ms on a
loaded 2-core machine; with one, 55-95)."""
SWITCH_INTERVAL: Final = 0.001
"""The interpreter's switch interval once work is offloaded (``sys.setswitchinterval``;
Python's default is 5 ms): how long a worker thread may keep the lock the loop waits for."""
_workers: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar("bounds_workers")
_T = TypeVar("_T")


class TreeBudget:
    """The bytes one run tree's host holds for its components, against ``limit``.

    Holders charge what they keep and release it when it goes; a holder that may refuse
    asks :meth:`fits` first. Lives on the event loop: no lock.
    """

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
    """``work(*args)`` in a worker thread, at most :data:`WORKERS` at once on this loop.

    ``work`` must touch nothing the loop changes. Cancelled, the caller returns at once
    and the thread finishes alone, its result dropped.
    """
    return await anyio.to_thread.run_sync(work, *args, abandon_on_cancel=True, limiter=_limiter())


def _limiter() -> anyio.CapacityLimiter:
    """This loop's limiter of :data:`WORKERS`; made with the first offload, which also
    sets the process's switch interval to :data:`SWITCH_INTERVAL`."""
    try:
        return _workers.get()
    except LookupError:
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        limiter = anyio.CapacityLimiter(WORKERS)
        _workers.set(limiter)
        return limiter
