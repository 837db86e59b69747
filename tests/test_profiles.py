"""Sandbox profiles and attachment specs, without an engine: loading, strictness, refusals."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from runner.sandbox import attachments
from runner.sandbox.attachments import (
    AttachmentError,
    check_attachment,
    check_attachments,
    parse_attach,
    parse_attachments,
)
from runner.sandbox.base import Attachment
from runner.sandbox.profile_model import ProfileModel
from runner.sandbox.profiles import (
    SHIPPED,
    ProfileError,
    SandboxProfile,
    list_profiles,
    load_profile,
    parse_size,
    profiles_dir,
)

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]


def write_profile(directory: Path, text: str, name: str = "mine") -> Path:
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


# --- shipped profiles -------------------------------------------------------------------


def test_the_shipped_profiles_come_from_the_checkout() -> None:
    assert profiles_dir() == ROOT / "sandbox-profiles"
    assert list_profiles() == ["default", "dev", "strict"]


def test_default_profile_values() -> None:
    p = load_profile("default")
    assert (p.name, p.runtime, p.user, p.network) == ("default", "runc", "65534:65534", "none")
    assert p.read_only_root and p.no_new_privileges and p.init and not p.allow_network
    assert (p.cap_drop, p.cap_add) == (("ALL",), ())
    assert (p.memory, p.cpus, p.pids, p.nofile) == (512 * MIB, 1.0, 256, 1024)
    assert (p.scratch_size, p.cancel_grace, p.exit_grace) == (256 * MIB, 2.0, 2.0)
    assert p.seccomp == ROOT / "sandbox-profiles" / "seccomp-components.json"
    assert p.seccomp_json is not None and p.allowed_mounts == ()
    assert (p.attachment_quota, p.disk_entries, p.disk_poll) == (1 << 30, 65536, 0.2)


def test_strict_profile_is_default_on_gvisor_but_tighter() -> None:
    default, strict = load_profile("default"), load_profile("strict")
    assert strict.runtime == "runsc"
    assert (strict.memory, strict.cpus, strict.pids, strict.scratch_size) == (
        256 * MIB,
        0.5,
        128,  # not 64: gVisor's threads count against it (sandbox-profiles/strict.toml)
        64 * MIB,
    )
    for key in ("user", "read_only_root", "network", "cap_drop", "no_new_privileges"):
        assert getattr(strict, key) == getattr(default, key), key


def test_dev_profile_has_a_writable_root_and_still_no_network() -> None:
    dev = load_profile("dev")
    assert not dev.read_only_root
    assert dev.memory == 2048 * MIB
    assert (dev.network, dev.allow_network, dev.cap_drop) == ("none", False, ("ALL",))


def test_disk_keys_are_validated_with_the_file_named(tmp_path: Path) -> None:
    quota = load_profile_file_text(tmp_path, 'attachment_quota = "2g"\n')
    assert quota.attachment_quota == 2 << 30
    with pytest.raises(ProfileError, match=r"attachment_quota.*write a size"):
        load_profile_file_text(tmp_path, 'attachment_quota = "lots"\n')
    with pytest.raises(ProfileError, match=r"disk_poll"):
        load_profile_file_text(tmp_path, "disk_poll = 0.001\n")


def load_profile_file_text(directory: Path, text: str) -> SandboxProfile:
    return load_profile(write_profile(directory, text))


@pytest.mark.parametrize("name", ["default", "dev", "strict"])
def test_every_shipped_profile_bounds_read_write_attachments(name: str) -> None:
    quota = load_profile(name).attachment_quota
    assert quota is not None and MIB <= quota <= 4 << 30


def test_a_profile_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        load_profile("default").memory = 1  # type: ignore[misc]


# --- shipped profiles read without the model, any other validated -----------------------


def test_the_shipped_digests_are_those_of_the_shipped_files() -> None:
    found = {hashlib.sha256(p.read_bytes()).hexdigest() for p in profiles_dir().glob("*.toml")}
    assert found == SHIPPED, "a shipped profile changed: put its new SHA-256 in SHIPPED"


@pytest.mark.parametrize("name", ["default", "dev", "strict"])
def test_a_shipped_profile_is_read_as_the_model_validates_it(name: str) -> None:
    path = profiles_dir() / f"{name}.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    data.setdefault("name", name)
    model = ProfileModel.model_validate(data, context={"base_dir": path.parent})
    shipped = load_profile(name)
    for key in ProfileModel.model_fields:
        value, expected = getattr(shipped, key), getattr(model, key)
        assert (value, type(value)) == (expected, type(expected)), key
    assert shipped.seccomp_json == model.seccomp_json is not None
    assert shipped.as_json() == model.model_dump(mode="json")


def test_an_edited_copy_of_a_shipped_profile_is_validated(tmp_path: Path) -> None:
    text = (profiles_dir() / "default.toml").read_text()
    (tmp_path / "seccomp-components.json").write_text("{}")
    path = write_profile(tmp_path, text.replace('network = "none"', 'network = "host"'))
    with pytest.raises(ProfileError, match=r"key 'network' = 'host' is refused"):
        load_profile(path)
    path = write_profile(tmp_path, text + 'memroy = "1g"\n')
    with pytest.raises(ProfileError, match=r"unknown key 'memroy'"):
        load_profile(path)


def test_a_copy_of_a_shipped_profile_elsewhere_reads_its_own_seccomp_file(tmp_path: Path) -> None:
    path = write_profile(tmp_path, (profiles_dir() / "default.toml").read_text())
    with pytest.raises(ProfileError, match=r"key 'seccomp': cannot read .*seccomp-components"):
        load_profile(path)  # the model says what is wrong, as for any file
    (tmp_path / "seccomp-components.json").write_text('{"defaultAction": "SCMP_ACT_LOG"}')
    assert load_profile(path).seccomp_json == '{"defaultAction":"SCMP_ACT_LOG"}'


def test_the_profile_value_and_the_model_have_the_same_keys_and_defaults() -> None:
    keys = {f.name: f.default for f in dataclasses.fields(SandboxProfile) if f.init}
    model = {key: info.default for key, info in ProfileModel.model_fields.items()}
    model["name"] = dataclasses.MISSING
    assert keys == model and list(keys) == list(model)


def test_a_profile_built_in_code_is_validated_by_the_model() -> None:
    assert SandboxProfile(name="x", memory="1g", cpus=2).memory == 1 << 30  # type: ignore[arg-type]
    with pytest.raises(
        ValidationError, match=r"for SandboxProfile\n.*network' = 'host' is refused"
    ):
        SandboxProfile(name="x", network="host")
    with pytest.raises(ValidationError, match="name"):
        SandboxProfile(name="Not A Name")


def test_a_run_of_the_default_profile_imports_no_pydantic() -> None:
    code = (
        "import sys; from runner.sandbox.profiles import load_profile, with_user\n"
        "load_profile('default'); load_profile('strict')\n"
        "assert 'pydantic' not in sys.modules, 'a shipped profile imported pydantic'\n"
        "with_user(load_profile('default'), '1000')\n"
        "assert 'pydantic' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --- loading and its errors -------------------------------------------------------------


def test_a_profile_loads_by_path_with_defaults_and_its_file_stem_as_name(tmp_path: Path) -> None:
    path = write_profile(tmp_path, 'memory = "1g"\ncpus = 2\n')
    profile = load_profile(str(path))
    assert (profile.name, profile.memory, profile.cpus) == ("mine", 1 << 30, 2.0)
    assert profile == load_profile(path)
    assert profile.pids == SandboxProfile(name="x").pids


def test_an_unknown_key_is_named_with_the_file(tmp_path: Path) -> None:
    path = write_profile(tmp_path, 'memroy = "1g"\n')
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    message = str(caught.value)
    assert str(path) in message
    assert "unknown key 'memroy'" in message
    assert "memory" in message  # the known keys are listed


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('memory = "5q"', "memory"),
        ('pids = "64"', "pids"),
        ('runtime = "crun"', "runtime"),
        ("cpus = 0", "cpus"),
        ('cap_add = ["net_admin"]', "cap_add.0"),
        ('user = "root; rm"', "user"),
    ],
)
def test_a_bad_value_is_named_with_its_key_and_the_file(
    tmp_path: Path, text: str, key: str
) -> None:
    path = write_profile(tmp_path, text + "\n")
    with pytest.raises(ProfileError, match=rf"{path}.*key '{key}'"):
        load_profile(path)


def test_toml_syntax_errors_name_the_file(tmp_path: Path) -> None:
    path = write_profile(tmp_path, 'memory = "1g\n')
    with pytest.raises(ProfileError, match=rf"{path} is not valid TOML"):
        load_profile(path)


def test_an_unknown_profile_name_lists_the_known_ones() -> None:
    with pytest.raises(
        ProfileError, match=r"no sandbox profile named 'nope'.*default, dev, strict"
    ):
        load_profile("nope")


@pytest.mark.parametrize(
    ("value", "size"),
    [("512m", 512 * MIB), ("2G", 2 << 30), ("64k", 64 << 10), ("100", 100), (4096, 4096)],
)
def test_sizes_are_docker_style_binary_units(value: object, size: int) -> None:
    assert parse_size(value) == size


def test_a_network_other_than_none_is_refused_unless_allowed_explicitly(tmp_path: Path) -> None:
    refused = write_profile(tmp_path, 'network = "bridge"\n', "refused")
    with pytest.raises(ProfileError, match=r"key 'network' = 'bridge' is refused.*allow_network"):
        load_profile(refused)
    allowed = write_profile(tmp_path, 'network = "bridge"\nallow_network = true\n', "allowed")
    assert load_profile(allowed).network == "bridge"


def test_a_seccomp_profile_is_inlined_from_a_path_relative_to_the_profile(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "seccomp.json").write_text(
        json.dumps({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": []}, indent=4)
    )
    profile = load_profile(write_profile(tmp_path, 'seccomp = "policies/seccomp.json"\n'))
    assert profile.seccomp == tmp_path / "policies" / "seccomp.json"
    assert profile.seccomp_json == '{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[]}'


def test_a_missing_seccomp_file_is_named(tmp_path: Path) -> None:
    path = write_profile(tmp_path, 'seccomp = "absent.json"\n')
    with pytest.raises(ProfileError, match=rf"{path}.*key 'seccomp'.*absent\.json"):
        load_profile(path)


def test_allowed_mounts_resolve_against_the_profile(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    profile = load_profile(write_profile(tmp_path, 'allowed_mounts = ["data", "/etc/ssl"]\n'))
    assert profile.allowed_mounts == (tmp_path / "data", Path("/etc/ssl").resolve())


# --- attachment specs -------------------------------------------------------------------


def test_an_attachment_is_read_only_unless_rw(tmp_path: Path) -> None:
    assert parse_attach(f"data={tmp_path}") == Attachment("data", tmp_path, "read")
    assert parse_attach(f"data={tmp_path}:ro").access == "read"
    assert parse_attach(f"out-1={tmp_path}:rw") == Attachment("out-1", tmp_path, "read-write")


def test_only_a_final_ro_or_rw_is_a_mode(tmp_path: Path) -> None:
    odd = tmp_path / "a:b"
    odd.mkdir()
    assert parse_attach(f"odd={odd}").host_path == odd
    assert parse_attach(f"odd={odd}:rw") == Attachment("odd", odd, "read-write")
    with pytest.raises(AttachmentError, match="only a final :ro or :rw is a mode"):
        parse_attach(f"odd={tmp_path}:readonly")


def test_the_host_path_is_resolved_through_symlinks(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert parse_attach(f"data={tmp_path}/link").host_path == tmp_path / "real"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("data", "has no '='"),
        ("data=", "has no host path"),
        ("Data=/tmp", "not a LocalName"),
        ("da--ta=/tmp", "not a LocalName"),
        (f"{'a' * 65}=/tmp", "not a LocalName"),
        ("data=/no/such/path", "does not exist"),
    ],
)
def test_malformed_specs_are_refused_with_the_spec(spec: str, message: str) -> None:
    with pytest.raises(AttachmentError, match=message) as caught:
        parse_attach(spec)
    assert repr(spec) in str(caught.value)


def test_an_attachment_built_in_code_is_held_to_the_same_names(tmp_path: Path) -> None:
    with pytest.raises(AttachmentError, match="not a LocalName"):
        check_attachment(Attachment("../etc", tmp_path))


def test_an_attachment_name_is_given_once(tmp_path: Path) -> None:
    with pytest.raises(AttachmentError, match="attached twice"):
        parse_attachments([f"data={tmp_path}", f"data={tmp_path}:rw"])


# --- the refusal list -------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A directory that looks like a home: it holds a .ssh directory with a key."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("secret")
    (tmp_path / "project").mkdir()
    (tmp_path / "etc-link").symlink_to("/etc")
    (tmp_path / "docker.sock").touch()
    return tmp_path


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/etc",
        "/etc/ssl",
        "/proc/self",
        "/sys",
        "/dev/null",
        "/boot",
        "/root",
        "/var/run/docker.sock",
        "/run/docker",
        "/var/run/docker",
        "/run/docker/containerd/containerd.sock",
        "/run/containerd",
        "/var/lib/docker",
        "/run",
        "/var",
        "HOME/etc-link",
        "HOME/.ssh",
        "HOME/.ssh/id_ed25519",
        "HOME",
        "HOME/docker.sock",
    ],
)
def test_host_paths_that_hand_over_the_host_are_refused(home: Path, path: str) -> None:
    target = Path(path.replace("HOME", str(home)))
    if not target.exists():
        pytest.skip(f"{target} does not exist on this machine")
    with pytest.raises(AttachmentError, match=r"'bad=.*' is refused: .*allowed_mounts"):
        check_attachment(parse_attach(f"bad={target}"))


def test_ordinary_directories_are_attached(home: Path) -> None:
    check_attachments([parse_attach(f"src={home}/project:rw")], ())


def test_allowed_mounts_let_a_refused_path_through_and_nothing_wider() -> None:
    allowed = (Path("/etc/ssl"),)
    check_attachment(parse_attach("certs=/etc/ssl/certs"), allowed)
    with pytest.raises(AttachmentError, match="refused"):
        check_attachment(parse_attach("conf=/etc"), allowed)


@pytest.mark.parametrize("user", ["0:0", "0:65534", "65534:0", "0", "root", "root:root", "1000"])
def test_root_or_ids_the_image_decides_are_refused_unless_allow_root(
    tmp_path: Path, user: str
) -> None:
    path = write_profile(tmp_path, f'user = "{user}"\n')
    with pytest.raises(ProfileError, match=rf"{path}: key 'user' = '{user}'.*allow_root = true"):
        load_profile(path)
    allowed = write_profile(tmp_path, f'user = "{user}"\nallow_root = true\n', name="root")
    assert load_profile(allowed).user == user


def test_a_numeric_unprivileged_user_is_accepted(tmp_path: Path) -> None:
    assert load_profile(write_profile(tmp_path, 'user = "1000:1000"\n')).user == "1000:1000"


# --- what an attached path is, not what it is called ------------------------------------


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    """A listening unix socket in tmp, as an engine's would be."""
    path = tmp_path / "engine.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        yield path


