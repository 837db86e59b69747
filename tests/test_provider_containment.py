"""The built-in providers against a hostile component: paths it can swap, and budgets.

A component with an ``rw`` attachment can rename, link and plant anything inside it while
the host serves its calls as the host's user (root here). ``attachment`` below is such a
directory: mode 0777, as one must be for the default container user 65534 to write it.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from rsskit import measured, peak_kib
from runner.host.capabilities import CapabilityBinding, CapabilityError, builtin_contract
from runner.host.capabilities.artifacts import ArtifactsProvider
from runner.host.capabilities.kv import KeyValueProvider
from runner.host.capabilities.paths import PathRefused, open_directory
from runner.host.capabilities.provider import ProviderConfigError
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError

MiB = 1024 * 1024


def act(provider: Any, method: str, input: JSONValue) -> Any:
    return anyio.run(provider.call, method, input)


def exhausted(provider: Any, method: str, input: JSONValue) -> OperationError:
    with pytest.raises(OperationError) as caught:
        act(provider, method, input)
    assert caught.value.code == "RESOURCE_EXHAUSTED"
    return caught.value


def invalid_path(provider: Any, method: str, input: JSONValue) -> str:
    with pytest.raises(CapabilityError) as caught:
        act(provider, method, input)
    assert caught.value.name == "invalid-path"
    assert isinstance(caught.value.data, dict)
    reason = caught.value.data["reason"]
    assert isinstance(reason, str)
    return reason


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def attachment(tmp_path: Path) -> Path:
    shared = tmp_path / "attachment"
    shared.mkdir()
    shared.chmod(0o777)
    return shared


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Where a component would like the host to write."""
    place = tmp_path / "outside"
    place.mkdir()
    return place


# --- walking a provider's host path --------------------------------------------------


def test_links_are_followed_only_where_nobody_else_could_have_made_them(
    tmp_path: Path, attachment: Path, outside: Path
) -> None:
    (tmp_path / "operator-link").symlink_to("outside")  # tmp_path: root's, mode 0700
    (attachment / "planted").symlink_to(outside)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "roots").symlink_to(outside)
    (sticky / "theirs").symlink_to(outside)
    os.chown(sticky / "theirs", 65534, 65534, follow_symlinks=False)
    (tmp_path / "loop").symlink_to("loop")
    before = open_descriptors()
    for path, real in [
        (tmp_path / "operator-link", outside),
        (sticky / "roots", outside),
        (tmp_path / "operator-link" / ".." / "attachment", attachment),
    ]:
        opened = open_directory(str(path))
        assert opened.path == str(real)
        assert os.path.samestat(os.fstat(opened.descriptor), os.stat(real))
        os.close(opened.descriptor)
    for path, fragment in [
        (attachment / "planted", "/planted' is a symbolic link in a directory others can write"),
        (attachment / "planted" / "deeper", "directory others can write (owner uid 0, mode 0777)"),
        (sticky / "theirs", "/theirs' is a symbolic link"),
        (tmp_path / "loop", "more than 40 symbolic links"),
    ]:
        with pytest.raises(PathRefused, match=re.escape(fragment)):
            open_directory(str(path))
    assert list(outside.iterdir()) == []
    assert open_descriptors() == before


def test_the_walk_tells_whether_anyone_else_can_change_the_directory(
    tmp_path: Path, attachment: Path
) -> None:
    (attachment / "inner").mkdir(mode=0o755)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "private").mkdir(mode=0o700)
    cases = {
        tmp_path: None,
        sticky / "private": None,  # another user can neither rename nor replace it
        attachment: f"{str(attachment)!r} can be written by others (owner uid 0, mode 0777)",
        attachment / "inner": f"{str(attachment)!r} can be written by others",
        theirs: "(owner uid 65534, mode 0755)",
        sticky: "(owner uid 0, mode 1777)",  # others could add names to it
    }
    for path, exposed in cases.items():
        opened = open_directory(str(path))
        os.close(opened.descriptor)
        if exposed is None:
            assert opened.exposed is None, path
        else:
            assert opened.exposed is not None and exposed in opened.exposed, path


