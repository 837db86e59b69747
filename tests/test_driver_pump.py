"""The driver's pump (runner/host/pump.py): calls answered at once cost no task hand-off,
a call that suspends hands the reading over at once, answers leave without a writer task
while stdin has room and in order behind one when it has none (on tests/memkit.py's
in-memory component, which notes in which tasks the driver reads stdout and writes stdin).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import anyio
import pytest

from memkit import MemoryComponent
from runner import json1
from runner.host.broker import CallContext
from runner.host.channels import ChannelHub
from runner.host.channels.party import MAX_ITEM_BYTES
from runner.host.driver import drive
from runner.json1 import JSONValue
from runner.protocol.frames import MAX_PAYLOAD_BYTES
from runner.sandbox.registry import StopGraces

PARAMS: dict[str, JSONValue] = {
    "protocol": "run/1", "input": None, "settings": {}, "attachments": {},
    "scratch": "/tmp", "deadlineUnixMs": 2**52,
}  # fmt: skip
_T = TypeVar("_T")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _call(i: int, value: str) -> bytes:
    params = {"operationId": f"o:{i}", "slot": "s", "method": "m", "input": value}
    frame = {"jsonrpc": "2.0", "id": f"c:{i}", "method": "capability/call", "params": params}
    return json.dumps(frame).encode() + b"\n"


class _Broker:
    def __init__(self) -> None:
        self.tasks: dict[str, int] = {}
        self.release = anyio.Event()

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        self.tasks[str(params["operationId"])] = anyio.get_current_task().id
        if params["input"] == "held":
            await self.release.wait()
        return {"value": params["input"]}


async def _exchange(chunks: list[bytes], answers: int, broker: _Broker) -> tuple[Any, list[Any]]:
    component = MemoryComponent()
    seen: list[Any] = []

    async def play() -> None:
        frames = component.frames()
        root = await frames.__anext__()
        for chunk in chunks:
            await component.to_host.send(chunk)
        while len(seen) < answers:
            seen.append(await frames.__anext__())
            if seen[-1]["id"] == "c:1":
                broker.release.set()  # the held call 0 may finish once call 1 was answered
        await component.finish(root)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            outcome = await drive(component, PARAMS, broker)  # type: ignore[arg-type]
    return (outcome, component), seen


@pytest.mark.anyio
async def test_calls_answered_at_once_run_in_the_task_that_read_them() -> None:
    broker = _Broker()
    chunk = b"".join(_call(i, "now") for i in range(64))
    (outcome, component), seen = await _exchange([chunk], 64, broker)
    assert sorted(frame["id"] for frame in seen) == sorted(f"c:{i}" for i in range(64))
    assert outcome.verdict.result is not None
    assert set(broker.tasks.values()) == component.stdout.readers  # one task: no hand-off


@pytest.mark.anyio
async def test_a_call_that_suspends_hands_the_reading_over_at_once() -> None:
    broker = _Broker()
    # Call 0 waits until the component has seen the answer to call 1, read behind it.
    (outcome, component), seen = await _exchange([_call(0, "held"), _call(1, "now")], 2, broker)
    assert [frame["id"] for frame in seen] == ["c:1", "c:0"]
    assert outcome.verdict.result is not None
    assert broker.tasks["o:0"] != broker.tasks["o:1"]  # call 0 kept its task; 1 ran elsewhere
    assert broker.tasks["o:1"] in component.stdout.readers


@pytest.mark.anyio
async def test_timings_give_the_first_byte_of_stdout_before_the_response() -> None:
    """``first_byte`` counts from the same start as ``response``: the call read first,
    the root response only once its answer came back."""
    (outcome, _), _ = await _exchange([_call(0, "now")], 1, _Broker())
    timings = outcome.timings
    assert 0 <= timings["first_byte"] <= timings["response"], timings


@pytest.mark.anyio
async def test_answers_leave_from_the_task_that_read_their_requests() -> None:
    """No writer task while stdin has room: the pump writes what it answered before it
    reads again, all of one read's answers in one write."""
    broker = _Broker()
    chunk = b"".join(_call(i, "now") for i in range(64))
    (outcome, component), _ = await _exchange([chunk], 64, broker)
    assert outcome.verdict.result is not None
    answers = [(task, data) for task, data in component.stdin.writes if b'"c:' in data]
    assert len(answers) == 1  # one write
    assert answers[0][0] in component.stdout.readers
    assert component.stdin.waited == 0


