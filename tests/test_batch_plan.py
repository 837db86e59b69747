"""Planning a batch without an engine: invocation keys, the rows handed to the slots, and
the batch's sandboxes (one per image, command and profile, pinned to the planned image)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runner import json1
from runner.batch.keys import ImageIds, Keys
from runner.batch.manifest import Defaults, Row, check, rows_on
from runner.batch.sandboxes import PinnedSandbox, Sandboxes
from runner.config import load_config
from runner.sandbox.base import LaunchRequest
from runner.sandbox.docker.sandbox import DockerSandbox
from runner.sandbox.errors import ImageMissing

IMAGE_ID = "sha256:" + "ab" * 32
TAG = "flow-runner/fake-component:latest"


class Engine:
    """A backend's engine as planning asks it: a tag names an id, or no image."""

    def __init__(self, ids: dict[str, str]) -> None:
        self.ids = ids
        self.asked: list[str] = []

    def image_id(self, tag: str) -> str | None:
        self.asked.append(tag)
        return self.ids.get(tag)

    def sweep(self, runs: Any = None) -> list[str]:
        return []

    def transient(self, exc: BaseException) -> bool:
        return False


def manifest_rows(tmp_path: Path, lines: list[dict[str, Any]], **defaults: Any) -> list[Row]:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return list(check(path, Defaults(**{"image": TAG, **defaults}), None))


def test_a_key_is_the_sha256_of_the_whole_canonical_document(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("one")
    profile = tmp_path / "slow.toml"
    profile.write_text("cancel_grace = 7.5\ncpus = 0.25\n")
    rows = manifest_rows(
        tmp_path,
        [
            {"id": "plain", "input": {"n": 1.5, "text": "é\u2028𝄞", "big": -0.0}},
            {"id": "same-profile", "input": [1, 2], "settings": {"z": 1, "a": [True, None]}},
            {"id": "other-profile", "profile": str(profile), "command": ["python3", "x.py"]},
            {"id": "attached", "attach": [f"in={data}:ro", f"out={tmp_path}:rw"]},
            {"id": "missing-image", "image": "flow-runner/no-such:latest"},
        ],
    )
    keys = Keys(ImageIds(Engine({TAG: IMAGE_ID})), None)
    for row in rows:
        document = keys.document(row)
        assert keys(row) == hashlib.sha256(json1.canonical(document)).hexdigest(), row.id
    assert len({keys(row) for row in rows}) == len(rows)
    assert keys.document(rows[0])["image"] == IMAGE_ID
    assert keys.document(rows[4])["image"] == "missing:flow-runner/no-such:latest"
    assert keys.document(rows[2])["profile"]["cpus"] == 0.25  # type: ignore[index,call-overload]


def test_the_key_covers_the_deadline_and_the_seccomp_files_text(tmp_path: Path) -> None:
    """A row that ran out of time may finish with more of it, and a profile's seccomp
    file may change under the same name: either is another key."""
    seccomp = tmp_path / "filter.json"
    seccomp.write_text('{"defaultAction": "SCMP_ACT_ALLOW"}')
    profile = tmp_path / "p.toml"
    profile.write_text(f'seccomp = "{seccomp}"\n')

    def key(deadline: str) -> str:
        manifest = tmp_path / "m.jsonl"
        manifest.write_text(json.dumps({"id": "r", "profile": str(profile)}) + "\n")
        (row,) = check(manifest, Defaults(image=TAG, deadline=deadline), None)
        return Keys(ImageIds(Engine({TAG: IMAGE_ID})), None)(row)

    first = key("5m")
    assert key("5m") == first
    assert key("10m") != first
    seccomp.write_text('{"defaultAction": "SCMP_ACT_ERRNO"}')
    assert key("5m") != first


def test_a_flow_rows_key_covers_the_configuration_and_the_flows_images(tmp_path: Path) -> None:
    (tmp_path / "flow-runner.toml").write_text(
        f'[flows.hello]\nimage = "{TAG}"\n\n[flows.other]\nimage = "flow-runner/other:1"\n'
    )
    config = load_config(tmp_path / "flow-runner.toml")
    path = tmp_path / "m.jsonl"
    path.write_text('{"id": "a", "flow": "hello", "input": 1}\n{"id": "b", "flow": "other"}\n')
    rows = list(check(path, Defaults(), config))
    engine = Engine({TAG: IMAGE_ID})
    keys = Keys(ImageIds(engine), config)
    for row in rows:
        assert keys(row) == hashlib.sha256(json1.canonical(keys.document(row))).hexdigest()
    assert keys.document(rows[0])["images"] == {
        "hello": IMAGE_ID,
        "other": "missing:flow-runner/other:1",
    }
    assert sorted(engine.asked) == [TAG, "flow-runner/other:1"]  # once per tag per batch


def test_an_input_near_json1s_bounds_still_gets_a_key(tmp_path: Path) -> None:
    """The document adds the profile's values to the row's; as one tree it would exceed
    JSON/1's node bound, which once made planning raise and the whole batch fail."""
    items = json1.MAX_ITEMS - 6
    big = [list(range(items)) for _ in range(json1.MAX_NODES // items)]
    (row,) = manifest_rows(tmp_path, [{"id": "big", "input": big}])
    keys = Keys(ImageIds(Engine({TAG: IMAGE_ID})), None)
    with pytest.raises(json1.JSON1Error):
        json1.canonical(keys.document(row))
    assert len(keys(row)) == 64 and keys(row) != keys(manifest_rows(tmp_path, [{"id": "x"}])[0])


def test_the_rows_of_the_chosen_lines_are_read_again_and_no_other(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"id": f"r-{i}", "input": i}) + "\n\n" for i in range(6)))
    defaults = Defaults(image=TAG)
    lines = {row.line for row in check(path, defaults, None) if row.input in (1, 4)}
    assert [row.id for row in rows_on(path, defaults, None, lines)] == ["r-1", "r-4"]
    path.write_text(path.read_text().replace('"r-0"', '"R 0"'))  # an unread line may change
    assert [row.input for row in rows_on(path, defaults, None, lines)] == [1, 4]


