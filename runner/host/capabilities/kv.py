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
import threading
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Final

import anyio.to_thread

from runner import json1
from runner.json1 import JSONValue

from .provider import (
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

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS entries (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID
"""
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
        reader = OptionReader("kv", options, {"path", "namespace"})
        self.path = Path(reader.string("path") or default_path()).expanduser()
        self.namespace = reader.string("namespace") or "default"
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=10, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise self._unusable(exc) from exc
        try:
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute(_SCHEMA)
        except sqlite3.Error as exc:
            self._db.close()
            raise self._unusable(exc) from exc

    async def call(self, method: str, input: JSONValue) -> JSONValue:
        """Dispatch ``method``; the SQLite work runs in a worker thread."""
        work: Callable[[], JSONValue]
        if method in ("get", "delete"):
            key = _key(input_object(input, required={"key"}))
            work = partial(self._get if method == "get" else self._delete, key)
        elif method == "put":
            fields = input_object(input, required={"key", "value"})
            work = partial(self._put, _key(fields), json1.canonical(fields["value"]).decode())
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

    def _put(self, key: str, text: str) -> JSONValue:
        with self._lock:
            # fetchall: the statement, and with it the implicit transaction, must finish
            ((version,),) = self._db.execute(_PUT, (self.namespace, key, text)).fetchall()
        return {"version": version}

    def _delete(self, key: str) -> JSONValue:
        with self._lock:
            cursor = self._db.execute(
                "DELETE FROM entries WHERE namespace = ? AND key = ?", (self.namespace, key)
            )
        return {"deleted": cursor.rowcount > 0}

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