@pytest.mark.anyio
async def test_answers_a_component_leaves_unread_wait_for_it_in_order() -> None:
    """Stdin full: the answers after it queue behind a writer task that waits, and leave
    in the order they were made once the component reads, none lost, none passed."""
    component = MemoryComponent(stdin_room=3)
    broker = _Broker()
    calls = 40
    seen: list[Any] = []

    async def play() -> None:
        frames = component.frames()
        root = await frames.__anext__()
        for i in range(calls):  # one read each: one write each
            await component.to_host.send(_call(i, "now"))
        await anyio.wait_all_tasks_blocked()  # all answered, 3 written, the rest waiting
        assert component.from_host.statistics().current_buffer_used == 3
        while len(seen) < calls:
            seen.append(await frames.__anext__())
        await component.finish(root)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            outcome = await drive(component, PARAMS, broker)  # type: ignore[arg-type]
    assert [frame["id"] for frame in seen] == [f"c:{i}" for i in range(calls)]
    assert outcome.verdict.result is not None
    assert component.stdin.waited > 0  # the writer task took over once stdin was full


@pytest.mark.anyio
async def test_a_send_the_component_cancelled_while_it_was_queued_is_not_accepted() -> None:
    """§7.5: a cancelled ``channel/send`` only withdraws a value not yet accepted, so one
    cancelled before it ran must not reach the reader (the component was told CANCELLED)."""
    hub = ChannelHub()
    party = hub.party("run")
    grants: Any = party.create({})
    writer, reader = grants["send"]["endpoint"], grants["receive"]["endpoint"]
    component = MemoryComponent()
    answers: dict[str, Any] = {}

    def request(rid: str, method: str, params: dict[str, JSONValue]) -> bytes:
        frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        return json.dumps(frame).encode() + b"\n"

    async def play() -> None:
        frames = component.frames()
        root = await frames.__anext__()
        cancel = {"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": "s:1"}}
        await component.to_host.send(
            request("s:1", "channel/send", {"endpoint": writer, "value": "withdrawn"})
            + json.dumps(cancel).encode()
            + b"\n"
            + request("s:2", "channel/send", {"endpoint": writer, "value": "sent"})
        )
        while len(answers) < 2:
            frame = await frames.__anext__()
            answers[frame["id"]] = frame.get("result", frame.get("error"))
        await component.finish(root)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            outcome = await drive(component, PARAMS, _Broker(), channels=party)  # type: ignore[arg-type]
    assert outcome.verdict.result is not None
    assert answers["s:1"]["data"]["code"] == "CANCELLED"
    assert answers["s:2"] is None
    assert await party.next(reader) == {"item": {"sequence": 1, "value": "sent"}}


