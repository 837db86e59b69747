"""The contracts layer: what FLOW packages and the host must agree on, with no I/O state.

``schema1`` is the Schema/1 dialect (compile, and the metered evaluator), ``capability``
and ``channel`` parse Capability Contract/1 and Channel Contract/1 descriptors and
compute their digests, and ``ports`` matches channel ports and sources by item schema
and contract identity. ``package/`` and ``host/`` both import it; it imports only
``json1`` and ``protocol`` (see ``tests/test_layers.py``). This ``__init__`` imports
nothing, so that importing one of them does not load the others.
"""
