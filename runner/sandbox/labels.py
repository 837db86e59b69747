"""The labels on every container flow-runner makes, and the proof of who made it.

``runner.sandbox.gc`` removes only a container this machine's runners provably made, once
its owner is provably dead. So every container carries, besides the run's labels:

* ``flow-runner.owner = <hostname>:<pid>``, for people and ``docker ps --filter`` (a
  hostname proves nothing: containers and pods share names);
* ``flow-runner.process = <boot id>/<pid-namespace inode>/<pid>/<start ticks>``, which names
  one process for good (a pid is unique only within its namespace and, with its start
  time, within one boot);
* ``flow-runner.created`` (unix ms, the owner's clock);
* ``flow-runner.mac``, an HMAC-SHA256 over these and the run's labels, keyed with this
  machine's secret: without it nobody makes labels gc accepts, and a copied label set only
  gets its copier's own container removed (labels cannot change after create).

Labels cannot name a later owner, so a pooled container's claim is a signed record of its
own in the state directory (:func:`record_claim`).

The secret is 32 random bytes, made once with mode 0600 in the state directory:
``$FLOW_RUNNER_STATE_DIR``, else ``/var/lib/flow-runner`` for root, else
``$XDG_STATE_HOME/flow-runner`` (``~/.local/state/flow-runner``). It must be this machine's
and this user's alone: whoever reads the key can forge labels, and gc takes a signed
owner's other boot for a past boot of this machine.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import socket
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.sandbox.errors import DockerSandboxError
from runner.sandbox.own_container import own_container_id

LABEL_RUN_ID = "flow-runner.run-id"
LABEL_PARENT_RUN_ID = "flow-runner.parent-run-id"
LABEL_INSPECT = "flow-runner.inspect"
LABEL_OWNER = "flow-runner.owner"
LABEL_PROCESS = "flow-runner.process"
LABEL_CREATED = "flow-runner.created"
LABEL_RUNNER_CONTAINER = "flow-runner.runner-container"
LABEL_MAC = "flow-runner.mac"

SIGNED = (
    LABEL_RUN_ID,
    LABEL_PARENT_RUN_ID,
    LABEL_INSPECT,
    LABEL_OWNER,
    LABEL_PROCESS,
    LABEL_CREATED,
    LABEL_RUNNER_CONTAINER,
)
"""The labels the MAC covers (absent ones as absent): not the image's, which a container
inherits and which anyone can choose."""
_MAC_DOMAIN = "flow-runner container labels/1"
KEY_FILE = "gc.key"
CLAIMS_DIR = "claims"
"""Where the claim records of pooled containers are kept, in :func:`state_dir`."""
_CLAIM_DOMAIN = "flow-runner container claim/1"
_KEY_BYTES = 32


@dataclass(frozen=True)
class Process:
    """One process, named so that no other process before or after it has the same name."""

    boot_id: str
    pid_ns: int
    pid: int
    start_ticks: int

    @classmethod
    def current(cls) -> Process:
        return _current(os.getpid())

    @classmethod
    def parse(cls, text: str) -> Process | None:
        """The process a ``flow-runner.process`` label names; ``None`` if it is malformed."""
        parts = text.split("/")
        if len(parts) != 4 or not all(part.isdigit() for part in parts[1:]):
            return None
        boot_id, pid_ns, pid, ticks = parts
        return cls(boot_id, int(pid_ns), int(pid), int(ticks))

    def label(self) -> str:
        return f"{self.boot_id}/{self.pid_ns}/{self.pid}/{self.start_ticks}"


def process_stat(pid: int) -> tuple[str, int] | None:
    """``pid``'s state letter and start time (clock ticks since boot); ``None`` if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # After the ")" that ends comm: field 3 (state) first, field 22 (starttime) 19 later.
    fields = text.rpartition(")")[2].split()
    return fields[0], int(fields[19])


@functools.lru_cache(maxsize=1)
def _current(pid: int) -> Process:
    """Cached per pid: a forked child gets its own name."""
    found = process_stat(pid)
    assert found is not None, "a running process has a /proc entry"
    # The boot id is the same in every container on this kernel, and new at every boot.
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return Process(boot_id, os.stat("/proc/self/ns/pid").st_ino, pid, found[1])


def run_labels(
    run_id: str, parent_run_id: str | None = None, owner: Process | None = None
) -> dict[str, str]:
    """Labels that let ``flow-runner gc`` find and judge a run's container, made by
    ``owner`` (this process unless given)."""
    labels = {LABEL_RUN_ID: run_id}
    if parent_run_id:
        labels[LABEL_PARENT_RUN_ID] = parent_run_id
    return _owned(labels, owner or Process.current())


def inspect_labels() -> dict[str, str]:
    """Labels of a never-started container that only reads an image's package."""
    return _owned({LABEL_INSPECT: "1"}, Process.current())


