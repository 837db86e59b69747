"""The ``kv`` capability: a durable key/value store on SQLite.

For state a flow keeps between runs (a cursor, a cache, what it has already sent). Values
are any JSON/1 value, stored as their RFC 8785 canonical text, so equal values are stored
identically. The database is in WAL mode with ``synchronous=FULL``: a ``put`` that
returned survives a crash of the host, and readers in other processes never block it.

Options:

* ``path``: the database file. Default: ``$XDG_STATE_HOME/flow-runner/kv.sqlite3``,
  else ``~/.local/state/flow-runner/kv.sqlite3`` (the XDG place for state that outlives
  a run but is not a user document). A relative path is taken from the working
  directory; the host configuration resolves it against the configuration file's
  directory before it gets here. Missing directories are created.
* ``namespace``: keeps bindings that share one file apart (default ``default``).
* ``max_bytes`` (default 64 MiB): the UTF-8 bytes of the namespace's keys and values;
* ``max_keys`` (default 100,000): its keys;
* ``max_value_bytes`` (default 1 MiB, at most 16 MiB, a Run/1 frame): one value's
  canonical text. kv is for state; bigger data belongs in artifacts, and the cap keeps
  what one call holds in host memory to a few copies of a megabyte.

A ``put`` past a budget is ``RESOURCE_EXHAUSTED``, naming the option that raises it.
Budgets count what the namespace holds when the provider starts (a file reused across
runs) and then this provider's own puts and deletes; each put reads the old value's
size in the same transaction as it writes, so concurrent calls count exactly.

Where the database may live. SQLite opens the database, and its ``-wal``, ``-shm`` and
``-journal`` files beside it, by name, again and again: a descriptor cannot be handed
to it. Whoever can write a directory on that path (a component, through an ``rw``
attachment) could swap a name for a symbolic link and have the host write, as its own
user, where they choose. So the directory is reached by :func:`.paths.open_directory`
and refused unless nobody but root and the host's user can change a name on the way or
add one to the directory itself (for ``/tmp``-like sticky directories on the way, the
entry must be the host's), and a database file that is a symbolic link is refused; the
fix is ``chmod go-w`` or a path outside every ``rw`` attachment. There is no option
to waive this: a private directory serves every legitimate setup. SQLite then opens
the real path the walk found, which nobody else can change.

Methods (contract ``runner/host/capabilities/contracts/kv.json``): ``get {key}`` ->
``{value}`` or the declared error ``not-found``; ``put {key, value}`` -> ``{version}``
(1 for a new key, one more on each overwrite); ``delete {key}`` -> ``{deleted}``;
``list {prefix?, limit?}`` -> ``{keys, truncated}``, sorted by code point. Keys are
1–1,024 UTF-8 bytes without NUL.

sqlite3 objects belong to the thread that made them unless opened with
``check_same_thread=False``; calls run in worker threads, so the one connection is
opened that way and every use of it holds a lock.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Final

import anyio.to_thread

from runner import json1
from runner.json1 import JSONValue

from .paths import PathRefused, open_directory
from .provider import (
    Budget,
    CapabilityError,
    InvalidInput,
    OptionReader,
    ProviderConfigError,
    UnknownMethod,
    input_object,
    list_request,
    string_member,
)

MAX_KEY_BYTES: Final = 1_024
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
DEFAULT_MAX_KEYS: Final = 100_000
DEFAULT_MAX_VALUE_BYTES: Final = 1024 * 1024
MAX_VALUE_BYTES: Final = 16 * 1024 * 1024
"""A Run/1 frame's bound: no larger value can arrive."""

