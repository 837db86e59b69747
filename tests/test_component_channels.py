"""The SDK's channel surface against a scripted host: a real component process, frames by hand.

Like ``test_component_sdk.py`` (whose harness this reuses), each test starts a component
(``tests/components/sdk_channels_scenarios.py``), plays the host's side of the
channels extension frame by frame, and checks the exact params the SDK writes, what
it refuses locally, which host replies it treats as fatal, and how the Run ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from test_component_sdk import (
    ROOT_ID,
    ScriptedHost,
    cancel,
    fatal_exit,
    operation_error,
    result,
    root_error,
    success,
)

SCRIPT = Path(__file__).parent / "components" / "sdk_channels_scenarios.py"
CONTRACT = {
    "id": "https://example.com/contracts/events",
    "version": "1.0.0",
    "digest": "sha256:" + "a" * 64,
}
Launch = Callable[..., ScriptedHost]


@pytest.fixture
def host() -> Iterator[Launch]:
    hosts: list[ScriptedHost] = []

    def launch(env: dict[str, str] | None = None) -> ScriptedHost:
        hosts.append(ScriptedHost(SCRIPT, env))
        return hosts[-1]

    yield launch
    for each in hosts:
        each.kill()


def sender_grant(
    endpoint: str, delivery: str = "direct", contract: dict[str, str] | None = None
) -> dict[str, Any]:
    grant: dict[str, Any] = {"endpoint": endpoint, "direction": "send", "delivery": delivery}
    if contract is not None:
        grant["contract"] = contract
    return grant


def receiver_grant(
    endpoint: str, start: int = 1, delivery: str = "direct", contract: dict[str, str] | None = None
) -> dict[str, Any]:
    grant = {**sender_grant(endpoint, delivery, contract), "direction": "receive"}
    return {**grant, "startSequence": start}


def pair(n: int = 1) -> dict[str, Any]:
    return {"send": sender_grant(f"w:{n}"), "receive": receiver_grant(f"r:{n}")}


def item(sequence: int, value: Any) -> dict[str, Any]:
    return {"item": {"sequence": sequence, "value": value}}


def end(last: int) -> dict[str, Any]:
    return {"end": {"lastSequence": last}}


def expect(h: ScriptedHost, method: str, params: Any) -> dict[str, Any]:
    """The next frame must be the request ``method`` with exactly ``params``."""
    frame = h.recv()
    assert (frame.get("method"), frame.get("params")) == (method, params), frame
    assert "id" in frame
    return frame


def reply(h: ScriptedHost, method: str, params: Any, value: Any) -> dict[str, Any]:
    """Expect one request and answer it with ``value``."""
    frame = expect(h, method, params)
    h.send(result(frame["id"], value))
    return frame


def serve(h: ScriptedHost, answer: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """Answer every request with ``answer(frame)`` until the root response; return it."""
    while (frame := h.recv())["id"] != ROOT_ID:
        h.send(result(frame["id"], answer(frame)))
    assert h.finish() == 0, h.stderr
    return frame


IN = {"endpoint": "in:1"}
OUT = {"endpoint": "out:1"}


# --- creating, sending, closing --------------------------------------------------------


def test_direct_pair_send_and_close_on_the_wire(host: Launch) -> None:
    h = host()
    h.start({"scenario": "pair-send-close", "values": [1, {"a": "é"}]})
    reply(h, "channel/create", {}, pair())
    reply(h, "channel/send", {"endpoint": "w:1", "value": 1}, None)
    reply(h, "channel/send", {"endpoint": "w:1", "value": {"a": "é"}}, None)
    close = expect(h, "channel/close", {"endpoint": "w:1"})
    h.assert_quiet()  # the second close joins the first
    h.send(result(close["id"], None))
    # the sender was used: the pair is not released, and no writer is sealed implicitly
    assert h.end_root() == success(
        {"send": "w:1", "receive": "r:1", "start": 1, "delivery": "direct"}
    )


def test_create_params_and_local_refusals(host: Launch) -> None:
    h = host()
    h.start({"scenario": "create-params"})
    reply(h, "channel/create", {"schema": {"type": "integer"}}, pair(1))
    reply(h, "channel/create", {"schema": False}, pair(2))
    broadcast = {"send": sender_grant("w:3", "broadcast"), "source": "src:3"}
    reply(
        h,
        "channel/create",
        {"delivery": "broadcast", "contract": "./contracts/events.json"},
        broadcast,
    )
    # the two untouched direct pairs are released at completion, the source is not
    reply(h, "channel/release", {"endpoint": "r:1"}, {"status": "released"})
    reply(h, "channel/release", {"endpoint": "r:2"}, {"status": "released"})
    refused = dict.fromkeys(["both", "delivery", "contract", "schema"], "ValueError")
    assert h.end_root() == success(refused)


def test_close_is_refused_while_a_send_is_unanswered(host: Launch) -> None:
    h = host()
    h.start({"scenario": "close-while-sending"}, channels={"out": sender_grant("out:1")})
    send = expect(h, "channel/send", {**OUT, "value": "v"})
    h.assert_quiet()  # the refused close wrote nothing
    h.send(result(send["id"], None))
    reply(h, "channel/close", OUT, None)
    assert h.end_root() == success({"refused": "INVALID_INPUT", "after-close": "DISCONNECTED"})


def test_cancelled_close_wait_keeps_the_close_alive(host: Launch) -> None:
    h = host()
    h.start({"scenario": "cancel-close"}, channels={"out": sender_grant("out:1")})
    close = expect(h, "channel/close", OUT)
    h.assert_quiet(0.2)  # no request/cancel: a settlement is not withdrawn
    h.send(result(close["id"], None))
    assert h.end_root() == success(True)


@pytest.mark.parametrize(
    "created",
    [
        {"send": sender_grant("x:1"), "receive": receiver_grant("x:1")},
        {"send": sender_grant("w:1", contract=CONTRACT), "receive": receiver_grant("r:1")},
        {"send": sender_grant("w:1"), "receive": receiver_grant("r:1", delivery="broadcast")},
        {"send": receiver_grant("w:1"), "receive": receiver_grant("r:1")},
        {"send": sender_grant("w:1", "broadcast"), "source": "src:1"},
        {**pair(), "source": "src:1"},
        {"send": sender_grant("w:1")},
    ],
)
def test_malformed_direct_create_result_is_fatal(host: Launch, created: Any) -> None:
    h = host()
    h.start({"scenario": "unused-pair"})
    reply(h, "channel/create", {}, created)
    fatal_exit(h)


@pytest.mark.parametrize(
    "created",
    [
        pair(),
        {"send": sender_grant("w:1"), "source": "src:1"},
        {"send": sender_grant("w:1", "broadcast")},
    ],
)
def test_malformed_broadcast_create_result_is_fatal(host: Launch, created: Any) -> None:
    h = host()
    h.start({"scenario": "broadcast"})
    reply(h, "channel/create", {"delivery": "broadcast"}, created)
    fatal_exit(h)


def test_send_result_other_than_null_is_fatal(host: Launch) -> None:
    h = host()
    h.start({"scenario": "pair-send-close", "values": [1]})
    reply(h, "channel/create", {}, pair())
    reply(h, "channel/send", {"endpoint": "w:1", "value": 1}, {"accepted": True})
    fatal_exit(h)


def test_cancelled_create_releases_the_late_grants(host: Launch) -> None:
    h = host()
    h.start({"scenario": "cancel-create"})
    create = expect(h, "channel/create", {})
    assert h.recv() == cancel(create["id"])
    h.assert_quiet()  # the root waits for the create's reply
    h.send(result(create["id"], pair()))
    reply(h, "channel/release", {"endpoint": "r:1"}, {"status": "released"})
    assert h.end_root() == success(True)


# --- reading ---------------------------------------------------------------------------


def test_receiver_reads_contiguous_items_one_at_a_time(host: Launch) -> None:
    h = host()
    h.start({"scenario": "read-all"}, channels={"in": receiver_grant("in:1")})
    for sequence, value in enumerate(["a", {"b": [1]}, None], start=1):
        read = expect(h, "channel/next", IN)
        h.assert_quiet()  # one pending read, no prefetch
        h.send(result(read["id"], item(sequence, value)))
    reply(h, "channel/next", IN, end(3))
    # the end was delivered: nothing is read or released afterwards
    output = {"values": ["a", {"b": [1]}, None], "last": 3, "after": "StopAsyncIteration"}
    assert h.end_root() == success(output)


@pytest.mark.parametrize(
    "replies",
    [
        [item(2, "skips 1")],
        [item(1, "a"), item(3, "skips 2")],
        [item(1, "a"), item(1, "again")],
        [item(1, "a"), end(2)],
        [end(1)],
        [{"item": {"sequence": 1}}],
        [{**item(1, "a"), **end(1)}],
        [{"end": {"lastSequence": -1}}],
    ],
)
def test_broken_sequences_are_fatal(host: Launch, replies: list[Any]) -> None:
    h = host()
    h.start({"scenario": "read-all"}, channels={"in": receiver_grant("in:1")})
    for value in replies:
        reply(h, "channel/next", IN, value)
    fatal_exit(h)


def test_lagged_is_raised_and_sticky(host: Launch) -> None:
    h = host()
    grant = receiver_grant("in:1", start=4, delivery="broadcast")
    h.start({"scenario": "lagged"}, channels={"in": grant})
    read = expect(h, "channel/next", IN)
    h.send(operation_error(read["id"], "LAGGED", {"capacity": 8}))
    # the second read raises the same failure without asking the host again
    failed = {"status": "failed", "code": "LAGGED", "details": {"capacity": 8}}
    reply(h, "channel/release", IN, failed)
    output = {"codes": ["LAGGED", "LAGGED"], "status": ["failed", "LAGGED", {"capacity": 8}]}
    assert h.end_root() == success(output)


@pytest.mark.parametrize(
    ("status", "seen"),
    [
        ({"status": "released"}, ["released", None, None, None]),
        ({"status": "ended", "lastSequence": 1}, ["ended", 1, None, None]),
        ({"status": "ended", "lastSequence": 5}, ["ended", 5, None, None]),
        ({"status": "failed", "code": "DISCONNECTED"}, ["failed", None, "DISCONNECTED", None]),
        ({"status": "failed", "code": "LAGGED", "details": [1]}, ["failed", None, "LAGGED", [1]]),
    ],
)
def test_release_statuses(host: Launch, status: dict[str, Any], seen: list[Any]) -> None:
    h = host()
    h.start({"scenario": "release"}, channels={"in": receiver_grant("in:1")})
    reply(h, "channel/next", IN, item(1, "a"))
    release = expect(h, "channel/release", IN)
    h.assert_quiet()  # the second aclose joins the first release
    h.send(result(release["id"], status))
    assert h.end_root() == success({"first": "a", "status": seen, "after": "StopAsyncIteration"})


@pytest.mark.parametrize(
    "status",
    [
        {"status": "ended", "lastSequence": 0},  # before the delivered item 1
        {"status": "ended"},
        {"status": "released", "lastSequence": 1},
        {"status": "failed", "code": "NOPE"},
        {"status": "failed"},
        {"status": "gone"},
        None,
    ],
)
def test_malformed_or_inconsistent_release_is_fatal(host: Launch, status: Any) -> None:
    h = host()
    h.start({"scenario": "release"}, channels={"in": receiver_grant("in:1")})
    reply(h, "channel/next", IN, item(1, "a"))
    reply(h, "channel/release", IN, status)
    fatal_exit(h)


def test_release_after_the_end_sends_nothing(host: Launch) -> None:
    h = host()
    h.start({"scenario": "release-after-end"}, channels={"in": receiver_grant("in:1")})
    reply(h, "channel/next", IN, item(1, "a"))
    reply(h, "channel/next", IN, end(1))
    assert h.end_root() == success({"values": ["a"], "status": ["ended", 1]})


def test_cancelled_read_cancels_releases_and_waits_for_the_read(host: Launch) -> None:
    h = host()
    h.start({"scenario": "cancel-read"}, channels={"in": receiver_grant("in:1")})
    read = expect(h, "channel/next", IN)
    assert h.recv() == cancel(read["id"])
    reply(h, "channel/release", IN, {"status": "released"})
    h.assert_quiet()  # disposal waits for the read's own reply
    h.send(operation_error(read["id"], "CANCELLED"))
    store = {"operationId": "op:1", "slot": "store", "method": "write", "input": {"n": 1}}
    reply(h, "capability/call", store, {"value": None})
    assert h.end_root() == success({"cancelled": True, "status": "released"})


def test_release_end_contradicted_by_a_late_read_is_fatal(host: Launch) -> None:
    h = host()
    h.start({"scenario": "cancel-read"}, channels={"in": receiver_grant("in:1")})
    read = expect(h, "channel/next", IN)
    assert h.recv() == cancel(read["id"])
    reply(h, "channel/release", IN, {"status": "ended", "lastSequence": 0})
    h.send(result(read["id"], item(1, "committed after the end")))
    fatal_exit(h)


# --- completion ------------------------------------------------------------------------


def test_unused_pair_is_released_at_completion(host: Launch) -> None:
    h = host()
    h.start({"scenario": "unused-pair"})
    reply(h, "channel/create", {}, pair())
    release = expect(h, "channel/release", {"endpoint": "r:1"})
    h.assert_quiet()  # the root response waits for the release
    h.send(result(release["id"], {"status": "released"}))
    assert h.end_root() == success("r:1")


def test_failed_release_of_an_unused_pair_does_not_fail_the_run(host: Launch) -> None:
    h = host()
    h.start({"scenario": "unused-pair"})
    reply(h, "channel/create", {}, pair())
    release = expect(h, "channel/release", {"endpoint": "r:1"})
    h.send(operation_error(release["id"], "PERMISSION_DENIED"))
    assert h.end_root() == success("r:1")


def test_abandoned_receiver_fails_the_run(host: Launch) -> None:
    h = host()
    h.start({"scenario": "read-one"}, channels={"in": receiver_grant("in:1")})
    reply(h, "channel/next", IN, item(1, "x"))
    assert root_error(h.end_root()) == "EXECUTION_FAILED"


def test_receiver_left_through_async_with_is_released(host: Launch) -> None:
    h = host()
    h.start({"scenario": "read-one-in-context"}, channels={"in": receiver_grant("in:1")})
    reply(h, "channel/next", IN, item(1, "x"))
    reply(h, "channel/release", IN, {"status": "released"})
    assert h.end_root() == success("x")


def test_unread_subscription_is_abandoned(host: Launch) -> None:
    h = host()
    h.start({"scenario": "subscribe-only"})
    created = {"send": sender_grant("w:1", "broadcast"), "source": "src:1"}
    reply(h, "channel/create", {"delivery": "broadcast"}, created)
    reply(h, "channel/subscribe", {"source": "src:1"}, receiver_grant("r:1", 1, "broadcast"))
    assert root_error(h.end_root()) == "EXECUTION_FAILED"


def test_offered_subscription_is_not_abandoned(host: Launch) -> None:
    h = host()
    h.start({"scenario": "offered-subscription"})
    created = {"send": sender_grant("w:1", "broadcast"), "source": "src:1"}
    reply(h, "channel/create", {"delivery": "broadcast"}, created)
    reply(h, "channel/subscribe", {"source": "src:1"}, receiver_grant("r:1", 1, "broadcast"))
    child = {"operationId": "monitor", "slot": "monitor", "input": None}
    done = {"outcome": "done", "output": None}
    reply(h, "flow/run-child", {**child, "channels": {"progress": "r:1"}}, done)
    assert h.end_root() == success("offered")


# --- broadcast -------------------------------------------------------------------------


def test_broadcast_create_and_subscribe(host: Launch) -> None:
    h = host()
    h.start({"scenario": "broadcast"})
    created = {"send": sender_grant("w:b", "broadcast"), "source": "src:1"}
    reply(h, "channel/create", {"delivery": "broadcast"}, created)
    reply(h, "channel/subscribe", {"source": "src:1"}, receiver_grant("r:b", 3, "broadcast"))
    reply(h, "channel/next", {"endpoint": "r:b"}, item(3, "late"))
    reply(h, "channel/next", {"endpoint": "r:b"}, end(3))
    output = {
        "source": "src:1",
        "send": ["w:b", "broadcast"],
        "start": 3,
        "values": ["late"],
        "mapped": "ValueError",  # a source reference is not an endpoint
    }
    assert h.end_root() == success(output)


@pytest.mark.parametrize(
    ("writer_contract", "subscription"),
    [
        (CONTRACT, receiver_grant("r:b", 1, "broadcast")),
        (None, receiver_grant("r:b", 1, "broadcast", CONTRACT)),
        (None, receiver_grant("r:b", 1, "direct")),
        (None, sender_grant("r:b", "broadcast")),
        (None, receiver_grant("w:b", 1, "broadcast")),  # the writer's own reference
    ],
)
def test_bad_subscription_is_fatal(
    host: Launch, writer_contract: dict[str, str] | None, subscription: dict[str, Any]
) -> None:
    h = host()
    h.start({"scenario": "broadcast"})
    created = {"send": sender_grant("w:b", "broadcast", writer_contract), "source": "src:1"}
    reply(h, "channel/create", {"delivery": "broadcast"}, created)
    reply(h, "channel/subscribe", {"source": "src:1"}, subscription)
    fatal_exit(h)


# --- the reserve -----------------------------------------------------------------------


def test_reserve_keeps_one_wire_slot_for_settlements(host: Launch) -> None:
    h = host()
    h.start({"scenario": "reserve"}, channels={"out": sender_grant("out:1")})
    calls = h.recv_calls(63)
    assert {frame["method"] for frame in calls} == {"capability/call"}
    close = expect(h, "channel/close", OUT)
    assert close["id"] == "component:64"
    h.assert_quiet()
    h.send(result(close["id"], None))
    h.assert_quiet()  # the 64th ordinary call waits for an ordinary slot
    h.send(result(calls[0]["id"], {"value": None}))
    last = h.recv()
    assert last["params"]["operationId"] == "op:64"
    h.send(*(result(frame["id"], {"value": None}) for frame in [*calls[1:], last]))
    assert h.end_root() == success("settled")


def test_lifetime_reserve_keeps_ids_for_settlements(host: Launch) -> None:
    h = host(env={"FLOW_TEST_LIFETIME": "10"})
    h.start({"scenario": "lifetime"})
    reply(h, "channel/create", {}, pair())  # component:1; holds 2 ids for w:1 and r:1
    for n in range(1, 8):
        call = h.recv()
        assert call["params"]["operationId"] == f"op:{n}"
        h.send(result(call["id"], {"value": None}))
    assert reply(h, "channel/close", {"endpoint": "w:1"}, None)["id"] == "component:9"
    release = reply(h, "channel/release", {"endpoint": "r:1"}, {"status": "released"})
    assert release["id"] == "component:10"
    assert h.end_root() == success({"accepted": 7, "refused": "RESOURCE_EXHAUSTED"})


def test_endpoints_are_limited_to_512_per_run(host: Launch) -> None:
    h = host()
    h.start({"scenario": "exhaust"}, channels={"in": receiver_grant("in:1")})
    created = 0

    def answer(frame: dict[str, Any]) -> Any:
        nonlocal created
        if frame["method"] == "channel/create":
            created += 1
            return pair(created)
        return {"status": "released"}  # the unused pairs, at completion

    response = serve(h, answer)
    assert created == 255  # 1 root grant + 255 pairs = 511; one more pair would be 513
    assert response == success({"created": 255, "refused": "RESOURCE_EXHAUSTED"})


# --- root grants and call maps ---------------------------------------------------------


def test_root_grants_are_wrapped_with_their_direction(host: Launch) -> None:
    h = host()
    channels = {"out": sender_grant("out:1", contract=CONTRACT), "in": receiver_grant("in:1")}
    h.start({"scenario": "wrap"}, channels=channels)
    output = {
        "sender": ["out:1", "direct"],
        "contract": [CONTRACT["id"], CONTRACT["version"], CONTRACT["digest"]],
        "receiver": ["in:1", "direct", 1],
        "wrong": ["ValueError", "ValueError", "KeyError"],
    }
    assert h.end_root() == success(output)  # unread grants are neither released nor closed


def test_endpoint_objects_and_references_in_call_maps(host: Launch) -> None:
    h = host()
    h.start({"scenario": "mapped"})
    reply(h, "channel/create", {}, pair())
    capability = {"operationId": "cap:1", "slot": "sink", "method": "drain", "input": None}
    reply(h, "capability/call", {**capability, "channels": {"in": "r:1"}}, {"value": None})
    child = {"operationId": "child:1", "slot": "producer", "input": None}
    reply(
        h, "flow/run-child", {**child, "channels": {"out": "w:1"}}, {"outcome": "done", "output": 1}
    )
    # both ends were offered to callees: the SDK releases neither
    assert h.end_root() == success("mapped")
