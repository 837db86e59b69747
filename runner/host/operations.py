"""Operation identity for one root Run (PROTOCOL.md §8): join, replay, conflict, UNCERTAIN.

The same ``operationId`` with the same canonical method and params joins the operation in
flight or replays its settled result or error without dispatching again; changed method
or params is ``OPERATION_CONFLICT`` before dispatch.

The work runs in the task of the request that dispatched it (no task per call: the hot
path), and goes on while another waiter is attached when that request is cancelled; with
none left it is cancelled, and as it may have had effects the operation is ``UNCERTAIN``.

Every operation is kept until the Run ends, so it keeps little: the SHA-256 of its
identity and its encoded result or bare error, charged to the Run's budget and its
tree's (:class:`~runner.host.bounds.TreeBudget`); joins and replays answer those bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

import anyio

from runner import json1
from runner.host.bounds import TreeBudget
from runner.host.channels.queues import again
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError

Work = Callable[[], Awaitable[JSONValue]]
Check = Callable[[JSONValue], "str | None"]
"""Judges a settled result: the reason it is invalid, or None."""
Encode = Callable[[JSONValue], Awaitable[bytes]]
"""Encodes a valid result for keeping (``json1.dumps``, maybe away from the loop)."""
RETAINED_BYTES: Final = 64 << 20
"""Default budget of one Run's ledger: 65,535 small operations (a channel's lifetime
request limit, PROTOCOL.md §12) fit, or 150 results of 400 KiB."""
ENTRY_BYTES: Final = 512
"""What one kept operation costs besides its result, so the budget bounds many tiny
operations too."""


@dataclass(slots=True)
class _Operation:
    digest: bytes
    """SHA-256 of the canonical identity: enough to tell a conflict, 32 bytes to keep."""
    runner: str
    scope: anyio.CancelScope | None
    """The dispatching request's: cancelled when the work is abandoned; dropped once done."""
    runner_attached: bool = True
    waiters: set[str] | None = None  # made for the first joiner: an empty set is 216 bytes
    done: bool = False
    finished: anyio.Event | None = None  # made only when a waiter has to wait
    result: bytes = b"null"  # the settled result, encoded: the answer of every replay
    error: OperationError | None = None

    def answer(self) -> bytes:
        """The settled result, encoded; or its error, raised."""
        if self.error is not None:
            raise again(self.error)  # raised anew: the kept one gathers no tracebacks
        return self.result

    async def wait(self) -> None:
        if not self.done:
            if self.finished is None:
                self.finished = anyio.Event()
            await self.finished.wait()

    def finish(self) -> None:
        self.done = True
        self.scope = None
        if self.finished is not None:
            self.finished.set()

    def abandon_if_unwatched(self) -> None:
        if not self.runner_attached and not self.waiters and self.scope is not None:
            self.scope.cancel()


class Ticket(NamedTuple):
    """One request's place in an operation: it dispatches the work or waits for it (a
    tuple, not a frozen dataclass: one is made per operation call, on the hot path)."""

    request_id: str
    operation: _Operation
    dispatch: bool


