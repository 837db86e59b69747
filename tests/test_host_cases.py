"""The [H] cases of HOST-CASES.md that need neither channels nor containers.

Each test runs the scripted fake component as a local process through the Python API
(``runner.api.execute``) and checks the verdict, its reasons, and what the component saw.
The case-to-test table is tests/HOST-CASES-MAP.md.
"""

from __future__ import annotations

import pytest

from hostkit import FAST, ScriptedBroker, error_code, fake, output, run
from runner.sandbox.registry import StopGraces

# ----- PX: process exit and completion -----------------------------------------------


def test_px01_exit0_without_response_is_channel_lost() -> None:
    assert error_code(run(fake("exit0-silent"))) == "CHANNEL_LOST"


def test_px01_exit7_without_response_is_execution_failed() -> None:
    execution = run(fake("exit7-silent"))
    assert error_code(execution) == "EXECUTION_FAILED"
    assert execution.report.exit_code == 7


def test_px02_second_frame_after_response_is_rejected() -> None:
    execution = run(fake("trailing-frame"))
    assert error_code(execution) == "PROTOCOL_ERROR"
    assert any("after the root" in r for r in execution.report.reasons)


def test_px03_partial_trailing_bytes_are_rejected() -> None:
    assert error_code(run(fake("trailing-partial"))) == "PROTOCOL_ERROR"


def test_px04_two_mib_of_trailing_bytes_drain_and_reject() -> None:
    execution = run(fake("trailing-2mib"))
    assert error_code(execution) == "PROTOCOL_ERROR"
    # No pipe deadlock: the host read on past the response (and may kill the writer once
    # it sees the violation; whether it finished first depends on scheduling).
    assert execution.report.bytes_from_component > 100
    assert execution.report.host_kill in (None, "violation")
    assert execution.report.timings["total"] < 5
    assert "unexpected bytes" in execution.verdict.error.message  # type: ignore[union-attr]


def test_px05_nonzero_exit_after_response_is_execution_failed() -> None:
    execution = run(fake("exit7-after-response"))
    assert error_code(execution) == "EXECUTION_FAILED"
    assert "component exited 7" in execution.report.reasons


def test_px06_one_mib_of_stderr_is_drained_and_permitted() -> None:
    execution = run(fake("stderr-1mib"))
    assert output(execution) == "ok"
    assert execution.report.stderr_bytes == 16 * 65536
    assert not execution.report.stderr_truncated


def test_px07_no_exit_after_response_is_killed_and_failed() -> None:
    execution = run(fake("no-exit"))
    assert error_code(execution) == "EXECUTION_FAILED"
    assert execution.report.host_kill == "post-response"


def test_px08_frame_after_root_response_is_fatal() -> None:
    assert error_code(run(fake("frame-after-root"))) == "PROTOCOL_ERROR"


# ----- FR-14 and component-side framing / JSON/1 violations ----------------------------


def test_fr14_response_of_exactly_16_mib_is_accepted() -> None:
    execution = run(fake("pad-16mib"))
    assert len(output(execution)) == 4
    assert execution.report.bytes_from_component == 16_777_217


def test_fr14_response_of_16_mib_plus_one_is_rejected() -> None:
    execution = run(fake("pad-16mib-plus1"))
    assert error_code(execution) == "PROTOCOL_ERROR"
    assert "exceeds" in execution.verdict.error.message  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "scenario",
    [
        "bad-json",
        "duplicate-member",
        "lone-surrogate",
        "unsafe-integer",
        "nan",
        "bom",
        "invalid-utf8",
        "empty-frame",
        "incomplete-frame",
        "batch",
        "non-object",
    ],
)
def test_framing_and_json1_violations_are_fatal(scenario: str) -> None:
    execution = run(fake(scenario))
    assert error_code(execution) == "PROTOCOL_ERROR"
    assert execution.report.host_kill in (None, "violation")


# ----- EN-05: the envelope validator on component output --------------------------------


@pytest.mark.parametrize(
    "scenario",
    ["numeric-id", "null-params", "extra-member", "wrong-version", "result-and-error"],
)
def test_en05_invalid_envelopes_are_fatal(scenario: str) -> None:
    assert error_code(run(fake(scenario))) == "PROTOCOL_ERROR"


