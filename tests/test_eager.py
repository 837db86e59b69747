"""EagerCall: a call run in the awaiting task, its cancel scope entered only if it waits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from runner.host.eager import CallScope, EagerCall


async def guarded(main: Callable[[], Awaitable[None]]) -> None:
    """A call the scope fails to stop would wait forever: fail instead."""
    with anyio.fail_after(10):
        await main()


def test_a_call_that_does_not_wait_makes_no_scope_and_no_hand_off() -> None:
    async def main() -> None:
        done: list[str] = []
        suspended: list[bool] = []

        async def at_once() -> None:
            done.append("answered")

        scope = CallScope()
        call = EagerCall(at_once(), scope, lambda: suspended.append(True))
        await call
        assert done == ["answered"]
        assert not call.suspended and suspended == []
        assert scope._scope is None and not scope.cancelled_caught

    anyio.run(guarded, main)


def test_a_call_that_waits_hands_off_once_and_is_cancelled_where_it_waits() -> None:
    async def main() -> None:
        scope = CallScope()
        handed: list[bool] = []
        waiting = anyio.Event()
        reached: list[str] = []

        async def waits() -> None:
            await anyio.lowlevel.checkpoint()  # the first suspension: the hand-off
            waiting.set()
            await anyio.sleep_forever()
            reached.append("after the wait")  # never: the cancel stops it at the wait

        async def cancel_when_waiting() -> None:
            await waiting.wait()
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_when_waiting)
            call = EagerCall(waits(), scope, lambda: handed.append(True))
            await call  # returns quietly: the call's own cancellation ends only the call
        assert call.suspended and handed == [True]
        assert scope.cancelled_caught and reached == []

    anyio.run(guarded, main)


def test_a_cancel_before_the_call_runs_takes_effect_at_its_first_wait() -> None:
    async def main() -> None:
        steps: list[str] = []

        async def waits() -> None:
            steps.append("first step")  # runs: nothing can stop a step that does not wait
            await anyio.sleep_forever()
            steps.append("after the wait")

        scope = CallScope()
        scope.cancel()
        await EagerCall(waits(), scope, lambda: None)
        assert steps == ["first step"] and scope.cancelled_caught

        async def at_once() -> None:
            steps.append("answered")

        queued = CallScope()
        queued.cancel()
        await EagerCall(at_once(), queued, lambda: None)
        assert steps[-1] == "answered" and not queued.cancelled_caught

    anyio.run(guarded, main)


def test_failures_and_outer_cancellation_pass_through() -> None:
    async def main() -> None:
        async def fails_after_waiting() -> None:
            await anyio.lowlevel.checkpoint()
            raise LookupError("the provider failed")

        with pytest.raises(LookupError, match="the provider failed"):
            await EagerCall(fails_after_waiting(), CallScope(), lambda: None)

        scope = CallScope()

        async def waits_forever() -> None:
            await anyio.sleep_forever()

        with anyio.move_on_after(0) as outer:  # the run ending: not the call's own scope
            await EagerCall(waits_forever(), scope, lambda: None)
        assert outer.cancelled_caught and not scope.cancelled_caught

    anyio.run(guarded, main)