def _owned(labels: dict[str, str], owner: Process) -> dict[str, str]:
    """``labels`` signed, with the owner's and those naming the runner's own container."""
    container_id = own_container()
    runner = {LABEL_RUNNER_CONTAINER: container_id} if container_id else {}
    return signed(labels | owner_labels(owner) | runner, machine_key())


def owner_labels(process: Process, created_ms: int | None = None) -> dict[str, str]:
    """The owner's labels: who made the container, and when (now, unless given)."""
    return {
        LABEL_OWNER: f"{socket.gethostname()}:{process.pid}",
        LABEL_PROCESS: process.label(),
        LABEL_CREATED: str(time.time_ns() // 1_000_000 if created_ms is None else created_ms),
    }


def signed(labels: Mapping[str, str], key: bytes) -> dict[str, str]:
    """``labels`` with their MAC added."""
    return {**labels, LABEL_MAC: _mac(labels, key)}


def is_signed(labels: Mapping[str, str], key: bytes) -> bool:
    """Whether the labels carry a MAC made with ``key`` over exactly these labels."""
    return hmac.compare_digest(labels.get(LABEL_MAC, ""), _mac(labels, key))


def _mac(labels: Mapping[str, str], key: bytes) -> str:
    return _digest(key, _MAC_DOMAIN, [[name, labels.get(name)] for name in SIGNED])


def _digest(key: bytes, *parts: object) -> str:
    message = json.dumps(parts, separators=(",", ":")).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def record_claim(container_id: str, claimer: str) -> None:
    """Record, signed, that the process ``claimer`` (a label text) names holds the pooled
    container ``container_id``: gc spares it while that process lives, whatever became of
    its labels' owner. Written whole (a rename), before the claim is answered."""
    if Process.parse(claimer) is None:
        raise ValueError(f"not a process label: {claimer!r}")
    path = _claim_path(container_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{container_id}.{os.getpid()}")
    partial.write_text(f"{claimer} {_digest(machine_key(), _CLAIM_DOMAIN, container_id, claimer)}")
    os.replace(partial, path)


def read_claim(container_id: str, key: bytes) -> str | None:
    """The claimer's label text in ``container_id``'s claim record; None: no record; ""
    for one that is unreadable or not signed with ``key`` (nobody to prove dead)."""
    try:
        claimer, _, mac = _claim_path(container_id).read_bytes().decode("ascii").partition(" ")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return ""
    valid = hmac.compare_digest(mac, _digest(key, _CLAIM_DOMAIN, container_id, claimer))
    return claimer if valid else ""


def drop_claim(container_id: str) -> None:
    """Remove ``container_id``'s claim record (the container is gone); none is fine."""
    _claim_path(container_id).unlink(missing_ok=True)


def _claim_path(container_id: str) -> Path:
    if not container_id.isalnum():
        raise ValueError(f"not a container id: {container_id!r}")
    return state_dir() / CLAIMS_DIR / container_id


def state_dir() -> Path:
    """Where this machine's flow-runner state for this user lives (see the module doc)."""
    explicit = os.environ.get("FLOW_RUNNER_STATE_DIR", "")
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:
        return Path("/var/lib/flow-runner")
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "flow-runner"


def machine_key() -> bytes:
    """This machine's label key (in :func:`state_dir`)."""
    return label_key(state_dir())


@functools.lru_cache(maxsize=4)
def label_key(directory: Path) -> bytes:
    """The label key kept in ``directory``, made on first use; cached per directory."""
    path = directory / KEY_FILE
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            return _read_key(path)
        except FileNotFoundError:
            _create_key(path)
            return _read_key(path)
    except OSError as exc:
        raise DockerSandboxError(
            f"cannot read or create the container-label key {path}: {exc.strerror}; "
            "set FLOW_RUNNER_STATE_DIR to a directory of your own on this machine"
        ) from exc


def _create_key(path: Path) -> None:
    """Write a new key so that no reader sees a partial one, and only one key wins
    (``secrets`` is imported here: once per state directory, not per run)."""
    import secrets

    partial = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(_KEY_BYTES))
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another runner made one first: theirs
            os.link(partial, path)
    finally:
        partial.unlink()


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        key = file.read(_KEY_BYTES + 1)
    if (
        not stat.S_ISREG(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_mode & 0o077
        or len(key) != _KEY_BYTES
    ):
        raise DockerSandboxError(
            f"the container-label key {path} is not a {_KEY_BYTES}-byte file of yours that "
            "only you can read; whoever can read it can forge labels for `flow-runner gc`. "
            f"Remove it (a new one is made) or `chmod 600 {path}`"
        )
    return key


own_container = functools.cache(own_container_id)
"""The id of the container this runner runs in, read once per process."""