def test_rows_share_their_sandbox_and_it_runs_the_planned_image_id(tmp_path: Path) -> None:
    rows = manifest_rows(
        tmp_path,
        [
            {"id": "a", "input": 1},
            {"id": "b", "input": 2},
            {"id": "other-command", "command": ["true"]},
            {"id": "missing-image", "image": "flow-runner/no-such:latest"},
        ],
    )
    engine = Engine({TAG: IMAGE_ID})
    image_ids = ImageIds(engine)
    for row in rows:
        assert row.image is not None
        image_ids(row.image)  # as planning does, for every row
    engine.ids[TAG] = "sha256:" + "cd" * 32  # the tag rebuilt after planning
    sandboxes = Sandboxes(image_ids)
    (a, _), (b, _), (other, _), (missing, _) = (sandboxes(row) for row in rows)
    assert a is b and a is not other
    assert isinstance(a, PinnedSandbox) and isinstance(a._sandbox, DockerSandbox)
    assert a.image == IMAGE_ID and a.command is None and other.command == ["true"]  # type: ignore[attr-defined]
    assert missing.image == "flow-runner/no-such:latest"  # type: ignore[attr-defined]


class Backend:
    """A sandbox whose image source is counted; the first ask fails when told to."""

    name = "fake"

    def __init__(self, fail_first: bool) -> None:
        self.asked = 0
        self.fail_first = fail_first

    async def image_source(self) -> Any:
        self.asked += 1
        if self.fail_first and self.asked == 1:
            raise ImageMissing("not yet")
        return SimpleNamespace(image_id=IMAGE_ID, labels={})

    def planned_paths(self, request: LaunchRequest) -> tuple[dict[str, str], str]:
        return {}, "/scratch"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_pinned_sandbox_asks_for_its_image_once_but_not_a_refusal(
    anyio_backend: str,
) -> None:
    backend = Backend(fail_first=True)
    pinned = PinnedSandbox(backend)  # type: ignore[arg-type]
    with pytest.raises(ImageMissing):
        await pinned.image_source()
    first = await pinned.image_source()
    assert await pinned.image_source() is first and backend.asked == 2
    assert pinned.name == "fake" and pinned.planned_paths(LaunchRequest()) == ({}, "/scratch")


