"""Which environment variables an import reads: the values a warm runner has baked in.

A module that reads the environment while it is imported keeps what it read (pydantic
its plugin switch, zoneinfo its search path, sysconfig and site the user's base). A
client whose environment says otherwise would have imported the module differently, so
the server records every variable its imports read, with its value then, and the handler
refuses a client whose environment disagrees on any of them. An import that walks the
whole environment makes every variable count, and the absence of any other.

Only reads through ``os.environ`` (and so ``os.getenv``) are seen, not ``getenv(3)`` in C.
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
        for name, value in self.values.items():
            if env.get(name) != value:
                return name
        if self.whole:
            extra = sorted(env.keys() - self.values.keys())
            if extra:
                return extra[0]
        return None


class _Watched(os._Environ[str]):
    """``os.environ`` itself (the same data, so writes reach the real environment too),
    noting what is read."""

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
    watched = _Watched(
        real._data,  # type: ignore[attr-defined]
        real.encodekey,
        real.decodekey,
        real.encodevalue,
        real.decodevalue,
    )
    watched.reads = Reads()
    os.environ = watched  # noqa: B003 (the same environment, watched)
    try:
        yield watched.reads
    finally:
        os.environ = real  # noqa: B003