class OperationLedger:
    """The operations of one root Run, keyed by ``operationId``.

    Once ``budget`` bytes are retained, a new ``operationId`` is refused
    ``RESOURCE_EXHAUSTED`` (PROTOCOL.md §5); joins and replays still work. Operations
    admitted before then keep their results, so the budget is exceeded by at most the
    results of the calls in flight (64 on the wire).
    """

    def __init__(self, budget: int = RETAINED_BYTES, tree: TreeBudget | None = None) -> None:
        self.budget = budget
        self.tree = tree or TreeBudget()  # charged with what is retained, until close()
        self.retained = 0
        self._operations: dict[str, _Operation] = {}
        self._by_request: dict[str, _Operation] = {}
        self.dispatches = 0

    @staticmethod
    def digest(method: str, params: dict[str, JSONValue]) -> bytes:
        """The SHA-256 of the canonical identity: the method plus RFC 8785 bytes of params
        minus operationId. Pure, so a caller may work it out in a worker thread and hand
        it to :meth:`admit`."""
        rest = params.copy()
        rest.pop("operationId", None)
        return hashlib.sha256(method.encode() + b"\n" + json1.canonical(rest)).digest()

    def close(self) -> None:
        """The Run ended: what its operations kept leaves the tree's budget."""
        self.tree.held -= self.retained
        self.retained = 0

    def admit(
        self,
        request_id: str,
        method: str,
        params: dict[str, JSONValue],
        scope: anyio.CancelScope,
        digest: bytes | None = None,
    ) -> Ticket:
        """Decide at once, in arrival order, whether ``request_id`` dispatches or joins
        (so a cancel right behind a join cannot abandon work it waits for); raise
        ``OPERATION_CONFLICT`` before any dispatch. ``scope`` is the one the caller settles
        this request in: abandoned work is cancelled through it. ``digest``: :meth:`digest`
        of the call, if the caller worked it out already."""
        operation_id = params["operationId"]
        assert isinstance(operation_id, str)
        if digest is None:
            digest = self.digest(method, params)
        operation = self._operations.get(operation_id)
        if operation is None:
            if self.retained + ENTRY_BYTES > self.budget:
                raise OperationError(
                    "RESOURCE_EXHAUSTED",
                    f"this run's {len(self._operations)} operations already hold "
                    f"{self.retained} of the {self.budget} bytes kept for replay; "
                    "no new operationId is admitted",
                )
            if not self.tree.fits(ENTRY_BYTES):
                raise OperationError("RESOURCE_EXHAUSTED", self.tree.refusal("a new operationId"))
            self._keep(ENTRY_BYTES)
            operation = _Operation(digest, request_id, scope)
            self._operations[operation_id] = operation
            self._by_request[request_id] = operation
            self.dispatches += 1
            return Ticket(request_id, operation, dispatch=True)
        if operation.digest != digest:
            raise OperationError(
                "OPERATION_CONFLICT",
                f"operationId {operation_id!r} was already used with other method or params",
            )
        if not operation.done:
            if operation.waiters is None:
                operation.waiters = set()
            operation.waiters.add(request_id)
            self._by_request[request_id] = operation
        return Ticket(request_id, operation, dispatch=False)

    async def settle_encoded(
        self,
        ticket: Ticket,
        work: Work,
        check: Check = lambda _: None,
        encode: Encode | None = None,
    ) -> bytes:
        """Run the work (for the dispatching request) or wait for it, then answer with
        the result as kept, encoded once by ``encode`` (default ``json1.dumps``). A result
        ``check`` refuses settles ``INVALID_RESULT`` for every waiter and replay."""
        operation = ticket.operation
        if ticket.dispatch:
            await self._execute(operation, work, check, encode)
            return operation.result
        try:
            await operation.wait()
        finally:
            if operation.waiters is not None:
                operation.waiters.discard(ticket.request_id)
            self._by_request.pop(ticket.request_id, None)
            operation.abandon_if_unwatched()
        return operation.answer()

    def cancel_waiter(self, request_id: str) -> bool:
        """The component cancelled ``request_id``; True if its task must keep running (it
        dispatched the work and another waiter is attached)."""
        operation = self._by_request.get(request_id)
        if operation is None or operation.runner != request_id:
            return False
        operation.runner_attached = False
        self._by_request.pop(request_id, None)
        operation.abandon_if_unwatched()
        return not operation.done and bool(operation.waiters)

    async def _execute(
        self, operation: _Operation, work: Work, check: Check, encode: Encode | None
    ) -> None:
        try:
            result = await work()
            reason = check(result)
            if reason is not None:
                raise OperationError("INVALID_RESULT", reason)
            if encode is None:
                operation.result = json1.dumps(result)
            else:
                operation.result = await encode(result)
            self._keep(len(operation.result))
        except OperationError as exc:
            self._keep_error(operation, exc)
            raise
        except Exception as exc:  # a provider's own failure is never a -32603
            error = OperationError(
                "EXECUTION_FAILED", f"the operation failed: {type(exc).__name__}: {exc}"
            )
            self._keep_error(operation, error)
            raise error from exc
        except BaseException:  # cancelled: effects unknown
            stopped = "the operation was stopped after dispatch; its effects are unknown"
            self._keep_error(operation, OperationError("UNCERTAIN", stopped))
            raise
        finally:
            self._by_request.pop(operation.runner, None)
            operation.finish()

    def _keep_error(self, operation: _Operation, error: OperationError) -> None:
        operation.error = again(error)
        details = 0 if error.details is None else len(json1.dumps(error.details))
        self._keep(len(error.message.encode()) + details)

    def _keep(self, size: int) -> None:
        self.retained += size
        self.tree.held += size