# --- artifacts: the root and the names below it --------------------------------------


def test_a_root_renamed_and_replaced_by_a_link_after_start_changes_nothing(
    attachment: Path, outside: Path
) -> None:
    root = attachment / "artifacts"
    store = ArtifactsProvider({"root": str(root)})
    root.rename(attachment / "moved")
    root.symlink_to(outside)  # what the component does while the run goes on
    assert act(store, "write", {"path": "planted", "text": "x"})["bytes"] == 1
    assert act(store, "write", {"path": "dir/deeper", "text": "y"})["bytes"] == 1
    assert act(store, "read", {"path": "planted"}) == {"text": "x"}
    assert act(store, "list", {}) == {"paths": ["dir/deeper", "planted"], "truncated": False}
    assert list(outside.iterdir()) == []
    assert (attachment / "moved" / "planted").read_text() == "x"
    store.close()


def test_a_root_on_a_planted_link_is_refused_at_start(attachment: Path, outside: Path) -> None:
    # A component of an earlier run left links where the next run's root is looked up.
    (attachment / "artifacts").symlink_to(outside)
    (attachment / "state").symlink_to(outside)
    for root in [attachment / "artifacts", attachment / "state" / "artifacts"]:
        with pytest.raises(ProviderConfigError, match="symbolic link in a directory others"):
            ArtifactsProvider({"root": str(root)})
    assert list(outside.iterdir()) == []


def test_an_operators_link_to_the_root_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    store = ArtifactsProvider({"root": str(tmp_path / "link")})
    assert store.root == str(tmp_path / "real")
    act(store, "write", {"path": "a", "text": "a"})
    assert (tmp_path / "real" / "a").read_text() == "a"
    store.close()


def test_a_link_swapped_in_below_the_root_is_refused(attachment: Path, outside: Path) -> None:
    root = attachment / "artifacts"
    store = ArtifactsProvider({"root": str(root)})
    act(store, "write", {"path": "reports/r.txt", "text": "mine"})
    (outside / "r.txt").write_text("secret")
    (root / "reports").rename(root / "old")
    (root / "reports").symlink_to(outside)
    assert "'reports' is a symbolic link" in invalid_path(store, "read", {"path": "reports/r.txt"})
    write = {"path": "reports/r.txt", "text": "overwritten"}
    assert "'reports' is a symbolic link" in invalid_path(store, "write", write)
    (root / "final").symlink_to(outside / "r.txt")
    assert "'final' is a symbolic link" in invalid_path(store, "read", {"path": "final"})
    assert (outside / "r.txt").read_text() == "secret"
    store.close()


def test_a_write_replaces_a_hard_link_and_never_writes_through_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = ArtifactsProvider({"root": str(root)})
    (tmp_path / "host-file").write_text("host bytes")
    os.link(tmp_path / "host-file", root / "linked")
    act(store, "write", {"path": "linked", "text": "artifact"})
    assert (tmp_path / "host-file").read_text() == "host bytes"
    assert (root / "linked").read_text() == "artifact"
    store.close()