# ----- DI-04, params, correlation, root checks -----------------------------------------


def test_di04_wrong_direction_and_unknown_methods_get_32601_and_continue() -> None:
    seen = output(run(fake("wrong-direction")))
    assert seen == {"flow/run": -32601, "unknown": -32601, "cancel-as-request": -32601}


def test_invalid_call_params_get_32602_and_the_channel_continues() -> None:
    broker = ScriptedBroker()
    seen = output(run(fake("invalid-call-params"), broker=broker))
    assert seen == {"empty": -32602, "bad-slot": -32602, "extra": -32602}
    assert broker.dispatched == []


def test_without_configuration_child_runs_and_capabilities_are_unavailable() -> None:
    import anyio

    from runner.api import Execution, Invocation, execute
    from runner.host.driver import RunControl

    async def main() -> Execution:
        return await execute(
            fake("unavailable"),
            Invocation.within(20),
            target="fake",
            graces=FAST,
            control=RunControl(),
        )

    assert output(anyio.run(main)) == {"child": "UNAVAILABLE", "capability": "UNAVAILABLE"}


def test_co01_request_id_reuse_after_settlement_is_fatal() -> None:
    execution = run(fake("reuse-id"))
    assert error_code(execution) == "PROTOCOL_ERROR"
    assert "reused request ID" in execution.verdict.error.message  # type: ignore[union-attr]


def test_response_to_an_unknown_id_is_fatal() -> None:
    assert error_code(run(fake("unknown-response-id"))) == "PROTOCOL_ERROR"


def test_co04_root_response_with_a_different_id_is_fatal() -> None:
    assert error_code(run(fake("wrong-root-id"))) == "PROTOCOL_ERROR"


def test_rl05_root_result_outcome_must_be_a_local_name() -> None:
    assert error_code(run(fake("bad-root-result"))) == "PROTOCOL_ERROR"


def test_standard_error_reply_to_flow_run_is_fatal() -> None:
    assert error_code(run(fake("standard-error-root"))) == "PROTOCOL_ERROR"


def test_root_response_with_pending_calls_is_fatal() -> None:
    assert error_code(run(fake("response-while-pending"))) == "PROTOCOL_ERROR"


def test_custom_outcome_and_component_error_are_accepted() -> None:
    custom = run(fake("custom-outcome"))
    assert custom.verdict.result == {"outcome": "partial", "output": {"why": "custom"}}
    failed = run(fake("error-result"))
    assert error_code(failed) == "INVALID_INPUT"
    assert failed.verdict.accepted
    assert failed.verdict.error.details == {"field": "name"}  # type: ignore[union-attr]


# ----- RB: request bounds --------------------------------------------------------------


def test_rb02_sixty_fifth_simultaneous_call_is_refused_without_dispatch() -> None:
    broker = ScriptedBroker(gather=64)
    assert output(run(fake("simultaneous-65"), broker=broker)) == {"accepted": 64, "rejected": 1}
    assert len(broker.dispatched) == 64


@pytest.mark.slow
def test_rb05_lifetime_limit_is_fatal_at_65537() -> None:
    broker = ScriptedBroker()
    execution = run(fake("lifetime-65537"), broker=broker, deadline=120)
    assert error_code(execution) == "PROTOCOL_ERROR"
    assert "lifetime limit" in execution.verdict.error.message  # type: ignore[union-attr]
    assert len(broker.dispatched) == 65_535, "#65,536 (-32602) and #65,537 not dispatched"
    assert "#65536 answered -32602" in execution.report.stderr


# ----- cancellation ----------------------------------------------------------------------


def test_component_cancels_valid_duplicate_and_unknown() -> None:
    seen = output(run(fake("component-cancels")))
    assert seen == {"cancelled": "CANCELLED", "after": {"value": 2}}


def test_malformed_cancel_notification_is_fatal() -> None:
    assert error_code(run(fake("malformed-cancel"))) == "PROTOCOL_ERROR"


