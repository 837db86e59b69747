"""Which environment variables an import reads: the values a warm runner has baked in.

A module may keep what it read while imported (pydantic its plugin switch, zoneinfo its
search path, site the user's base), so the server records every variable its imports read
and the handler refuses a client whose environment disagrees on one. An import that walks
the whole environment makes every variable count. Only reads through ``os.environ`` (and
``os.getenv``) are seen, not ``getenv(3)`` in C.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Reads:
    """Variables read, with the values they had (None: unset); ``whole``: all of them."""

    values: dict[str, str | None] = field(default_factory=dict)
    whole: bool = False

    def differs(self, env: Mapping[str, str]) -> str | None:
        """The first variable ``env`` holds otherwise, or None."""
        found = next((name for name, value in self.values.items() if env.get(name) != value), None)
        if found is None and self.whole:
            found = min(env.keys() - self.values.keys(), default=None)
        return found


class _Watched(os._Environ[str]):
    """``os.environ`` itself (writes reach the real environment), noting what is read."""

    reads: Reads

    def __getitem__(self, key: str) -> str:
        try:
            value = super().__getitem__(key)
        except KeyError:
            self.reads.values.setdefault(key, None)
            raise
        self.reads.values.setdefault(key, value)
        return value

    def __iter__(self) -> Iterator[str]:
        if not self.reads.whole:
            self.reads.whole = True
            for name, value in self._data.items():  # type: ignore[attr-defined]
                self.reads.values.setdefault(self.decodekey(name), self.decodevalue(value))
        return super().__iter__()


@contextmanager
def watching() -> Iterator[Reads]:
    """``os.environ`` watched for the duration; the reads, once it is over."""
    real = os.environ
    data = real._data  # type: ignore[attr-defined]
    watched = _Watched(data, real.encodekey, real.decodekey, real.encodevalue, real.decodevalue)
    watched.reads = Reads()
    os.environ = watched  # noqa: B003 (the same environment, watched)
    try:
        yield watched.reads
    finally:
        os.environ = real  # noqa: B003