def test_reading_a_fifo_socket_or_device_is_refused_at_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = ArtifactsProvider({"root": str(root)})
    os.mkfifo(root / "fifo")  # no writer: a blocking open would wait for ever
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "socket"))
    os.mknod(root / "device", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    answers: dict[str, str] = {}

    def read_all() -> None:
        for name in ["fifo", "socket", "device"]:
            answers[name] = invalid_path(store, "read", {"path": name})

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # release it before failing
        os.close(os.open(root / "fifo", os.O_WRONLY | os.O_NONBLOCK))
    assert not reader.is_alive(), "a read blocked"
    assert answers == {name: f"{name!r} is not a regular file" for name in answers}
    assert len(answers) == 3
    listener.close()
    store.close()


def test_artifacts_hold_no_descriptor_after_close(tmp_path: Path, attachment: Path) -> None:
    before = open_descriptors()
    store = ArtifactsProvider({"root": str(tmp_path / "root")})
    act(store, "write", {"path": "a/b/c", "text": "c"})
    act(store, "read", {"path": "a/b/c"})
    act(store, "list", {})
    store.close()
    (attachment / "link").symlink_to(tmp_path)
    with pytest.raises(ProviderConfigError):
        ArtifactsProvider({"root": str(attachment / "link")})
    assert open_descriptors() == before


# --- artifacts: budgets --------------------------------------------------------------


def test_artifacts_byte_budget(tmp_path: Path) -> None:
    root = tmp_path / "root"
    defaults = ArtifactsProvider({"root": str(root)})
    assert (defaults.usage.size.limit, defaults.usage.entries.limit, defaults.max_file_bytes) == (
        256 * MiB,
        10_000,
        6 * MiB,
    )
    defaults.close()
    store = ArtifactsProvider({"root": str(root), "max_bytes": 10})
    act(store, "write", {"path": "a", "text": "123456"})
    error = exhausted(store, "write", {"path": "b", "text": "12345"})
    assert "budget max_bytes = 10 bytes would be exceeded (6 in use" in error.message
    assert "raise the option 'max_bytes'" in error.message
    assert error.details == {"budget": "max_bytes", "limit": 10, "used": 6, "wanted": 5}
    assert sorted(p.name for p in root.iterdir()) == ["a"]  # no temporary file left
    act(store, "write", {"path": "a", "text": "123456789"})  # an overwrite frees the old bytes
    act(store, "write", {"path": "b", "text": "1"})
    exhausted(store, "write", {"path": "c", "text": "1"})
    store.close()


def test_artifacts_file_budget_counts_directories(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = ArtifactsProvider({"root": str(root), "max_files": 3})
    act(store, "write", {"path": "a/b", "text": ""})
    act(store, "write", {"path": "c", "text": ""})
    error = exhausted(store, "write", {"path": "d", "text": ""})
    assert "budget max_files = 3 files and directories" in error.message
    assert exhausted(store, "write", {"path": "e/f", "text": ""}).details == {
        "budget": "max_files",
        "limit": 3,
        "used": 3,
        "wanted": 1,
    }
    act(store, "write", {"path": "a/b", "text": "overwritten"})
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == ["a", "a/b", "c"]
    store.close()


def test_artifact_budgets_count_what_the_root_already_holds(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "earlier").mkdir(parents=True)
    (root / "earlier" / "run.txt").write_text("12345678")
    (root / "link").symlink_to("earlier")
    store = ArtifactsProvider({"root": str(root), "max_bytes": 10, "max_files": 4})
    assert exhausted(store, "write", {"path": "new", "text": "123"}).details == {
        "budget": "max_bytes",
        "limit": 10,
        "used": 8,
        "wanted": 3,
    }
    act(store, "write", {"path": "new", "text": "12"})
    assert exhausted(store, "write", {"path": "more", "text": ""}).details == {
        "budget": "max_files",
        "limit": 4,
        "used": 4,
        "wanted": 1,
    }
    store.close()


def test_artifact_budgets_hold_under_the_contract(tmp_path: Path) -> None:
    store = ArtifactsProvider({"root": str(tmp_path / "root"), "max_files": 1})
    binding = CapabilityBinding(
        "out", store, builtin_contract("artifacts"), provider_name="artifacts"
    )

    async def main() -> None:
        await binding.call("write", {"path": "a", "text": ""})
        with pytest.raises(OperationError) as caught:
            await binding.call("write", {"path": "b", "text": ""})
        assert caught.value.code == "RESOURCE_EXHAUSTED"
        assert caught.value.message.startswith("capability slot 'out' (provider artifacts):")
        await binding.aclose()

    anyio.run(main)


# --- kv: where the database may live -------------------------------------------------


def test_kv_refuses_a_database_someone_else_could_redirect(
    tmp_path: Path, attachment: Path, outside: Path
) -> None:
    victim = outside / "victim.sqlite3"
    (attachment / "kv.sqlite3").symlink_to(victim)  # planted by a component
    (attachment / "inner").mkdir(mode=0o755)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "kv.sqlite3").symlink_to(victim)
    for path, fragment in [
        (attachment / "kv.sqlite3", "/attachment' can be written by others"),
        (attachment / "inner" / "kv.sqlite3", "/attachment' can be written by others"),
        (theirs / "kv.sqlite3", "(owner uid 65534, mode 0755)"),
        (sticky / "kv.sqlite3", "(owner uid 0, mode 1777)"),
        (tmp_path / "private" / "kv.sqlite3", "it is a symbolic link; name the file itself"),
    ]:
        with pytest.raises(ProviderConfigError, match="option 'path'") as caught:
            KeyValueProvider({"path": str(path)})
        assert fragment in str(caught.value), path
        if path.parent != tmp_path / "private":
            assert "make the directory private (chmod go-w)" in str(caught.value)
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in attachment.iterdir()) == ["inner", "kv.sqlite3"]
    assert list(sticky.iterdir()) == [] and list(theirs.iterdir()) == []


