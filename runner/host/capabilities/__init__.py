"""Host capabilities for ``capability/call``: the provider plugin interface
(:mod:`.provider`), the built-in ``artifacts`` and ``kv`` providers, and the broker's
:class:`CapabilityBinding` of a slot to a provider and its Capability Contract/1::

    provider = load_provider("kv", {"path": "state.sqlite3"})  # entry point -> class
    contract = load_contract(package_dir / "contracts/kv.json")  # from the package's uses
    binding = CapabilityBinding("state", provider, contract, provider_name="kv")
    result = await binding.call("get", {"key": "cursor"})  # {"value": ...} or {"error": ...}
    await binding.aclose()
"""

from runner.contracts.capability import ContractError, ContractIdentity, load_contract

from .binding import CapabilityBinding
from .builtin import builtin_contract
from .provider import (
    ENTRY_POINT_GROUP,
    CapabilityError,
    InvalidInput,
    Provider,
    ProviderConfigError,
    ProviderLost,
    UnknownMethod,
    available_providers,
    load_provider,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "CapabilityBinding",
    "CapabilityError",
    "ContractError",
    "ContractIdentity",
    "InvalidInput",
    "Provider",
    "ProviderConfigError",
    "ProviderLost",
    "UnknownMethod",
    "available_providers",
    "builtin_contract",
    "load_contract",
    "load_provider",
]