def test_junit_of_hostile_messages_and_stderr_is_well_formed_xml(tmp_path: Path) -> None:
    """A component's error message and stderr tail reach the JUnit file: an ANSI colour
    code or a NUL (which XML 1.0 cannot hold) is spelled out, not written raw, so the
    reporter still reads every failure in the file."""
    import xml.etree.ElementTree as ET

    from runner.batch.junit import write_junit
    from runner.batch.store import FAILED, RowResult, Store

    store = Store(tmp_path / "r.sqlite")
    store.queue({"id": "r-\x07", "manifest": "m", "line": 1, "key": "k", "input_digest": "d",
                 "target": "img", "image_id": None})  # fmt: skip
    store.start("m", "r-\x07", "run-1")
    final = RowResult(FAILED, error_code="EXECUTION_FAILED", error_message="boom \x1b[31mred\x00",
                  stderr_tail="\x1b[0mtail \x7f é")  # fmt: skip
    store.finish("m", "r-\x07", final, seconds=1.0)
    write_junit(store, tmp_path / "j.xml")
    case = ET.parse(tmp_path / "j.xml").getroot().find("testsuite/testcase")
    assert case is not None and case.get("name") == "r-\\x07"
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == "EXECUTION_FAILED: boom \\x1b[31mred\\x00"
    assert failure.text is not None and failure.text.strip() == "\\x1b[0mtail \x7f é"


def test_a_results_file_is_held_by_one_batch_at_a_time(tmp_path: Path) -> None:
    """Two batches on one store would both run the rows neither has finished; a second
    is refused (exit 2 at the CLI), while reading the store (report, diff) still works."""
    from runner.batch.store import Store, StoreError

    path = tmp_path / "r.sqlite"
    first = Store(path)
    first.claim()
    second = Store(path)
    with pytest.raises(StoreError, match="another batch is running on this results file"):
        second.claim()
    assert list(second.rows()) == []  # reading needs no claim
    first.close()
    second.claim()
    second.close()


def test_a_sweep_for_runs_takes_the_runs_below_them_at_any_depth() -> None:
    """A batch names its flow rows' runs at its end: their children's and grandchildren's
    containers are this process's too, linked to the row's run by their parent labels
    (a child whose container is gone is named by the batch itself, from the report)."""
    import secrets

    from runner.sandbox.gc import Sweeper
    from runner.sandbox.labels import (
        LABEL_PARENT_RUN_ID,
        LABEL_RUN_ID,
        Process,
        owner_labels,
        signed,
    )

    here = Process.current()
    sweeper = Sweeper(secrets.token_bytes(32), here, 0)
    other = Process(here.boot_id, here.pid_ns, here.pid + 1, here.start_ticks)

    def labels(run: str, parent: str | None = None, owner: Process = here) -> dict[str, str]:
        own = {LABEL_RUN_ID: run} | ({LABEL_PARENT_RUN_ID: parent} if parent else {})
        return signed(own | owner_labels(owner), sweeper.key)

    tree = {
        "root": labels("row-run"),
        "child": labels("child", "row-run"),
        "grandchild": labels("grandchild", "child"),
        "orphan": labels("orphan", "gone-child"),  # its parent's container was removed
        "unrelated": labels("other-row", None),
        "elsewhere": labels("foreign", "row-run", other),  # another process's
        "forged": {**labels("forged", "row-run"), LABEL_RUN_ID: "forged-2"},
    }
    summaries = [{"Labels": value} for value in tree.values()]
    removable = sweeper.made_here_for({"row-run", "gone-child"}, summaries)
    taken = {name for name, value in tree.items() if removable(value, "running", lambda _: False)}
    assert taken == {"root", "child", "grandchild", "orphan"}


def test_which_sandbox_errors_a_batch_retries() -> None:
    """The backend says which of its errors another attempt may get past: an engine that
    failed or did not answer, not a cause every attempt meets."""
    import docker.errors
    import requests.exceptions

    from runner.batch.retry import is_infrastructure_failure
    from runner.package.errors import PackageError
    from runner.sandbox.attachments import AttachmentError
    from runner.sandbox.errors import (
        CommandNotFound,
        DockerSandboxError,
        EngineUnavailable,
        FilesTooLarge,
        ProfileError,
        RuntimeMissing,
    )
    from runner.sandbox.registry import BackendUnknown, sandbox_engine

    engine = sandbox_engine("docker")
    retried = [
        EngineUnavailable("no answer"),
        DockerSandboxError("refused"),
        ConnectionResetError(),
        docker.errors.APIError("500 Server Error"),
        requests.exceptions.ConnectionError(),
        requests.exceptions.ReadTimeout(),
        ExceptionGroup("one of them", [ValueError(), EngineUnavailable("gone")]),
    ]
    final = [
        ImageMissing("no image"),
        RuntimeMissing("no runsc"),
        ProfileError("bad profile"),
        AttachmentError("bad attachment"),
        CommandNotFound("no command"),
        FilesTooLarge("too large"),
        BackendUnknown("no backend"),
        docker.errors.ImageNotFound("no image"),
        PackageError("FLOW.md", "", "bad package"),
        ValueError("anything else"),
    ]
    assert [is_infrastructure_failure(exc, engine) for exc in retried] == [True] * len(retried)
    assert [is_infrastructure_failure(exc, engine) for exc in final] == [False] * len(final)


