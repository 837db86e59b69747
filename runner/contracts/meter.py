"""Schema/1's work meter, as callers that must not be held long see it.

A validator's ``first_error`` given fewer work units than Schema/1's 1,000,000 raises
:class:`Unfinished` once it has spent them: an event loop tries a slice of the work and,
failing that, has the whole evaluation done in a worker thread. Kept apart from
:mod:`runner.contracts.schema1` so that a caller can catch it without loading Schema/1.
"""


class Unfinished(Exception):
    """An evaluation spent the work units it was given, fewer than Schema/1's limit, and
    stopped without a verdict."""
