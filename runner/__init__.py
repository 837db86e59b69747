"""flow-runner: a FLOW Run/1 host that runs every invocation in its own container."""

__version__ = "0.1.0"
