"""The capability provider plugin interface, and finding providers by name.

A provider is a class registered under the entry-point group ``flow_runner.capabilities``
(name -> class) by any installed distribution, so that adding a capability needs a
package, not a change to flow-runner::

    [project.entry-points."flow_runner.capabilities"]
    tickets = "acme_tickets:TicketsProvider"

The host constructs it once per configured binding with that binding's ``options`` and
then awaits :meth:`Provider.call` for each ``capability/call``. How a call ends decides
what the component sees:

=================================  ===============================================
``call`` ...                       the component receives
=================================  ===============================================
returns a value                    ``{"value": value}``
raises :class:`CapabilityError`    ``{"error": {"name": ..., "data": ...}}``
raises :class:`UnknownMethod`      ``UNAVAILABLE``
raises :class:`InvalidInput`       ``INVALID_INPUT``
raises :class:`ProviderLost`       ``UNCERTAIN`` (the effect may or may not have happened)
raises ``OperationError``          that wire code (e.g. ``PERMISSION_DENIED``)
raises anything else               ``EXECUTION_FAILED``
=================================  ===============================================

A provider may define ``close()`` (plain or ``async``); the host calls it once when the
binding is discarded. Blocking work belongs in a worker thread
(``anyio.to_thread.run_sync``): ``call`` runs on the host's event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Final, Protocol

from runner import json1
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError

ENTRY_POINT_GROUP = "flow_runner.capabilities"


class Provider(Protocol):
    """What the host needs of a provider instance."""

    async def call(self, method: str, input: JSONValue) -> JSONValue:
        """Perform ``method`` with ``input`` (a JSON/1 value); return a JSON/1 value."""
        ...


ProviderFactory = Callable[[dict[str, JSONValue]], Provider]
"""A provider class (or any callable) taking the binding's options."""


class CapabilityError(Exception):
    """A declared application error: the call completed and its answer is this error.

    ``name`` is a LocalName and ``data`` a JSON/1 value; with a contract, the name must be
    one the method declares and the data must satisfy its schema.
    """

    def __init__(self, name: str, data: JSONValue = None) -> None:
        super().__init__(name, data)
        self.name = name
        self.data = data

    def __str__(self) -> str:
        return f"{self.name}: {self.data!r}"


class UnknownMethod(Exception):
    """The provider has no such method (``UNAVAILABLE``)."""

    def __init__(self, method: str, known: Collection[str]) -> None:
        super().__init__(f"no method {method!r} (methods: {', '.join(sorted(known))})")
        self.method = method
        self.known = known


class InvalidInput(Exception):
    """The input is not one the method accepts (``INVALID_INPUT``).

    For checks a contract's schema cannot express (valid base64, a key's byte length),
    or for a binding configured without a contract. The message says what to fix.
    """


class ProviderLost(Exception):
    """The provider was lost mid-call: the effect is unknown (``UNCERTAIN``).

    Raise it only when the request may have been carried out, e.g. a remote service's
    connection dropped after sending; the component must not assume either outcome.
    """


class ProviderConfigError(ValueError):
    """A provider cannot be set up; the message names the provider, the option and the fix."""


def available_providers() -> list[str]:
    """The names registered under :data:`ENTRY_POINT_GROUP`, sorted."""
    return sorted({entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)})