def test_root_cancel_with_cooperative_component_and_owner_closed() -> None:
    execution = run(fake("cooperative-cancel"), cancel=True)
    assert error_code(execution) == "CANCELLED"
    assert execution.verdict.accepted
    assert execution.verdict.error.details == {"afterCancel": "OWNER_CLOSED"}  # type: ignore[union-attr]


def test_root_cancel_ignored_is_killed_after_grace() -> None:
    execution = run(fake("ignore-cancel"), cancel=True)
    assert error_code(execution) == "CANCELLED"
    assert execution.report.host_kill == "cancel"
    assert execution.report.timings["total"] < FAST.cancel + 3  # the grace, not a hang


def test_deadline_ignored_is_killed_after_grace() -> None:
    execution = run(fake("ignore-cancel"), deadline=0.3, graces=StopGraces(cancel=0.3, exit=0.3))
    assert error_code(execution) == "DEADLINE_EXCEEDED"
    assert execution.report.condition == "DEADLINE_EXCEEDED"
    assert execution.report.host_kill == "cancel"


def test_en06_a_provider_that_raises_is_execution_failed_not_32603() -> None:
    assert output(run(fake("provider-raises"))) == {"raised": "EXECUTION_FAILED"}


# ----- OP: operation identity ------------------------------------------------------------


def test_op01_join_replay_conflict() -> None:
    broker = ScriptedBroker()
    seen = output(run(fake("operation-join-replay-conflict"), broker=broker))
    receipt = {"value": {"receipt": "shared"}}
    assert seen == {
        "first": receipt,
        "second": receipt,
        "replay": receipt,
        "conflict": "OPERATION_CONFLICT",
    }
    assert broker.count("shared:1") == 1


def test_op02_cancelling_one_joined_waiter_keeps_the_operation() -> None:
    broker = ScriptedBroker()
    seen = output(run(fake("joined-waiter-cancellation"), broker=broker))
    assert seen == {"cancellation": "CANCELLED", "survivor": {"value": {"receipt": "survived"}}}
    assert broker.count("shared-cancel:1") == 1


def test_op03_uncertain_is_replayed_without_redispatch() -> None:
    broker = ScriptedBroker()
    seen = output(run(fake("uncertain-replay"), broker=broker))
    assert seen == ["UNCERTAIN", "UNCERTAIN", {"value": "fine"}]
    assert broker.count("uncertain:1") == 1
    assert broker.count("uncertain:2") == 1


def test_ch08_channel_results_have_exactly_the_spec_shapes() -> None:
    """What the host answers for each channel method, frame by frame (§7.1, §7.2, BC-03)."""
    seen = output(run(fake("channel-wire")))
    pair = seen["pair"]
    assert set(pair) == {"send", "receive"}
    assert set(pair["send"]) == {"endpoint", "direction", "delivery"}
    assert pair["send"]["direction"] == "send" and pair["send"]["delivery"] == "direct"
    assert pair["receive"] == {**pair["receive"], "direction": "receive", "startSequence": 1}
    assert set(pair["receive"]) == {"endpoint", "direction", "delivery", "startSequence"}
    assert pair["send"]["endpoint"] != pair["receive"]["endpoint"]
    assert seen["sent"] is None and seen["closed"] is None
    assert seen["item"] == {"item": {"sequence": 1, "value": {"n": 1}}}
    assert seen["end"] == {"end": {"lastSequence": 1}}
    assert seen["released"] == {"status": "ended", "lastSequence": 1}
    broadcast = seen["broadcast"]
    assert set(broadcast) == {"send", "source"} and broadcast["send"]["delivery"] == "broadcast"
    assert seen["reader"]["startSequence"] == 1 and seen["reader"]["delivery"] == "broadcast"
    assert seen["forged"] == "PERMISSION_DENIED", "a made-up reference grants nothing"
    assert seen["notEndpoint"] == "PERMISSION_DENIED", "a source reference is not an endpoint"
    assert seen["wrongWay"] == "PERMISSION_DENIED"


def test_a_receiver_read_from_and_left_unfinished_fails_the_run() -> None:
    execution = run(fake("channel-abandoned"))
    assert error_code(execution) == "EXECUTION_FAILED"
    assert "left unfinished" in execution.verdict.error.message  # type: ignore[union-attr]
