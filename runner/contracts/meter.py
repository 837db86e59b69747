"""Schema/1's work meter as a caller that must not be held long sees it (an event loop
tries a slice, then evaluates in a worker thread); apart from ``schema1`` so it can be
caught without loading Schema/1.
"""


class Unfinished(Exception):
    """An evaluation spent the work units it was given, fewer than Schema/1's limit, and
    stopped without a verdict."""