_OPTIONS: Final = ("path", "namespace", "max_bytes", "max_keys", "max_value_bytes")
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS entries (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID
"""
_SIZE: Final = "length(CAST(key AS BLOB)) + length(CAST(value AS BLOB))"
"""An entry's UTF-8 bytes (``length`` of TEXT counts characters)."""
_PUT: Final = """
INSERT INTO entries (namespace, key, value, version) VALUES (?, ?, ?, 1)
ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, version = version + 1
RETURNING version
"""


def default_path() -> Path:
    """Where the store lives when the binding names no ``path``."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "flow-runner" / "kv.sqlite3"


class KeyValueProvider:
    """A namespace of one SQLite key/value file."""

    methods: Final = ("get", "put", "delete", "list")

    def __init__(self, options: Mapping[str, JSONValue]) -> None:
        reader = OptionReader("kv", options, _OPTIONS)
        self.path = Path(reader.string("path") or default_path()).expanduser()
        self.namespace = reader.string("namespace") or "default"
        self.max_bytes = reader.integer("max_bytes", default=DEFAULT_MAX_BYTES, low=0, high=2**53)
        self.max_keys = reader.integer("max_keys", default=DEFAULT_MAX_KEYS, low=0, high=2**53)
        self.max_value_bytes = reader.integer(
            "max_value_bytes", default=DEFAULT_MAX_VALUE_BYTES, low=0, high=MAX_VALUE_BYTES
        )
        self._keys_budget = Budget(
            "kv", "max_keys", self.max_keys, "keys", "delete keys you no longer need"
        )
        self._bytes_budget = Budget(
            "kv", "max_bytes", self.max_bytes, "bytes of keys and values",
            "delete keys, or store smaller values",
        )  # fmt: skip
        self._value_budget = Budget(
            "kv", "max_value_bytes", self.max_value_bytes, "bytes of canonical JSON",
            "store a smaller value",
        )  # fmt: skip
        self._lock = threading.Lock()
        self.path = self._private_path()
        try:
            self._db = sqlite3.connect(
                self.path, timeout=10, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise self._unusable(exc) from exc
        try:
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute(_SCHEMA)
            keys, size = self._db.execute(
                f"SELECT count(*), total({_SIZE}) FROM entries WHERE namespace = ?",
                (self.namespace,),
            ).fetchone()
        except sqlite3.Error as exc:
            self._db.close()
            raise self._unusable(exc) from exc
        self._keys, self._bytes = keys, int(size)

    def _private_path(self) -> Path:
        """The database's real path, in a directory only the host can change (see the
        module docstring), or :class:`ProviderConfigError`."""
        name = self.path.name
        if name in ("", ".", ".."):
            raise self._unusable(ValueError("it names a directory, not a file"))
        try:
            directory = open_directory(str(self.path.parent), create=True)
        except (OSError, PathRefused) as exc:
            raise self._unusable(exc) from None
        try:
            if directory.exposed is not None:
                raise ProviderConfigError(
                    f"capability provider 'kv': option 'path' = {str(self.path)!r} is refused: "
                    f"{directory.exposed}, so someone else could swap the database or its "
                    "-wal file for a link and have the host write there; make the directory "
                    "private (chmod go-w), or keep the database outside every rw attachment"
                )
            try:
                entry = os.stat(name, dir_fd=directory.descriptor, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISLNK(entry.st_mode):
                    raise self._unusable(ValueError("it is a symbolic link; name the file itself"))
        finally:
            os.close(directory.descriptor)
        return Path(directory.path) / name

    async def call(self, method: str, input: JSONValue) -> JSONValue:
        """Dispatch ``method``; the SQLite work runs in a worker thread."""
        work: Callable[[], JSONValue]
        if method in ("get", "delete"):
            key = _key(input_object(input, required={"key"}))
            work = partial(self._get if method == "get" else self._delete, key)
        elif method == "put":
            fields = input_object(input, required={"key", "value"})
            key, value = _key(fields), json1.canonical(fields["value"])
            self._value_budget.check(None, len(value))
            work = partial(self._put, key, value.decode(), len(key.encode()) + len(value))
        elif method == "list":
            work = partial(self._list, *list_request(input))
        else:
            raise UnknownMethod(method, self.methods)
        return await anyio.to_thread.run_sync(work)

    def close(self) -> None:
        """Close the database (after any call in progress)."""
        with self._lock:
            self._db.close()

    def _get(self, key: str) -> JSONValue:
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM entries WHERE namespace = ? AND key = ?", (self.namespace, key)
            ).fetchone()
        if row is None:
            raise CapabilityError("not-found", {"key": key})
        return {"value": json1.loads(row[0].encode())}

    def _put(self, key: str, text: str, size: int) -> JSONValue:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                old = self._db.execute(
                    f"SELECT {_SIZE} FROM entries WHERE namespace = ? AND key = ?",
                    (self.namespace, key),
                ).fetchone()
                freed = 0 if old is None else old[0]
                self._check(size - freed, 0 if old else 1)
                # fetchall: the statement must finish before the transaction can
                ((version,),) = self._db.execute(_PUT, (self.namespace, key, text)).fetchall()
                self._db.execute("COMMIT")
            finally:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
            self._bytes += size - freed
            self._keys += 0 if old else 1
        return {"version": version}

    def _check(self, grown: int, added: int) -> None:
        """Refuse a put that adds ``added`` keys and ``grown`` bytes past a budget."""
        self._keys_budget.check(self._keys, added)
        self._bytes_budget.check(self._bytes, grown)

    def _delete(self, key: str) -> JSONValue:
        with self._lock:
            removed = self._db.execute(
                f"DELETE FROM entries WHERE namespace = ? AND key = ? RETURNING {_SIZE}",
                (self.namespace, key),
            ).fetchall()
            for (size,) in removed:
                self._bytes -= size
                self._keys -= 1
        return {"deleted": bool(removed)}

    def _list(self, prefix: str, limit: int) -> JSONValue:
        keys: list[JSONValue] = []
        with self._lock:
            rows = self._db.execute(
                "SELECT key FROM entries WHERE namespace = ? AND key >= ? ORDER BY key",
                (self.namespace, prefix),
            )
            for (key,) in rows:  # keys sort by UTF-8 bytes: the prefixed ones come first
                if not key.startswith(prefix) or len(keys) > limit:
                    break
                keys.append(key)
            rows.close()
        return {"keys": keys[:limit], "truncated": len(keys) > limit}

    def _unusable(self, exc: Exception) -> ProviderConfigError:
        return ProviderConfigError(
            f"capability provider 'kv': option 'path' = {str(self.path)!r} cannot be used as "
            f"a SQLite database ({exc}); point it at a writable file of its own"
        )


def _key(fields: Mapping[str, JSONValue]) -> str:
    key = string_member(fields, "key")
    if not 1 <= len(key.encode()) <= MAX_KEY_BYTES or "\0" in key:
        raise InvalidInput(f"member 'key' must be 1 to {MAX_KEY_BYTES:,} UTF-8 bytes without NUL")
    return key