class _ScopedBroker(_Broker):
    """A provider that opens anyio scopes of its own (a timeout, a lock) before its first
    wait, as providers built on anyio do: the call's own cancel scope must already be the
    outer one then, or leaving theirs breaks the task's scopes (a crash, or a pump stuck
    under a stale shielded scope that no deadline reaches)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = anyio.Lock()
        self.waiting = anyio.Event()

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        with anyio.move_on_after(60):
            async with self.lock:
                if params["input"] == "forever":
                    self.waiting.set()
                    await anyio.sleep_forever()
                await anyio.sleep(0)
        return {"value": params["input"]}


def _within(seconds: float, main: Callable[[], Awaitable[_T]]) -> _T:
    """``anyio.run(main)`` in a thread of its own, failing if it has not ended in
    ``seconds``: a pump stuck under a stale shielded scope ignores every deadline and
    ``fail_after`` inside its loop, so only a watch from outside the loop can tell."""
    outcome: list[_T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(anyio.run(main))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the run had not ended after {seconds} s")
    if errors:
        raise errors[0]
    return outcome[0]


def test_a_provider_that_opens_scopes_before_it_waits_is_answered() -> None:
    broker = _ScopedBroker()
    exchange = partial(_exchange, [_call(0, "a") + _call(1, "b")], 2, broker)
    (outcome, _), seen = _within(20, exchange)
    assert outcome.verdict.result is not None, outcome.verdict
    assert {frame["id"]: frame["result"] for frame in seen} == {
        "c:0": {"value": "a"},
        "c:1": {"value": "b"},
    }
    assert not broker.lock.locked()


def test_a_call_cancelled_inside_a_providers_own_scopes_unwinds() -> None:
    broker = _ScopedBroker()
    component = MemoryComponent()
    seen: list[Any] = []

    async def play() -> None:
        frames = component.frames()
        root = await frames.__anext__()
        await component.to_host.send(_call(0, "forever"))
        await broker.waiting.wait()
        cancel = {"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": "c:0"}}
        await component.to_host.send(json.dumps(cancel).encode() + b"\n" + _call(1, "after"))
        while len(seen) < 2:
            seen.append(await frames.__anext__())
        await component.finish(root)

    async def main() -> Any:
        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            return await drive(component, PARAMS, broker)  # type: ignore[arg-type]

    outcome = _within(20, main)
    assert outcome.verdict.result is not None, outcome.verdict
    answers = {frame["id"]: frame for frame in seen}
    assert answers["c:0"]["error"]["data"]["code"] == "CANCELLED"
    assert answers["c:1"]["result"] == {"value": "after"}  # the lock came free
    assert not broker.lock.locked()


def _frame(rid: str, method: str, params: dict[str, JSONValue]) -> bytes:
    frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    return json.dumps(frame, separators=(",", ":")).encode() + b"\n"


def _filling(limit: int, around: int) -> list[str]:
    """A value (two strings: JSON/1 caps one at 8 MiB) whose encoding plus ``around`` bytes
    of frame is ``limit`` bytes."""
    rest = limit - around - len('["",""]')
    return ["x" * (rest // 2), "y" * (rest - rest // 2)]


class _BigBroker:
    def __init__(self, value: JSONValue) -> None:
        self.value = value

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        return {"value": self.value}


async def _answers(component: MemoryComponent, frames: list[bytes], broker: Any, **kw: Any) -> Any:
    """Send ``frames`` one by one (each answered before the next), then the root result."""
    answers: list[Any] = []

    async def play() -> None:
        replies = component.frames()
        root = await replies.__anext__()
        for frame in frames:
            for start in range(0, len(frame), 1 << 20):
                await component.to_host.send(frame[start : start + (1 << 20)])
            answers.append(await replies.__anext__())
        await component.finish(root)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            outcome = await drive(component, PARAMS, broker, **kw)
    assert outcome.verdict.result is not None, outcome.verdict
    return answers


@pytest.mark.anyio
async def test_a_result_too_large_for_its_answer_frame_is_refused_not_a_crash() -> None:
    """A provider's (or a child's) result that fits the frame bound alone but not around a
    128-byte request id: the host answers RESOURCE_EXHAUSTED and writes no oversized
    frame; before, building that frame raised out of the driver."""
    rid = "c" * 128
    head = len(f'{{"jsonrpc":"2.0","id":"{rid}","result":{{"value":}}}}')
    broker = _BigBroker(_filling(MAX_PAYLOAD_BYTES + 1, head))
    params: dict[str, JSONValue] = {"operationId": "o:1", "slot": "s", "method": "m", "input": 1}
    [answer] = await _answers(MemoryComponent(), [_frame(rid, "capability/call", params)], broker)
    assert answer["id"] == rid
    assert answer["error"]["data"]["code"] == "RESOURCE_EXHAUSTED"


@pytest.mark.anyio
async def test_a_channel_item_whose_read_answer_cannot_fit_is_refused_at_its_send() -> None:
    """The largest send frame can carry a value that no ``channel/next`` answer can: one
    read with a long id would have lost it (or, before, crashed the driver). Such a value
    is refused when sent; the largest value that fits every answer is delivered."""
    party = ChannelHub().party("run")
    grants: Any = party.create({})
    writer, reader = grants["send"]["endpoint"], grants["receive"]["endpoint"]
    head = len(_frame("s:1", "channel/send", {"endpoint": writer, "value": ""})) - 3
    too_big = _filling(MAX_PAYLOAD_BYTES, head)
    assert len(json1.dumps(too_big)) > MAX_ITEM_BYTES
    fits = _filling(MAX_ITEM_BYTES, 0)
    rid = "n" * 128
    frames = [
        _frame("s:1", "channel/send", {"endpoint": writer, "value": too_big}),
        _frame("s:2", "channel/send", {"endpoint": writer, "value": fits}),
        _frame(rid, "channel/next", {"endpoint": reader}),
    ]
    refused, sent, read = await _answers(MemoryComponent(), frames, _Broker(), channels=party)
    assert refused["error"]["data"]["code"] == "RESOURCE_EXHAUSTED"
    assert sent["error"]["data"]["code"] == "RESOURCE_EXHAUSTED"  # the source was aborted
    assert read["id"] == rid and read["error"]["data"]["code"] == "RESOURCE_EXHAUSTED"
    other = ChannelHub().party("run")
    grants = other.create({})
    writer, reader = grants["send"]["endpoint"], grants["receive"]["endpoint"]
    frames = [
        _frame("s:2", "channel/send", {"endpoint": writer, "value": fits}),
        _frame(rid, "channel/next", {"endpoint": reader}),
    ]
    sent, read = await _answers(MemoryComponent(), frames, _Broker(), channels=other)
    assert sent["result"] is None
    assert read["id"] == rid and read["result"]["item"]["value"] == fits


# ----- reads that wait for their item ---------------------------------------------------


def _pair() -> tuple[Any, str, str]:
    party = ChannelHub().party("run")
    grants: Any = party.create({})
    return party, grants["send"]["endpoint"], grants["receive"]["endpoint"]


def _cancel(rid: str) -> bytes:
    cancel = {"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": rid}}
    return json.dumps(cancel).encode() + b"\n"


async def _played(
    component: MemoryComponent,
    script: Callable[[Any], Awaitable[None]],
    party: Any = None,
    params: dict[str, JSONValue] = PARAMS,
    **options: Any,
) -> Any:
    """Drive ``component`` while ``script(frames)`` plays it (``broker``, ``graces``:
    passed on; a script still sending when the run ends is stopped)."""
    broker = options.pop("broker", None) or _Broker()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(script, component.frames())
            outcome = await drive(component, params, broker, channels=party, **options)  # type: ignore[arg-type]
            tg.cancel_scope.cancel()
    return outcome


@pytest.mark.anyio
async def test_a_waiting_read_the_component_cancels_takes_no_item() -> None:
    party, writer, reader = _pair()
    component = MemoryComponent()
    seen: list[Any] = []

    async def script(frames: Any) -> None:
        root = await frames.__anext__()
        await component.to_host.send(_frame("n:1", "channel/next", {"endpoint": reader}))
        await anyio.wait_all_tasks_blocked()
        await component.to_host.send(_cancel("n:1"))
        seen.append(await frames.__anext__())
        await component.to_host.send(
            _frame("s:1", "channel/send", {"endpoint": writer, "value": "kept"})
            + _frame("n:2", "channel/next", {"endpoint": reader})
        )
        seen.extend([await frames.__anext__(), await frames.__anext__()])
        await component.finish(root)

    outcome = await _played(component, script, party)
    assert outcome.verdict.result is not None, outcome.verdict
    answers = {frame["id"]: frame for frame in seen}
    assert answers["n:1"]["error"]["data"]["code"] == "CANCELLED"
    assert answers["n:2"]["result"] == {"item": {"sequence": 1, "value": "kept"}}


@pytest.mark.anyio
async def test_a_waiting_read_is_answered_with_the_deadline_and_takes_no_item() -> None:
    import time

    party, writer, reader = _pair()
    component = MemoryComponent()
    seen: list[Any] = []
    params = {**PARAMS, "deadlineUnixMs": int(time.time() * 1000) + 300}

    async def script(frames: Any) -> None:
        root = await frames.__anext__()
        await component.to_host.send(_frame("n:1", "channel/next", {"endpoint": reader}))
        while len(seen) < 2:  # the root's request/cancel and the read's answer
            seen.append(await frames.__anext__())
        await component.finish(root)

    outcome = await _played(component, script, party, params)
    assert outcome.session.condition == "DEADLINE_EXCEEDED"
    answers = {frame.get("id"): frame for frame in seen}
    assert answers["n:1"]["error"]["data"]["code"] == "DEADLINE_EXCEEDED"
    assert answers[None]["method"] == "request/cancel"
    await party.send(writer, "later")  # the stopped read left the receiver free
    assert await party.next(reader) == {"item": {"sequence": 1, "value": "later"}}


@pytest.mark.anyio
async def test_a_read_waiting_when_the_run_ends_takes_nothing_sent_later() -> None:
    """The component answers its root with a read still pending: the run ends, and the
    read takes nothing sent afterwards (another reader could not read otherwise)."""
    party, writer, reader = _pair()
    component = MemoryComponent()

    async def script(frames: Any) -> None:
        root = await frames.__anext__()
        await component.to_host.send(_frame("n:1", "channel/next", {"endpoint": reader}))
        await anyio.wait_all_tasks_blocked()
        await component.finish(root)

    await _played(component, script, party)
    await party.send(writer, "after")
    assert await party.next(reader) == {"item": {"sequence": 1, "value": "after"}}


def test_a_waiting_read_is_answered_cancelled_when_the_driving_task_is_cancelled() -> None:
    party, _, reader = _pair()
    component = MemoryComponent()
    seen: list[Any] = []
    waiting = anyio.Event()

    async def main() -> None:
        async def script() -> None:
            frames = component.frames()
            root = await frames.__anext__()
            await component.to_host.send(_frame("n:1", "channel/next", {"endpoint": reader}))
            await anyio.wait_all_tasks_blocked()
            waiting.set()
            while not any(frame.get("id") == "n:1" for frame in seen):
                seen.append(await frames.__anext__())
            await component.finish(root)

        async with anyio.create_task_group() as tg:
            tg.start_soon(script)
            async with anyio.create_task_group() as driving:
                driving.start_soon(
                    partial(drive, component, PARAMS, _Broker(), channels=party)  # type: ignore[arg-type]
                )
                await waiting.wait()
                driving.cancel_scope.cancel()

    _within(20, main)
    answers = {frame.get("id"): frame for frame in seen}
    assert answers["n:1"]["error"]["data"]["code"] == "CANCELLED"


class _LargeBroker(_Broker):
    """Answers every call with a value of ``size`` characters, counting the calls."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.value = "v" * size
        self.calls = 0

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        self.calls += 1
        return {"value": self.value}


