"""The ``kv`` capability: a durable key/value store on SQLite, for state a flow keeps
between runs (contract ``contracts/kv.json``). Keys are 1–1,024 UTF-8 bytes without NUL;
values are JSON/1, stored as canonical text. WAL mode with ``synchronous=FULL``: a
``put`` that returned survives a crash of the host, and readers never block it.

Options: ``path`` (default ``$XDG_STATE_HOME/flow-runner/kv.sqlite3``, else under
``~/.local/state``), ``namespace`` (bindings sharing a file stay apart), and budgets past
which a ``put`` is ``RESOURCE_EXHAUSTED``: ``max_bytes`` (64 MiB of keys and values),
``max_keys`` (100,000) and ``max_value_bytes`` (1 MiB; bigger data belongs in artifacts).
A put reads the old value's size in the transaction that writes, so concurrent calls
count exactly.

SQLite opens the database and its ``-wal``, ``-shm`` and ``-journal`` files by name, again
and again, so a component that can write a directory on the way (an ``rw`` attachment)
could swap a name for a link and have the host write where it chooses: such a directory
(:func:`.paths.open_directory`), or a database that is a link, is refused, and no option
waives it (``chmod go-w`` or another path is the fix).
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

from runner import json1
from runner.json1 import JSONValue

from .paths import PathRefused, entry_at, open_directory
from .provider import (
    BlockingProvider,
    CapabilityError,
    InvalidInput,
    OptionReader,
    ProviderConfigError,
    Usage,
    input_object,
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


class KeyValueProvider(BlockingProvider):
    """A namespace of one SQLite key/value file."""

    methods = ("get", "put", "delete", "list")

    def __init__(self, options: Mapping[str, JSONValue]) -> None:
        reader = OptionReader("kv", options, _OPTIONS)
        self.path = Path(reader.string("path") or default_path()).expanduser()
        self.namespace = reader.string("namespace") or "default"
        self.usage = Usage(
            reader.budget("max_keys", DEFAULT_MAX_KEYS, "keys", "delete keys you no longer need"),
            reader.budget(
                "max_bytes",
                DEFAULT_MAX_BYTES,
                "bytes of keys and values",
                "delete keys, or store smaller values",
            ),
        )
        self.value_budget = reader.budget(
            "max_value_bytes",
            DEFAULT_MAX_VALUE_BYTES,
            "bytes of canonical JSON",
            "store a smaller value",
            high=MAX_VALUE_BYTES,
        )
        self._reader = reader
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
        self.usage.add(int(size), keys)

    def _private_path(self) -> Path:
        """The database's real path, in a directory only the host can change."""
        name = self.path.name
        if name in ("", ".", ".."):
            raise self._unusable(ValueError("it names a directory, not a file"))
        try:
            directory = open_directory(str(self.path.parent))
        except (OSError, PathRefused) as exc:
            raise self._unusable(exc) from None
        try:
            if directory.exposed is not None:
                raise self._reader.error(
                    "path",
                    f"= {str(self.path)!r} is refused: {directory.exposed}, so someone else "
                    "could swap the database or its -wal file for a link and have the host "
                    "write there; make the directory private (chmod go-w), or keep the "
                    "database outside every rw attachment",
                )
            entry = entry_at(directory.descriptor, name)
            if entry is not None and stat.S_ISLNK(entry.st_mode):
                raise self._unusable(ValueError("it is a symbolic link; name the file itself"))
        finally:
            os.close(directory.descriptor)
        return Path(directory.path) / name

    def prepare(self, method: str, input: JSONValue) -> Callable[[], JSONValue]:
        if method != "put":
            key = _key(input_object(input, required={"key"}))
            return partial(self._get if method == "get" else self._delete, key)
        fields = input_object(input, required={"key", "value"})
        key, value = _key(fields), json1.canonical(fields["value"])
        self.value_budget.check(None, len(value))
        return partial(self._put, key, value.decode(), len(key.encode()) + len(value))

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
                change = size - freed, 0 if old else 1
                self.usage.check(*change)
                # fetchall: the statement must finish before the transaction can
                ((version,),) = self._db.execute(_PUT, (self.namespace, key, text)).fetchall()
                self._db.execute("COMMIT")
            finally:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
            self.usage.add(*change)
        return {"version": version}

    def _delete(self, key: str) -> JSONValue:
        with self._lock:
            removed = self._db.execute(
                f"DELETE FROM entries WHERE namespace = ? AND key = ? RETURNING {_SIZE}",
                (self.namespace, key),
            ).fetchall()
            for (size,) in removed:
                self.usage.add(-size, -1)
        return {"deleted": bool(removed)}

    def list_(self, prefix: str, limit: int) -> JSONValue:
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
        fix = "point it at a writable file of its own"
        return self._reader.error(
            "path", f"= {str(self.path)!r} cannot be used as a SQLite database ({exc}); {fix}"
        )


def _key(fields: Mapping[str, JSONValue]) -> str:
    key = string_member(fields, "key")
    if not 1 <= len(key.encode()) <= MAX_KEY_BYTES or "\0" in key:
        raise InvalidInput(f"member 'key' must be 1 to {MAX_KEY_BYTES:,} UTF-8 bytes without NUL")
    return key
