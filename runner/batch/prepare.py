"""Containers launched ahead of their runs, so the engine's start is off a slot's path.

Most of a short run is the engine creating and starting its container (and the
component's own start-up); a slot that only then sends ``flow/run`` leaves the engine
with nothing to do but that run's lifecycle. So the batch enters a row's launch early,
in a task of its own (:class:`Prepared`): the container is created, attached and
started, and the component is up and blocked reading its stdin, but nothing was sent to
it: it is not a run yet. When a slot admits the row, :class:`PreparedSandbox` hands
``runner.api.execute`` that launch in place of a new one, and the run (its deadline
included) begins with the ``flow/run`` frame.

The holder task keeps the backend's launch context open until the run leaves it, then
leaves it itself: the backend's own cleanup (kill, remove) runs there, shielded as
always. A run that ended normally does not wait for that removal when it may
(``background``): its slot is free once its result is committed. A row refused before
launch, a stopped batch and a retry (a new run id) never take the prepared launch; the
batch discards it, which removes the container.

What this relies on of a backend (the :class:`~runner.sandbox.base.Sandbox` protocol):
``launch(request)`` is an async context manager that does all of the starting on entry
and all of the cleanup on exit, whose component may be used from another task than the
one that entered it; and :class:`~runner.sandbox.base.LaunchRequest` compares by value.
Every other attribute (``package``, a backend's ``name``, its file API, ...) is the
backend's own, reached through ``__getattr__``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio

from runner.sandbox.base import LaunchRequest, RunningComponent, Sandbox


class Prepared:
    """One launch entered ahead of its run; :meth:`hold` is the task that keeps it open.

    ``background``: a run that ends normally need not wait for the backend's cleanup;
    it holds one of ``removals`` until the cleanup is done, so at most that many are
    under way unwaited.
    ``on_left`` gets what the cleanup raised when nobody waited for it (the run's
    result stands; the container may be left for ``flow-runner gc``).
    """

    def __init__(
        self,
        sandbox: Sandbox,
        request: LaunchRequest,
        *,
        background: bool,
        removals: anyio.Semaphore,
        on_left: Callable[[LaunchRequest, BaseException], None],
    ) -> None:
        self.sandbox = sandbox
        self.request = request
        self.background = background
        self._removals = removals
        self._removal_held = False
        self._on_left = on_left
        self._ready = anyio.Event()
        self._release = anyio.Event()
        self._done = anyio.Event()
        self._component: RunningComponent | None = None
        self._enter_error: Exception | None = None
        self._exit_error: Exception | None = None
        self._waited = False
        self.taken = False

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
                    self._on_left(self.request, exc)
        finally:
            self._ready.set()
            self._done.set()
            if self._removal_held:
                self._removals.release()

    def discard(self) -> None:
        """Not to be run (refused, stopped, retried): leave the launch, removing it."""
        self._release.set()

    @asynccontextmanager
    async def take(self) -> AsyncIterator[RunningComponent]:
        """The launch, as the backend's ``launch`` context would be for the run.

        Entering waits for a preparation still under way and raises what entering the
        backend's launch raised. Leaving with an exception waits for the cleanup and
        raises what it raised instead (a loss found there, as the backend would);
        leaving normally waits for it only when not ``background``.
        """
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
                await self._removals.acquire()
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
    """A row's sandbox whose launch for the prepared request is the prepared one.

    Any other request (a retry's new run id) is launched by the backend afresh; every
    other attribute is the backend's.
    """

    def __init__(self, prepared: Prepared) -> None:
        self._prepared = prepared

    def launch(self, request: LaunchRequest) -> AbstractAsyncContextManager[RunningComponent]:
        prepared = self._prepared
        if not prepared.taken and request == prepared.request:
            return prepared.take()
        return prepared.sandbox.launch(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prepared.sandbox, name)
