"""The channel hub: every queue of the Run/1 channels extension, owned by the host.

A component holds *endpoints* (opaque tokens) and asks the host to ``channel/send`` or
``channel/next`` through them (PROTOCOL.md §7). One :class:`ChannelHub` serves a run
tree; each invocation sees it through its own :class:`ChannelParty`, the table of tokens
minted for it, so a token copied into data or into another invocation grants nothing.
Rights move only by :meth:`ChannelParty.transfer`, while the host admits a
``flow/run-child`` or ``capability/call`` with a ``channels`` map: all or nothing, to
freshly minted tokens, and never twice (the ledger answers joins and replays).

:class:`ChannelLimits` bounds everything: a full direct queue holds the next send's reply
(back-pressure on one writer, never on the host); a broadcast reader that falls behind
fails alone with ``LAGGED``; lifetime bytes and allocations are capped. It all runs on the
event loop a step at a time, so nothing needs a lock and a transfer, which never awaits,
is atomic. When an invocation ends, :meth:`ChannelParty.conclude` settles what it held.

:mod:`.queues` holds the state, :mod:`.party` the hub and one invocation's view,
:mod:`.endpoint` what the host hands out; port types and matching are
:mod:`runner.contracts.ports`, shared with ``package/``.
"""

from runner.host.channels.endpoint import ChannelOffer, HostEndpoint
from runner.host.channels.party import ChannelHub, ChannelParty
from runner.host.channels.queues import ChannelLimits

__all__ = ["ChannelHub", "ChannelLimits", "ChannelOffer", "ChannelParty", "HostEndpoint"]