def load_provider(name: str, options: Mapping[str, JSONValue]) -> Provider:
    """Construct the provider registered as ``name`` with ``options``.

    Raises :class:`ProviderConfigError` for an unknown or ambiguous name (listing the
    installed ones), a plugin that cannot be imported, options outside JSON/1, and any
    failure of the provider's own option checks.
    """
    found: list[EntryPoint] = list(entry_points(group=ENTRY_POINT_GROUP, name=name))
    if not found:
        installed = ", ".join(available_providers()) or "none"
        raise ProviderConfigError(
            f"no capability provider named {name!r} (installed: {installed}); fix the "
            f"provider name, or install the package that registers it under the "
            f"{ENTRY_POINT_GROUP!r} entry-point group"
        )
    if len({entry.value for entry in found}) > 1:
        targets = ", ".join(sorted(entry.value for entry in found))
        raise ProviderConfigError(
            f"capability provider name {name!r} is registered more than once ({targets}); "
            "uninstall one of the packages"
        )
    try:
        factory: ProviderFactory = found[0].load()
    except Exception as exc:
        raise ProviderConfigError(
            f"capability provider {name!r} ({found[0].value}) cannot be imported: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    try:
        json1.dumps(dict(options))
    except json1.JSON1Error as exc:
        raise ProviderConfigError(
            f"options of capability provider {name!r} must be JSON values (no dates): {exc}"
        ) from None
    try:
        return factory(dict(options))
    except ProviderConfigError:
        raise
    except Exception as exc:
        raise ProviderConfigError(
            f"capability provider {name!r} failed to start: {type(exc).__name__}: {exc}"
        ) from exc


class OptionReader:
    """Reads a provider's options, refusing unknown ones, with errors that say the fix."""

    def __init__(self, provider: str, options: Mapping[str, JSONValue], known: Collection[str]):
        self.provider = provider
        self.options = options
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ProviderConfigError(
                f"capability provider {provider!r}: unknown option {unknown[0]!r} "
                f"(options: {', '.join(sorted(known))}); check its spelling"
            )

    def string(self, name: str, *, required: bool = False) -> str | None:
        """A nonempty string option, or ``None`` when it is absent and not required."""
        value = self.options.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value or "\0" in value:
            shown = "missing" if value is None else f"{value!r}, not a nonempty string"
            raise ProviderConfigError(
                f"capability provider {self.provider!r}: option {name!r} is {shown}; "
                f'set it, e.g. options = {{ {name} = "..." }}'
            )
        return value

    def integer(self, name: str, *, default: int, low: int, high: int) -> int:
        """An integer option from ``low`` to ``high``; ``default`` when absent."""
        value = self.options.get(name, default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ProviderConfigError(
                f"capability provider {self.provider!r}: option {name!r} is {value!r}, not an "
                f"integer from {low:,} to {high:,}; set it, e.g. options = {{ {name} = {default} }}"
            )
        return value


@dataclass(frozen=True, slots=True)
class Budget:
    """A provider's budget option: at most ``limit`` of ``unit`` (``option`` names it in the
    binding's ``options``); ``fix`` is what a refused caller can do besides raising it."""

    provider: str
    option: str
    limit: int
    unit: str
    fix: str

    def check(self, used: int | None, wanted: int) -> None:
        """Refuse a call wanting ``wanted`` more where ``used`` are in use (``None``: a
        budget of one item) past the limit: ``RESOURCE_EXHAUSTED`` saying what is in use,
        what the call wanted and the option, ``details`` the same for programs. A call
        that wants nothing more passes, even in a store found over its budget."""
        if wanted <= 0 or (used or 0) + wanted <= self.limit:
            return
        needs = (
            f"this call needs {wanted:,}"
            if used is None
            else f"{used:,} in use, this call needs {wanted:,} more"
        )
        raise OperationError(
            "RESOURCE_EXHAUSTED",
            f"{self.provider}: the budget {self.option} = {self.limit:,} {self.unit} would be "
            f"exceeded ({needs}); {self.fix}, or raise the option {self.option!r}",
            {"budget": self.option, "limit": self.limit, "used": used, "wanted": wanted},
        )


def input_object(
    input: JSONValue, *, required: Collection[str] = (), optional: Collection[str] = ()
) -> dict[str, JSONValue]:
    """The input as an object with exactly the known members, or :class:`InvalidInput`.

    A contract's schema usually refuses bad input before a provider sees it; this keeps a
    provider safe when it is bound without one.
    """
    known = sorted({*required, *optional})
    if not isinstance(input, dict):
        raise InvalidInput(f"the input is an object with members {', '.join(known)}")
    for name in input:
        if name not in known:
            raise InvalidInput(f"unknown member {name!r} (members: {', '.join(known)})")
    for name in required:
        if name not in input:
            raise InvalidInput(f"member {name!r} is required")
    return input


def string_member(fields: Mapping[str, JSONValue], name: str, default: str | None = None) -> str:
    """A string member; ``default`` when absent (if given)."""
    value = fields.get(name, default)
    if not isinstance(value, str):
        raise InvalidInput(f"member {name!r} must be a string")
    return value


def integer_member(
    fields: Mapping[str, JSONValue], name: str, *, default: int, low: int, high: int
) -> int:
    """An integer member from ``low`` to ``high`` (``2.0`` is the integer 2 in JSON/1)."""
    value = fields.get(name, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"member {name!r} must be an integer from {low:,} to {high:,}")
    return value


DEFAULT_LIST_LIMIT: Final = 1_000
MAX_LIST_LIMIT: Final = 10_000


def list_request(input: JSONValue) -> tuple[str, int]:
    """``{prefix?, limit?}`` of a ``list`` method: the prefix and a bounded limit."""
    fields = input_object(input, optional={"prefix", "limit"})
    prefix = string_member(fields, "prefix", "")
    limit = integer_member(fields, "limit", default=DEFAULT_LIST_LIMIT, low=1, high=MAX_LIST_LIMIT)
    return prefix, limit