def test_a_hard_link_to_a_socket_is_refused_by_type_under_any_name(
    tmp_path: Path, unix_socket: Path
) -> None:
    link = tmp_path / "data.bin"
    os.link(unix_socket, link)
    with pytest.raises(AttachmentError, match=rf"{link} is a unix socket"):
        check_attachment(parse_attach(f"data={link}"))


def test_a_device_node_outside_dev_is_refused(tmp_path: Path) -> None:
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    with pytest.raises(AttachmentError, match=rf"{node} is a device node"):
        check_attachment(parse_attach(f"dev={node}"))


def test_a_socket_or_device_inside_a_directory_is_refused(
    tmp_path: Path, unix_socket: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    os.link(unix_socket, tree / "a" / "b" / "innocent")
    with pytest.raises(AttachmentError, match=rf"holds {tree}/a/b/innocent, which is a unix"):
        check_attachment(parse_attach(f"tree={tree}"))
    (tree / "a" / "b" / "innocent").unlink()
    os.mknod(tree / "a" / "disk", stat.S_IFBLK | 0o600, os.makedev(7, 0))
    with pytest.raises(AttachmentError, match=rf"holds {tree}/a/disk, which is a device node"):
        check_attachment(parse_attach(f"tree={tree}"))


def test_the_scan_inside_a_directory_is_bounded_breadth_first(
    tmp_path: Path, unix_socket: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    (tree / "deep").mkdir(parents=True)
    for name in ("f1", "f2", "f3"):
        (tree / name).touch()
    os.link(unix_socket, tree / "deep" / "sock")
    monkeypatch.setattr(attachments, "SCAN_LIMIT", 5)  # 4 entries above, then the socket
    with pytest.raises(AttachmentError, match="deep/sock, which is a unix socket"):
        check_attachment(parse_attach(f"tree={tree}"))
    monkeypatch.setattr(attachments, "SCAN_LIMIT", 4)  # the documented limit: not seen
    check_attachment(parse_attach(f"tree={tree}"))


def test_a_path_anyone_else_could_swap_before_the_mount_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "data").mkdir(parents=True)
    shared.chmod(0o777)  # e.g. a read-write attachment a component could write
    with pytest.raises(AttachmentError, match=rf"parent directory, {shared}, that users other"):
        check_attachment(parse_attach(f"data={shared}/data"))
    check_attachment(parse_attach(f"shared={shared}:rw"))  # the directory itself is fine
    shared.chmod(0o1777)  # sticky, like /tmp: only the entry's owner may swap it
    check_attachment(parse_attach(f"data={shared}/data"))
    os.chown(shared / "data", 65534, 65534)
    with pytest.raises(AttachmentError, match="parent directory"):
        check_attachment(parse_attach(f"data={shared}/data"))


def test_a_path_swapped_for_a_symlink_after_it_was_judged_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    held = attachments.hold(parse_attach(f"data={data}"))
    try:
        data.rename(tmp_path / "moved")
        data.symlink_to("/run")
        with pytest.raises(AttachmentError, match=rf"{data} changed after it was checked"):
            held.recheck()
    finally:
        held.close()


def _shared_with_a_link(tmp_path: Path) -> tuple[Path, Path]:
    """``work``, writable by everyone (as a read-write attachment is, for its component),
    and ``secret``, a directory only we can change."""
    work, secret = tmp_path / "work", tmp_path / "secret"
    work.mkdir()
    work.chmod(0o777)
    secret.mkdir()
    return work, secret


def test_a_symlink_others_can_change_on_the_way_is_refused(tmp_path: Path) -> None:
    """A component with ``work`` attached read-write plants ``work/in -> ../secret``; a
    later run attaching ``work/in`` (a child flow's, a batch row's, a ``--scratch``) must
    not be given ``secret``, which judged alone looks trusted."""
    work, secret = _shared_with_a_link(tmp_path)
    (work / "in").symlink_to("../secret")
    with pytest.raises(AttachmentError, match=rf"goes through the symlink {work}/in"):
        parse_attach(f"in={work}/in")
    with pytest.raises(AttachmentError, match="symlink"):
        parse_attach(f"in={work}/in/../secret")
    assert parse_attach(f"secret={secret}").host_path == secret  # by its own path: yes
    (tmp_path / "ours").symlink_to("secret")  # a link in a directory only we can change
    assert parse_attach(f"ours={tmp_path}/ours").host_path == secret


def test_a_symlink_planted_after_the_parse_is_judged_when_the_path_is_held(
    tmp_path: Path,
) -> None:
    """Parsed while ``work/in`` was a directory, held after the component swapped it
    for a link to ``secret``: the hold judges the link, not only where it leads."""
    work, _ = _shared_with_a_link(tmp_path)
    (work / "in").mkdir()
    parsed = parse_attach(f"in={work}/in")
    (work / "in").rmdir()
    (work / "in").symlink_to("../secret")
    with pytest.raises(AttachmentError, match="goes through the symlink"):
        attachments.hold(parsed).close()


def test_an_attachment_name_with_a_trailing_newline_is_not_a_local_name(tmp_path: Path) -> None:
    with pytest.raises(AttachmentError, match="not a LocalName"):
        parse_attach(f"abc\n={tmp_path}")
    with pytest.raises(AttachmentError, match="not a LocalName"):
        check_attachment(Attachment("abc\n", tmp_path))


def test_at_most_256_attachments(tmp_path: Path) -> None:
    specs = [f"a{i}={tmp_path}" for i in range(257)]
    assert len(parse_attachments(specs[:256])) == 256
    with pytest.raises(AttachmentError, match=r"257 attachments given.*at most 256"):
        parse_attachments(specs)


def test_a_profile_name_with_a_trailing_newline_is_not_a_name() -> None:
    with pytest.raises(ProfileError, match="neither a profile name"):
        load_profile("default\n")
