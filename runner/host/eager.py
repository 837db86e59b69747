"""Running a call in the pump's own task, with a cancel scope only if the call waits.

Calls and channel items are the host's hot path, and most of them complete without
waiting: a broker that answers at once, a channel item already queued. For those, a task
hand-off or an anyio cancel scope costs more than the call's own protocol work (a scope
made, entered and left is ~5 µs; ``bench/calls.py``). So :class:`EagerCall` takes the
call's first step directly and, only if the call suspends there, tells the driver (which
hands the pump role to another task) and enters a real cancel scope around the rest of
the call, in the same task, exactly as ``with scope:`` around ``await`` would have.

:class:`CallScope` stands for that scope from the call's admission on: a cancel that comes
while the call is queued, or while its first step runs, is kept and takes effect at the
first point where the call waits, which is also where a scope entered from the start would
have delivered it (a step that does not wait cannot be cancelled either way).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import Any

import anyio


class CallScope:
    """One call's cancellation: requested at any time, delivered once the call waits."""

    __slots__ = ("_cancel_called", "_scope")

    def __init__(self) -> None:
        self._cancel_called = False
        self._scope: anyio.CancelScope | None = None

    def cancel(self) -> None:
        self._cancel_called = True
        if self._scope is not None:
            self._scope.cancel()

    @property
    def cancelled_caught(self) -> bool:
        """True if the call was stopped by this scope's cancellation."""
        return self._scope is not None and self._scope.cancelled_caught

    def _open(self) -> anyio.CancelScope:
        """The real scope, made when the call first waits; cancelled already if asked."""
        self._scope = scope = anyio.CancelScope()
        if self._cancel_called:
            scope.cancel()
        return scope


class EagerCall:
    """``await EagerCall(coro, scope, on_suspend)`` runs ``coro`` in the awaiting task as
    ``with scope: await coro`` would, entering the scope's real cancel scope only at the
    first suspension, and calling ``on_suspend`` once, then (``suspended`` is then True).

    After the first step every suspension, value and exception passes through unchanged,
    as with ``yield from``; a cancellation of the call's own scope ends the call quietly,
    as leaving the ``with`` block would.
    """

    __slots__ = ("_coro", "_on_suspend", "_scope", "suspended")

    def __init__(
        self,
        coro: Coroutine[Any, Any, None],
        scope: CallScope,
        on_suspend: Callable[[], None],
    ) -> None:
        self._coro = coro
        self._scope = scope
        self._on_suspend = on_suspend
        self.suspended = False

    def __await__(self) -> Generator[Any, Any, None]:
        coro = self._coro
        try:
            signal = coro.send(None)
        except StopIteration:
            return
        self.suspended = True
        self._on_suspend()
        with self._scope._open():
            yield from _resume(coro, signal)


def _resume(coro: Coroutine[Any, Any, None], signal: Any) -> Generator[Any, Any, None]:
    """The rest of a coroutine that has yielded ``signal``, driven as ``yield from`` would."""
    while True:
        try:
            sent = yield signal
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # cancellation, thrown in by the task
            try:
                signal = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                signal = coro.send(sent)
            except StopIteration:
                return
