"""The Capability Contract/1 descriptors of the built-in providers, kept beside them
(``contracts/*.json``) because they are the providers' own interfaces."""

from __future__ import annotations

from importlib import resources

from runner.contracts.capability import CapabilityContract, parse_contract


def builtin_contract(name: str) -> CapabilityContract:
    """The descriptor shipped for a built-in provider (``artifacts`` or ``kv``), which a
    package using it carries a copy of; the host matches the two on their identity."""
    folder = resources.files(__package__) / "contracts"
    shipped = sorted(entry.name.removesuffix(".json") for entry in folder.iterdir())
    if name not in shipped:
        raise ValueError(f"no built-in contract {name!r}; shipped: {', '.join(shipped)}")
    return parse_contract(
        (folder / f"{name}.json").read_bytes(), source=f"built-in contract {name}"
    )