@pytest.mark.anyio
async def test_a_component_that_does_not_read_stdin_is_not_read_either() -> None:
    """Every call answered with 1 MiB while the component reads none of it: the host
    stops taking requests once STDIN_BACKLOG bytes of answers wait (memory bounded, not
    one answer per request), and goes on once the component reads."""
    from runner.host.stdin_writer import STDIN_BACKLOG

    component = MemoryComponent(stdin_room=1)
    broker = _LargeBroker(1 << 20)
    calls = 100
    seen: list[Any] = []

    async def play(frames: Any) -> None:
        root = await frames.__anext__()

        async def ask() -> None:
            for i in range(calls):
                await component.to_host.send(_call(i, "x"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()  # the host has stopped reading
            held = broker.calls
            assert held <= STDIN_BACKLOG // (1 << 20) + 4, held
            while len(seen) < calls:
                seen.append(await frames.__anext__())
        await component.finish(root)

    outcome = await _played(component, play, broker=broker)
    assert outcome.verdict.result is not None, outcome.verdict
    assert sorted(frame["id"] for frame in seen) == sorted(f"c:{i}" for i in range(calls))


class _DrainedComponent(MemoryComponent):
    """As on Docker: the end of the process is known only once its stdout was read to
    its end (the attach stream closes after the last output)."""

    def __init__(self) -> None:
        super().__init__(137, stdin_room=1)
        self.drained = anyio.Event()
        read = self.stdout.receive

        async def receive(max_bytes: int = 65536) -> bytes:
            try:
                return await read(max_bytes)
            except anyio.EndOfStream:
                self.drained.set()
                raise

        self.stdout.receive = receive  # type: ignore[method-assign]

    async def wait(self) -> int:
        await self.drained.wait()
        return await super().wait()


@pytest.mark.anyio
async def test_a_run_held_on_its_unread_stdin_still_ends_at_its_deadline() -> None:
    """The pump waits for the unread answers to leave, so stdout is not read; at the
    deadline the host kills, and the pump must read stdout to its end again, or a wait
    for the exit that needs it (Docker's) never returns."""
    import time

    component = _DrainedComponent()
    broker = _LargeBroker(1 << 20)
    params = {**PARAMS, "deadlineUnixMs": int(time.time() * 1000) + 500}

    async def play(frames: Any) -> None:
        await frames.__anext__()  # the root; nothing more is read
        for i in range(40):
            await component.to_host.send(_call(i, "x"))

    graces = StopGraces(cancel=0.2, exit=0.2)
    outcome = await _played(component, play, None, params, broker=broker, graces=graces)
    assert outcome.verdict.error is not None
    assert outcome.verdict.error.code == "DEADLINE_EXCEEDED"
