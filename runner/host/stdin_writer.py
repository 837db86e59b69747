"""The run's stdin side: answers leave in order, without a task when stdin takes them.

What the session queued by the end of a loop step leaves in one write, by the pump before
it waits or by one loop callback. Only when stdin cannot take it at once, or it is large,
does the writer task take over, :data:`~runner.host.bounds.WRITE_SLICE` at a time, and
what follows queues behind it. The answers a run owes are charged to its tree's budget.
"""

from __future__ import annotations

from contextlib import suppress
from itertools import islice

import anyio

from runner.host.bounds import WRITE_SLICE
from runner.host.run_state import STDIN_MOVES, RunState, Stdin
from runner.protocol.codes import LocalProtocolError

STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
"""How a stream fails once its other end is gone."""
STDIN_BACKLOG = 1 << 24
"""Bytes of answers held for a component that does not read its stdin; past it the pump
runs no more calls and reads no more until they leave, so such a component holds at most
this and one answer, not every answer it asked for."""
OWED_FREELY = 1 << 16
"""Answers a run may owe whatever its tree's budget: the small answers of one pass."""


class StdinWriter(RunState):
    """Writes the session's frames to the component's stdin, moving :class:`Stdin` only
    through :data:`STDIN_MOVES`."""

    def _flush(self) -> None:
        """The session queued frames: they leave at the end of this loop step, in one
        write with whatever else is queued by then."""
        self._charge_owed()
        if self.pumping:
            self.unwritten = True
        elif self.write_handle is None:
            self.write_handle = self.loop.call_soon(self._write_out)

    def _charge_owed(self) -> None:
        """Bring the tree's charge for the answers this run owes up to date."""
        owed = self.session.outbox_bytes + self.output_bytes
        self.tree.held += owed - self.owed_charged
        self.owed_charged = owed

    def _held_back(self) -> bool:
        """Whether the pump must wait before it runs a call or reads more: more than
        :data:`STDIN_BACKLOG` of answers are unread, or more than :data:`OWED_FREELY`
        while the tree's budget is spent (a run that owes little may always go on)."""
        owed = self.session.outbox_bytes + self.output_bytes  # charged as it changed
        if owed <= OWED_FREELY or self.stdin_state is Stdin.BROKEN:
            return False
        tree = self.tree
        return owed > STDIN_BACKLOG or tree.held >= tree.limit

    async def _room(self) -> None:
        """Write what is queued and wait until the pump is no longer :meth:`_held_back`."""
        self._write_out()
        while self._held_back():
            if self.output_room is None:
                self.output_room = anyio.Event()
            await self.output_room.wait()

    def _pause_pumping(self) -> None:
        """The pump is about to wait (or hand its role over): what its pass queued leaves."""
        self.pumping = False
        if self.unwritten:
            self.unwritten = False
            self._write_out()

    def _write_out(self) -> None:
        """Write what the session queued: at once when the writer holds nothing and stdin
        takes it without waiting, else through the writer task, which keeps the order
        (dropped once stdin is closing or broken)."""
        if self.write_handle is not None:
            self.write_handle.cancel()
            self.write_handle = None
        size = self.session.outbox_bytes
        pieces = self.session.frames_to_send()
        state = self.stdin_state
        if pieces and (state is Stdin.OPEN or state is Stdin.SENDING):
            self._output(pieces, size)
        self._charge_owed()

    def _output(self, pieces: list[bytes], size: int) -> None:
        idle = not self.output and self.stdin_state is Stdin.OPEN
        if idle and self.write_now is not None and size <= WRITE_SLICE:
            data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            try:
                if self.write_now(data):
                    return
            except STREAM_ERRORS:
                self._break_stdin()
                return
            pieces = [data]
        self.output.extend(pieces)
        self.output_bytes += size
        self._wake_writer()

    def _close_stdin(self) -> None:
        """Let the writer send what it holds, then half-close stdin."""
        self._write_out()  # what the session queued goes first
        self._stdin_move("close")
        self._wake_writer()

    def _stdin_move(self, step: str) -> None:
        try:
            self.stdin_state = STDIN_MOVES[self.stdin_state, step]
        except KeyError:
            raise LocalProtocolError(f"stdin cannot {step} while {self.stdin_state.name}") from None

    def _wake_writer(self) -> None:
        if self.output_ready is not None:
            self.output_ready.set()
            self.output_ready = None

    async def _write_stdin(self) -> None:
        """The writer task: write, in order, what stdin could not take at once, up to
        :data:`WRITE_SLICE` a write, small answers joined into one."""
        stdin = self.component.stdin
        try:
            while self.output or self.stdin_state is not Stdin.CLOSING:
                if self.output:
                    data, ended, offset = self._next_write()
                    drops = self.output_drops
                    self._stdin_move("send")
                    try:
                        await stdin.send(data)  # type: ignore[arg-type]  # any buffer
                    finally:
                        self._stdin_move("sent")
                    if drops == self.output_drops:  # else a kill dropped it meanwhile
                        self._written(len(data), ended, offset)
                else:
                    self.output_ready = ready = anyio.Event()
                    await ready.wait()
        except STREAM_ERRORS:
            self._break_stdin()
        with suppress(*STREAM_ERRORS):
            await stdin.aclose()

    def _next_write(self) -> tuple[bytes | memoryview, int, int]:
        """(data, pieces it ends, offset into the next piece); taken from the output only
        once written, so a writer cancelled in its send leaves the output whole."""
        output, offset = self.output, self.output_offset
        head = output[0]
        if len(head) - offset > WRITE_SLICE:
            return memoryview(head)[offset : offset + WRITE_SLICE], 0, offset + WRITE_SLICE
        parts: list[bytes | memoryview] = [memoryview(head)[offset:] if offset else head]
        total = len(parts[0])
        for piece in islice(output, 1, None):
            if total + len(piece) > WRITE_SLICE:
                break
            parts.append(piece)
            total += len(piece)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        return data, len(parts), 0

    def _written(self, size: int, ended: int, offset: int) -> None:
        for _ in range(ended):
            self.output.popleft()
        self.output_offset = offset
        self.output_bytes -= size
        self._charge_owed()
        self._wake_pump()

    def _break_stdin(self) -> None:
        """Nothing more can be written, so nothing more is kept: what waited for stdin is
        dropped and the pump may read again."""
        self._stdin_move("break")
        self.output_drops += 1
        self.output.clear()
        self.output_offset = 0
        self.output_bytes = 0
        self._charge_owed()
        self._wake_pump()

    def _wake_pump(self) -> None:
        if self.output_room is not None:
            self.output_room.set()
            self.output_room = None
