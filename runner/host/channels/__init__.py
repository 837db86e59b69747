"""The channel hub: every queue of the Run/1 channels extension, owned by the host.

A component never talks to another component; it holds *endpoints* (opaque tokens) and
asks the host to ``channel/send`` or ``channel/next`` through them (PROTOCOL.md §7). All
invocations of one run tree share a :class:`ChannelHub`; each invocation sees it through
its own :class:`ChannelParty`, the table of tokens minted *for that invocation*. A token
is looked up only in its holder's table, so a string copied into ordinary data, or into
another invocation, grants nothing.

Rights move only by :meth:`ChannelParty.transfer`, which the host calls while admitting a
``flow/run-child`` or ``capability/call`` with a ``channels`` map: it checks every mapped
right and the callee's declared ports first and moves nothing unless all pass; the callee
gets freshly minted tokens. Operation joins and replays never reach it (the ledger
answers them), so a right never moves twice.

Everything is bounded by :class:`ChannelLimits`: a direct queue full of unread items holds
the next ``channel/send`` reply until the reader frees room (back-pressure on one writer,
never on the host); a broadcast reader that falls behind fails alone with a sticky
``LAGGED``; a source's lifetime bytes and an invocation's allocations are capped
(``RESOURCE_EXHAUSTED``). All of it runs on the host's event loop, one step at a time,
so no step needs a lock: a transfer is atomic because it never awaits.

When an invocation ends, :meth:`ChannelParty.conclude` settles what it held (§7.6): held
writers are sealed if the invocation succeeded and aborted if it did not, held receivers
are disposed, and the sources it created die with it.

The package is split by job: :mod:`.queues` holds the state (sources, rights, waiting
sends) and :class:`ChannelLimits`, :mod:`.party` the hub and one invocation's view of it
with the transfer of rights, :mod:`.endpoint` what the host hands out (an admission's
:class:`ChannelOffer`, a provider's :class:`HostEndpoint`). The port types and the
matching rule are :mod:`runner.contracts.ports`, shared with ``package/``.
"""

from runner.host.channels.endpoint import ChannelOffer, HostEndpoint
from runner.host.channels.party import ChannelHub, ChannelParty
from runner.host.channels.queues import ChannelLimits

__all__ = ["ChannelHub", "ChannelLimits", "ChannelOffer", "ChannelParty", "HostEndpoint"]
