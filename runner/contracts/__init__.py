"""What FLOW packages and the host must agree on, with no I/O: Schema/1 (``schema1``),
Capability and Channel Contract/1 (``capability``, ``channel``), and channel port
matching (``ports``). This ``__init__`` imports nothing, so importing one module does
not load the others.
"""
