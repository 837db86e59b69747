"""One capability slot bound to a provider: the whole of a ``capability/call``.

:meth:`CapabilityBinding.call` returns exactly the call's success result or raises the
:class:`OperationError` the component receives:

* the input fails the contract's schema -> ``INVALID_INPUT`` (before the provider runs);
* the method is undeclared or unknown to the provider -> ``UNAVAILABLE``;
* the value, or the error's name or data, is outside JSON/1, not a LocalName, undeclared
  or fails its schema -> ``INVALID_RESULT``;
* the provider lost the call with its effect unknown -> ``UNCERTAIN``;
* the provider raised anything else -> ``EXECUTION_FAILED``, naming the provider and the
  exception type (never ``-32603``, which is for failures of the protocol itself).

Without a contract (a ``local: true`` slot) only the result's shape is checked.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Final

import anyio.to_thread

from runner import json1
from runner.contracts.capability import CapabilityContract, ContractBinding, operation_error
from runner.contracts.ports import PortSpec, ports_of
from runner.host.channels import HostEndpoint
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError
from runner.protocol.names import is_local_name

from .provider import CapabilityError, InvalidInput, Provider, ProviderLost, UnknownMethod

INLINE_CHECK_BYTES: Final = 65_536
"""Values whose JSON is larger are checked in a worker thread: a check may take seconds,
which must not stall the event loop; for a small value the hop costs more than the check."""


class CapabilityBinding:
    """A slot's provider, and optionally the contract its calls are held to."""

    def __init__(
        self,
        slot: str,
        provider: Provider,
        contract: CapabilityContract | None = None,
        *,
        provider_name: str | None = None,
    ) -> None:
        """``provider_name`` names the provider in messages (default: its class name)."""
        self.slot = slot
        self.provider = provider
        self.contract = contract
        self.provider_name = provider_name or type(provider).__name__
        self._checks = ContractBinding(contract) if contract is not None else None

    async def call(
        self, method: str, input: JSONValue, channels: Mapping[str, HostEndpoint] | None = None
    ) -> JSONValue:
        """``{"value": v}`` or ``{"error": {"name": n, "data": d}}``, or OperationError;
        ``channels`` (port → endpoint) reach the provider as its ``channels`` keyword."""
        try:
            if self._checks is not None:
                size = len(json1.dumps(input))
                await _held(self._checks.check_input, method, input, size)
            outcome = await self._dispatch(method, input, channels)
            size = self._check_shape(method, outcome)
            if self._checks is not None:
                await _held(self._checks.check_outcome, method, outcome, size)
        except OperationError as exc:
            raise operation_error(exc.code, f"{self._where}: {exc.message}", exc.details) from exc
        return outcome

    async def aclose(self) -> None:
        """Call the provider's ``close()`` (plain or async) if it has one."""
        close = getattr(self.provider, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result

    @property
    def _where(self) -> str:
        return f"capability slot {self.slot!r} (provider {self.provider_name})"

    def channel_ports(self, method: str) -> dict[str, PortSpec] | None:
        """The method's declared channel ports (``None`` without a contract); raises
        ``INVALID_INPUT`` if the provider takes no channels, before any endpoint moves."""
        if "channels" not in inspect.signature(self.provider.call).parameters:
            raise operation_error(
                "INVALID_INPUT", f"{self._where} takes no channels; no endpoint was moved"
            )
        if self.contract is None:
            return None
        declared = self.contract.methods.get(method)
        ports = declared.get("channels", {}) if isinstance(declared, dict) else {}
        assert isinstance(ports, dict)
        return ports_of(ports)

    async def _dispatch(
        self, method: str, input: JSONValue, channels: Mapping[str, HostEndpoint] | None
    ) -> dict[str, JSONValue]:
        """Await the provider and translate how it ended (see the module docstring)."""
        try:
            if channels:
                value = await self.provider.call(method, input, channels=channels)  # type: ignore[call-arg]
            else:
                value = await self.provider.call(method, input)
        except CapabilityError as exc:
            return {"error": {"name": exc.name, "data": exc.data}}
        except UnknownMethod as exc:
            raise operation_error("UNAVAILABLE", str(exc)) from exc
        except InvalidInput as exc:
            raise operation_error("INVALID_INPUT", f"{method!r}: {exc}") from exc
        except ProviderLost as exc:
            raise operation_error(
                "UNCERTAIN",
                f"the provider was lost during {method!r}; it may or may not have taken "
                f"effect ({exc}); check before retrying with a new operationId",
            ) from exc
        except Exception as exc:
            if isinstance(exc, OperationError) and not exc.is_local:
                raise  # a local classification is never sent: it is reported as a failure
            why = exc.message if isinstance(exc, OperationError) else f"{type(exc).__name__}: {exc}"
            raise operation_error("EXECUTION_FAILED", f"{method!r} failed: {why}") from exc
        return {"value": value}

    @staticmethod
    def _check_shape(method: str, outcome: dict[str, JSONValue]) -> int:
        """Check the value, error name and data (JSON/1, a LocalName); return the size."""
        if "error" in outcome:
            error = outcome["error"]
            assert isinstance(error, dict)
            if not is_local_name(error["name"]):
                raise operation_error(
                    "INVALID_RESULT",
                    f"{method!r} raised CapabilityError with name {error['name']!r}, which is "
                    "not a LocalName (1-64 of a-z, 0-9 and single inner hyphens)",
                )
        try:
            return len(json1.dumps(outcome))
        except json1.JSON1Error as exc:
            part = "error data" if "error" in outcome else "value"
            raise operation_error(
                "INVALID_RESULT", f"{method!r} returned a {part} outside FLOW JSON/1: {exc}"
            ) from None


async def _held(
    check: Callable[[str, JSONValue], None], method: str, value: JSONValue, size: int
) -> None:
    """Run a contract check, in a worker thread for a value over :data:`INLINE_CHECK_BYTES`."""
    if size <= INLINE_CHECK_BYTES:
        check(method, value)
    else:
        await anyio.to_thread.run_sync(check, method, value)
