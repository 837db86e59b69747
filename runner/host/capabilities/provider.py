"""The capability provider plugin interface, and finding providers by name.

A provider is a class registered under the entry-point group ``flow_runner.capabilities``,
so that a new capability needs a package, not a change to flow-runner::

    [project.entry-points."flow_runner.capabilities"]
    tickets = "acme_tickets:TicketsProvider"

The host constructs it once per binding with its ``options`` and awaits
:meth:`Provider.call` for each ``capability/call``; how a call ends decides what the
component sees:

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

A provider may define ``close()`` (plain or ``async``), called once when the binding is
discarded. ``call`` runs on the event loop: blocking work belongs in a worker thread.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial
from importlib.metadata import EntryPoint, entry_points
from typing import Final, Protocol

import anyio.to_thread

from runner import json1
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError

ENTRY_POINT_GROUP = "flow_runner.capabilities"


class Provider(Protocol):
    """What the host needs of a provider instance."""

    async def call(self, method: str, input: JSONValue) -> JSONValue:
        """Perform ``method`` with ``input`` (a JSON/1 value); return a JSON/1 value."""


class CapabilityError(Exception):
    """A declared application error, the call's answer: ``name`` is a LocalName and
    ``data`` JSON/1; with a contract, the method declares the name and its data schema."""

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


class InvalidInput(Exception):
    """The input is not one the method accepts (``INVALID_INPUT``): for checks a schema
    cannot express, or a binding without a contract. The message says what to fix."""


class ProviderLost(Exception):
    """The provider was lost mid-call with the effect unknown (``UNCERTAIN``): raise it
    only when the request may have been carried out (a connection dropped after sending)."""


class ProviderConfigError(ValueError):
    """A provider cannot be set up; the message names the provider, the option and the fix."""


def available_providers() -> list[str]:
    """The names registered under :data:`ENTRY_POINT_GROUP`, sorted."""
    return sorted({entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)})


def load_provider(name: str, options: Mapping[str, JSONValue]) -> Provider:
    """Construct the provider registered as ``name`` with ``options``; raises
    :class:`ProviderConfigError` for an unknown or ambiguous name, a plugin that cannot be
    imported, options outside JSON/1, or a failure of the provider's own option checks."""
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
        factory: Callable[[dict[str, JSONValue]], Provider] = found[0].load()
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
            raise self.error(name, f'is {shown}; set it, e.g. options = {{ {name} = "..." }}')
        return value

    def integer(self, name: str, *, default: int, low: int, high: int) -> int:
        """An integer option from ``low`` to ``high``; ``default`` when absent."""
        value = _integer(self.options.get(name, default), low, high)
        if value is None:
            raise self.error(
                name,
                f"is {self.options[name]!r}, not an integer from {low:,} to {high:,}; "
                f"set it, e.g. options = {{ {name} = {default} }}",
            )
        return value

    def budget(self, name: str, default: int, unit: str, fix: str, *, high: int = 2**53) -> Budget:
        """The budget option ``name``: 0 to ``high`` of ``unit``, ``default`` when absent."""
        limit = self.integer(name, default=default, low=0, high=high)
        return Budget(self.provider, name, limit, unit, fix)

    def error(self, name: str, problem: str) -> ProviderConfigError:
        """The error for option ``name``: ``problem`` says what is wrong and the fix."""
        return ProviderConfigError(
            f"capability provider {self.provider!r}: option {name!r} {problem}"
        )


@dataclass(frozen=True, slots=True)
class Budget:
    """At most ``limit`` of ``unit`` (``option``); ``fix``: what else a refused caller can do."""

    provider: str
    option: str
    limit: int
    unit: str
    fix: str

    def check(self, used: int | None, wanted: int) -> None:
        """Refuse ``wanted`` more on top of ``used`` (``None``: a one-item budget) past the
        limit (``RESOURCE_EXHAUSTED``); wanting nothing more passes, even over the limit."""
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


class Usage:
    """A store's entries and bytes against their budgets, counted from what it held at start."""

    def __init__(self, entries: Budget, size: Budget) -> None:
        self.entries, self.size = entries, size
        self.count = self.bytes = 0

    def check(self, grown: int, added: int) -> None:
        """Refuse a change adding ``added`` entries and ``grown`` bytes past a budget."""
        self.entries.check(self.count, added)
        self.size.check(self.bytes, grown)

    def add(self, grown: int, added: int) -> None:
        self.bytes += grown
        self.count += added


class BlockingProvider(ABC):
    """A provider whose work blocks (files, SQLite): :meth:`call` checks the input on the
    event loop and does the work in a worker thread, so the loop keeps serving."""

    methods: tuple[str, ...]
    """Its methods; ``list`` takes ``{prefix?, limit?}`` and is :meth:`list_`."""

    async def call(self, method: str, input: JSONValue) -> JSONValue:
        work: Callable[[], JSONValue]
        if method == "list":
            work = partial(self.list_, *list_request(input))
        elif method in self.methods:
            work = self.prepare(method, input)
        else:
            raise UnknownMethod(method, self.methods)
        return await anyio.to_thread.run_sync(work)

    @abstractmethod
    def prepare(self, method: str, input: JSONValue) -> Callable[[], JSONValue]:
        """The work of ``method`` (not ``list``) once its input is checked."""

    @abstractmethod
    def list_(self, prefix: str, limit: int) -> JSONValue:
        """What the store holds under ``prefix``, sorted, at most ``limit``."""


def input_object(
    input: JSONValue, *, required: Collection[str] = (), optional: Collection[str] = ()
) -> dict[str, JSONValue]:
    """The input as an object with exactly the known members, or :class:`InvalidInput`
    (a contract's schema usually refuses it first; this holds for a binding without one)."""
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


def _integer(value: JSONValue, low: int, high: int) -> int | None:
    """``value`` as an integer from ``low`` to ``high`` (``2.0`` is 2 in JSON/1), or ``None``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


DEFAULT_LIST_LIMIT: Final = 1_000
MAX_LIST_LIMIT: Final = 10_000


def list_request(input: JSONValue) -> tuple[str, int]:
    """``{prefix?, limit?}`` of a ``list`` method: the prefix and a bounded limit."""
    fields = input_object(input, optional={"prefix", "limit"})
    limit = _integer(fields.get("limit", DEFAULT_LIST_LIMIT), 1, MAX_LIST_LIMIT)
    if limit is None:
        raise InvalidInput(f"member 'limit' must be an integer from 1 to {MAX_LIST_LIMIT:,}")
    return string_member(fields, "prefix", ""), limit
