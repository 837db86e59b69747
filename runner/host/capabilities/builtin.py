"""The Capability Contract/1 descriptors shipped with the built-in providers.

They live beside the providers (``contracts/*.json`` in this package) because they are
the providers' own interfaces; parsing them is the contracts layer's business.
"""

from __future__ import annotations

from importlib import resources

from runner.contracts.capability import CapabilityContract, parse_contract


def builtin_contract(name: str) -> CapabilityContract:
    """The descriptor shipped for a built-in provider (``artifacts`` or ``kv``).

    A package that uses a built-in capability carries a copy of this file; the host
    matches the two on :attr:`CapabilityContract.identity`.
    """
    folder = resources.files(__package__) / "contracts"
    shipped = sorted(entry.name.removesuffix(".json") for entry in folder.iterdir())
    if name not in shipped:
        raise ValueError(f"no built-in contract {name!r}; shipped: {', '.join(shipped)}")
    return parse_contract(
        (folder / f"{name}.json").read_bytes(), source=f"built-in contract {name}"
    )
