"""Containers launched ahead of their runs, so the engine's start is off a slot's path.

:class:`Prepared` enters a row's launch in a task of its own: the container is created,
attached and started, its component blocked reading stdin, nothing sent (not a run yet).
The slot that admits the row hands ``runner.api.execute`` that launch
(:class:`PreparedSandbox`), so the run, its deadline included, begins with ``flow/run``.
A row refused before launch, a stopped batch and a retry (a new run id) never take it;
discarding it removes the container.

It relies on ``Sandbox.launch`` starting on entry and cleaning up on exit, its component
usable from another task, and on ``LaunchRequest`` comparing by value.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from runner.sandbox.base import LaunchRequest, RunningComponent, Sandbox


@dataclass(eq=False)
class Prepared:
    """One launch entered ahead of its run; :meth:`hold` is the task that keeps it open
    and leaves it (the backend's cleanup, shielded as always).

    ``background``: a run that ends normally does not wait for that cleanup; it holds one
    of ``removals`` until the cleanup is done, so at most that many go on unwaited.
    ``on_left`` gets what such a cleanup raised (the run's result stands; the container
    may be left for ``flow-runner gc``).
    """

    sandbox: Sandbox
    request: LaunchRequest
    background: bool
    removals: anyio.Semaphore
    on_left: Callable[[LaunchRequest, BaseException], None]
    taken: bool = field(default=False, init=False)
    _ready: anyio.Event = field(default_factory=anyio.Event, init=False)
    _release: anyio.Event = field(default_factory=anyio.Event, init=False)
    _done: anyio.Event = field(default_factory=anyio.Event, init=False)
    _component: RunningComponent | None = field(default=None, init=False)
    _enter_error: Exception | None = field(default=None, init=False)
    _exit_error: Exception | None = field(default=None, init=False)
    _waited: bool = field(default=False, init=False)
    _removal_held: bool = field(default=False, init=False)

    async def hold(self) -> None:
        """Enter the backend's launch, wait until released, leave it (its cleanup)."""
        try:
            async with self.sandbox.launch(self.request) as component:
                self._component = component
                self._ready.set()
                await self._release.wait()
        except Exception as exc:  # raised where the run takes the launch, or reported
            if self._component is None:
                self._enter_error = exc
            else:
                self._exit_error = exc
                if not self._waited:
                    self.on_left(self.request, exc)
        finally:
            self._ready.set()
            self._done.set()
            if self._removal_held:
                self.removals.release()

    def discard(self) -> None:
        """Not to be run (refused, stopped, retried): leave the launch, removing it."""
        self._release.set()

    @asynccontextmanager
    async def take(self) -> AsyncIterator[RunningComponent]:
        """The launch, as the backend's ``launch`` context: entering waits for the
        preparation and raises what it raised; leaving waits for the cleanup (unless
        ``background`` and leaving normally) and raises what it raised, as the backend."""
        self.taken = True
        await self._ready.wait()
        if self._enter_error is not None:
            raise self._enter_error
        if self._component is None:  # its holder was cancelled: the batch is going away
            raise RuntimeError("the prepared launch was stopped before it started")
        try:
            yield self._component
        except BaseException:
            await self._leave(wait=True)
            raise
        await self._leave(wait=not self.background)

    async def _leave(self, *, wait: bool) -> None:
        try:
            if not wait:
                await self.removals.acquire()
                self._removal_held = True
        finally:  # released even if cancelled meanwhile: the holder must not wait forever
            self._waited = wait
            self._release.set()
        if not wait:
            return
        with anyio.CancelScope(shield=True):
            await self._done.wait()
        if self._exit_error is not None:
            raise self._exit_error


class PreparedSandbox:
    """A row's sandbox whose launch of the prepared request is the prepared one; any other
    request (a retry's new run id) is launched afresh; the rest is the backend's."""

    def __init__(self, prepared: Prepared) -> None:
        self._prepared = prepared

    def launch(self, request: LaunchRequest) -> AbstractAsyncContextManager[RunningComponent]:
        prepared = self._prepared
        if not prepared.taken and request == prepared.request:
            return prepared.take()
        return prepared.sandbox.launch(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prepared.sandbox, name)