def test_kv_opens_the_real_path_of_a_private_directory(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "alias").symlink_to("state")  # the operator's own link
    store = KeyValueProvider({"path": str(tmp_path / "alias" / "new" / "kv.sqlite3")})
    assert store.path == tmp_path / "state" / "new" / "kv.sqlite3"
    act(store, "put", {"key": "k", "value": 1})
    assert store.path.is_file()
    store.close()


# --- kv: budgets ---------------------------------------------------------------------


@pytest.fixture
def kv_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "kv.sqlite3"


def test_kv_value_budget(kv_path: Path) -> None:
    store = KeyValueProvider({"path": str(kv_path)})
    limits = (store.usage.size.limit, store.usage.entries.limit, store.value_budget.limit)
    assert limits == (64 * MiB, 100_000, MiB)
    store.close()
    store = KeyValueProvider({"path": str(kv_path), "max_value_bytes": 8})
    act(store, "put", {"key": "k", "value": "é" * 3})  # "ééé" with its quotes: 8 bytes
    error = exhausted(store, "put", {"key": "k", "value": "123456789"})
    assert "budget max_value_bytes = 8 bytes of canonical JSON would be exceeded" in error.message
    assert "(this call needs 11)" in error.message
    assert error.details == {"budget": "max_value_bytes", "limit": 8, "used": None, "wanted": 11}
    assert act(store, "get", {"key": "k"}) == {"value": "ééé"}
    store.close()


def test_kv_key_and_byte_budgets(kv_path: Path) -> None:
    store = KeyValueProvider({"path": str(kv_path), "max_keys": 2, "max_bytes": 20})
    act(store, "put", {"key": "a", "value": 1})  # 1 + 1 bytes
    act(store, "put", {"key": "é", "value": "xx"})  # 2 + 4 bytes
    assert exhausted(store, "put", {"key": "c", "value": 1}).details == {
        "budget": "max_keys",
        "limit": 2,
        "used": 2,
        "wanted": 1,
    }
    assert act(store, "put", {"key": "a", "value": "x" * 10}) == {"version": 2}  # 1 + 12
    error = exhausted(store, "put", {"key": "a", "value": "x" * 12})  # would be 1 + 14
    assert error.details == {"budget": "max_bytes", "limit": 20, "used": 19, "wanted": 2}
    assert "raise the option 'max_bytes'" in error.message
    assert act(store, "delete", {"key": "a"}) == {"deleted": True}
    act(store, "put", {"key": "c", "value": "x" * 11})  # 6 + 1 + 13 = 20: fits after the delete
    assert act(store, "list", {}) == {"keys": ["c", "é"], "truncated": False}
    store.close()


