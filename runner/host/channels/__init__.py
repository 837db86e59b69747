"""The channel hub: every queue of the Run/1 channels extension, owned by the host.

A component holds *endpoints* (opaque tokens) and asks the host to ``channel/send`` or
``channel/next`` through them (PROTOCOL.md §7). One :class:`ChannelHub` serves a run
tree; each invocation has its own :class:`ChannelParty`, the table of tokens minted for
it, so a token copied elsewhere grants nothing. Rights move only by
:meth:`ChannelParty.transfer`, all or nothing. :class:`ChannelLimits` bounds everything:
a full direct queue holds back the next send's reply (back-pressure on one writer, never
on the host), a broadcast reader that falls behind fails alone with ``LAGGED``. All of it
runs on the event loop a step at a time, so nothing needs a lock.
"""

from runner.host.channels.endpoint import ChannelOffer, HostEndpoint
from runner.host.channels.party import ChannelHub, ChannelParty
from runner.host.channels.queues import ChannelLimits

__all__ = ["ChannelHub", "ChannelLimits", "ChannelOffer", "ChannelParty", "HostEndpoint"]