def test_a_flow_rows_key_follows_what_the_configurations_files_say(tmp_path: Path) -> None:
    """The same names and paths with other contents are another key: the profile (and
    its seccomp file), a capability's contract, a read-only attachment, a process flow's
    package and script. A read-write attachment is an output: its contents are not."""
    files = {
        "p.toml": "cpus = 0.5\n",
        "filter.json": '{"defaultAction": "SCMP_ACT_ALLOW"}',
        "c.json": '{"contract": 1}',
        "data/in.txt": "one",
        "out/o.txt": "written by a run",
        "pkg/FLOW.md": "---\nname: local\n---\n",
        "flow.py": "print(1)\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "p.toml").write_text(f'cpus = 0.5\nseccomp = "{tmp_path / "filter.json"}"\n')
    (tmp_path / "flow-runner.toml").write_text(
        f'[flows.boxed]\nimage = "{TAG}"\nprofile = "p.toml"\n'
        'attachments = { data = "data:ro", out = "out:rw" }\n'
        '[flows.boxed.capabilities.store]\nprovider = "kv"\ncontract = "c.json"\n'
        '[flows.local]\ncommand = ["python3", "flow.py"]\npackage = "pkg"\n'
    )
    config = load_config(tmp_path / "flow-runner.toml")
    path = tmp_path / "m.jsonl"
    path.write_text('{"id": "a", "flow": "boxed"}\n{"id": "b", "flow": "local"}\n')
    rows = list(check(path, Defaults(), config))

    def key(row: Row) -> str:  # a new batch: nothing digested yet
        return Keys(ImageIds(Engine({TAG: IMAGE_ID})), config)(row)

    first = [key(row) for row in rows]
    assert [key(row) for row in rows] == first
    for name, text in [
        ("out/o.txt", "written by another run"),
        ("p.toml", f'cpus = 0.25\nseccomp = "{tmp_path / "filter.json"}"\n'),
        ("filter.json", '{"defaultAction": "SCMP_ACT_ERRNO"}'),
        ("c.json", '{"contract": 2}'),
        ("data/in.txt", "two"),
        ("pkg/FLOW.md", "---\nname: other\n---\n"),
        ("flow.py", "print(2)\n"),
    ]:
        before = [key(row) for row in rows]
        (tmp_path / name).write_text(text)
        changed = name != "out/o.txt"
        assert ([key(row) for row in rows] != before) is changed, name


def test_two_manifests_on_one_store_keep_their_own_rows(tmp_path: Path) -> None:
    """Ids are unique within a manifest only: the same id in another manifest is another
    row, planned and run on its own, not skipped on the first manifest's result."""
    from runner.batch.scheduler import BatchControl, BatchOptions, _Batch
    from runner.batch.store import SUCCEEDED, RowResult, Store

    store = Store(tmp_path / "r.sqlite")
    line = json.dumps({"id": "same", "input": 1}) + "\n"
    planned = {}
    for name in ("first", "second"):
        manifest = tmp_path / f"{name}.jsonl"
        manifest.write_text(line)
        options = BatchOptions(
            manifest, defaults=Defaults(image=TAG), engine=Engine({TAG: IMAGE_ID})
        )
        batch = _Batch(options, store, BatchControl())
        planned[name] = batch.plan(check(manifest, options.defaults, None))
        store.start(name, "same", f"run-{name}")
        store.finish(name, "same", RowResult(SUCCEEDED, "done", output=name), seconds=1.0)
    assert planned == {"first": {1}, "second": {1}}
    rows = {(row["manifest"], row["id"]): row["output"] for row in store.rows()}
    assert rows == {("first", "same"): "first", ("second", "same"): "second"}
    store.close()


def test_a_store_whose_rows_were_named_by_id_alone_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    from runner.batch.store import COLUMNS, Store

    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.execute(f"CREATE TABLE runs ({', '.join(COLUMNS)}, PRIMARY KEY (id))")
    row = dict.fromkeys(COLUMNS) | {
        "id": "a", "manifest": "m", "line": 1, "key": "k", "input_digest": "d",
        "target": "img", "state": "done", "status": "succeeded", "attempts": 1,
    }  # fmt: skip
    old.execute(f"INSERT INTO runs VALUES ({', '.join('?' for _ in COLUMNS)})", list(row.values()))
    old.commit()
    old.close()
    store = Store(path)
    assert [dict(found) for found in store.rows()] == [row]
    known = store.known("m", "a")
    assert known is not None and (known["key"], known["state"]) == ("k", "done")
    store.queue({"id": "a", "manifest": "other", "line": 1, "key": "k2", "input_digest": "d",
                 "target": "img", "image_id": None})  # fmt: skip
    assert [(r["manifest"], r["id"], r["state"]) for r in store.rows()] == [
        ("m", "a", "done"), ("other", "a", "pending")
    ]  # fmt: skip
    store.close()
    reopened = Store(path, create=False)  # migrated once: opened again as it is
    assert [(r["manifest"], r["id"]) for r in reopened.rows()] == [("m", "a"), ("other", "a")]
    reopened.close()


def test_the_package_names_its_functions_once_their_modules_are_imported() -> None:
    """``runner.batch`` imports its modules on first use; a module named like one of its
    functions (``merge``) must not take the function's place."""
    import runner.batch.merge
    import runner.batch.scheduler
    from runner.batch import __all__, merge, run_batch

    assert callable(merge) and callable(run_batch) and run_batch.__module__.endswith("scheduler")
    assert all(getattr(runner.batch, name) is not None for name in __all__)


@pytest.mark.timeout(60)
def test_batch_report_prints_each_phases_p50_p95_and_max(tmp_path: Path) -> None:
    """Across the rows' run reports, per timing: how many rows carry it and its p50, p95
    and max by nearest rank; the known phases in their order, then any other by name; a
    row without a report (refused before launch) counts in none."""
    import io
    import subprocess
    import sys

    from runner.batch.report import print_summary, summary
    from runner.batch.store import FAILED, SUCCEEDED, RowResult, Store

    store = Store(tmp_path / "r.sqlite")
    for i in range(1, 21):
        store.queue({"id": f"r{i}", "manifest": "m", "line": i, "key": "k", "input_digest": "d",
                     "target": TAG, "image_id": None})  # fmt: skip
        timings = {"zeta": 1.0, "total": i / 10, "create": i / 100}
        if i <= 2:
            timings["pool_wait"] = i / 1000
        report = json.dumps({"run_id": f"run-{i}", "timings": timings})
        final = RowResult(SUCCEEDED, "done", report=report) if i < 20 else RowResult(FAILED)
        store.finish("m", f"r{i}", final, seconds=1.0)
    info = summary(store)
    assert info["phases"] == {
        "create": {"rows": 19, "p50": 0.10, "p95": 0.19, "max": 0.19},
        "pool_wait": {"rows": 2, "p50": 0.001, "p95": 0.002, "max": 0.002},
        "total": {"rows": 19, "p50": 1.0, "p95": 1.9, "max": 1.9},
        "zeta": {"rows": 19, "p50": 1.0, "p95": 1.0, "max": 1.0},
    }
    out = io.StringIO()
    print_summary(info, out)
    table = out.getvalue().partition("phase (s)")[2].splitlines()
    assert table[0].split() == ["rows", "p50", "p95", "max"]
    assert [line.split() for line in table[1:]] == [
        ["create", "19", "0.100", "0.190", "0.190"],
        ["pool_wait", "2", "0.001", "0.002", "0.002"],
        ["total", "19", "1.000", "1.900", "1.900"],
        ["zeta", "19", "1.000", "1.000", "1.000"],
    ]
    store.close()
    shown = subprocess.run(
        [sys.executable, "-m", "runner.cli", "batch", "report", str(tmp_path / "r.sqlite")],
        capture_output=True, text=True, timeout=50, check=True,
    )  # fmt: skip
    assert "\ntotal" in shown.stdout and "1.900" in shown.stdout