def test_kv_budgets_count_what_the_namespace_already_holds(kv_path: Path) -> None:
    first = KeyValueProvider({"path": str(kv_path)})
    act(first, "put", {"key": "k1", "value": "12345678"})  # 2 + 10 bytes
    first.close()
    other = KeyValueProvider({"path": str(kv_path), "namespace": "other", "max_keys": 1})
    act(other, "put", {"key": "k", "value": 1})  # another namespace, its own budget
    other.close()
    again = KeyValueProvider({"path": str(kv_path), "max_bytes": 16, "max_keys": 2})
    assert exhausted(again, "put", {"key": "k2", "value": "12"}).details == {
        "budget": "max_bytes",
        "limit": 16,
        "used": 12,
        "wanted": 6,
    }
    act(again, "put", {"key": "k2", "value": 1})
    error = exhausted(again, "put", {"key": "k3", "value": 1})
    assert isinstance(error.details, dict) and error.details["budget"] == "max_keys"
    again.close()


def test_kv_concurrent_puts_cannot_overshoot_a_budget(kv_path: Path) -> None:
    store = KeyValueProvider({"path": str(kv_path), "max_keys": 10})
    refused: list[str] = []

    async def put(index: int) -> None:
        try:
            await store.call("put", {"key": f"k{index:02}", "value": index})
        except OperationError as exc:
            refused.append(exc.code)

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            for index in range(30):
                tasks.start_soon(put, index)

    anyio.run(main)
    assert refused == ["RESOURCE_EXHAUSTED"] * 20
    assert len(act(store, "list", {})["keys"]) == 10
    store.close()


PUTS = textwrap.dedent("""
    import sys, anyio
    from runner.host.capabilities.kv import KeyValueProvider
    from runner.protocol.codes import OperationError
    options = {"path": sys.argv[1]}
    if sys.argv[2] == "raised":
        options.update(max_value_bytes=8 * 1024 * 1024 + 2, max_bytes=1 << 30)
    store = KeyValueProvider(options)
    value = "x" * (8 * 1024 * 1024)
    async def main():
        stored = 0
        for index in range(40):
            try:
                await store.call("put", {"key": f"k{index}", "value": value})
                stored += 1
            except OperationError as exc:
                assert exc.code == "RESOURCE_EXHAUSTED", exc
        got = await store.call("get", {"key": "k0"}) if stored else {"value": ""}
        print(stored, len(got["value"]))
    anyio.run(main)
    store.close()
""")


@pytest.mark.parametrize(("budgets", "stored"), [("raised", "40 8388608"), ("default", "0 0")])
def test_kv_serves_big_values_in_bounded_memory(tmp_path: Path, budgets: str, stored: str) -> None:
    # 40 puts of an 8 MiB string: 320 MiB stored when the budgets allow it. The host
    # holds a few copies of one value (the decoded input, its canonical bytes and text,
    # SQLite's page copy) on top of a ~45 MiB interpreter, never the store: 160 MiB.
    path = tmp_path / "state" / "kv.sqlite3"
    child = subprocess.Popen(
        measured([sys.executable, "-c", PUTS, str(path), budgets], tmp_path / "peak"),
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None
    printed = child.stdout.read().decode().strip()
    assert child.wait() == 0 and printed == stored
    peak = peak_kib(tmp_path / "peak") * 1024
    assert peak < 160 * MiB, f"peak RSS {peak / MiB:.0f} MiB"
    stored_bytes = sum(p.stat().st_size for p in path.parent.iterdir())
    assert (stored_bytes > 320 * MiB) == (budgets == "raised")
