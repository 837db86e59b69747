"""Try system calls no component needs and ordinary Python work; print one JSON line.

Run in the fake-component image as ``python3 -c SOURCE`` (tests/test_seccomp.py). Each
call is made through ctypes ``syscall`` with harmless arguments and reported as ``"ok"``
(it returned a descriptor or 0) or the errno's name. ``work`` reports whether threads,
fork, subprocess, multiprocessing and asyncio still run.
"""

import asyncio
import ctypes
import errno
import json
import multiprocessing
import os
import platform
import subprocess
import threading

NUMBERS = {
    "x86_64": {
        "io_uring_setup": 425,
        "keyctl": 250,
        "bpf": 321,
        "unshare": 272,
        "mount": 165,
        "userfaultfd": 323,
        "perf_event_open": 298,
        "ptrace": 101,
        "setns": 308,
        "personality": 135,
        "chroot": 161,
        "clone3": 435,
    },
    "aarch64": {
        "io_uring_setup": 425,
        "keyctl": 219,
        "bpf": 280,
        "unshare": 97,
        "mount": 40,
        "userfaultfd": 282,
        "perf_event_open": 241,
        "ptrace": 117,
        "setns": 268,
        "personality": 92,
        "chroot": 51,
        "clone3": 435,
    },
}
CLONE_NEWUSER = 0x10000000
PTRACE_PEEKDATA = 2  # of pid 1, not attached: ESRCH where ptrace is allowed
KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING = 0, -3
buffer = ctypes.create_string_buffer(256)  # zeroed parameter blocks
ARGS = {
    "io_uring_setup": (1, buffer),
    "keyctl": (KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0),
    "bpf": (0, buffer, 72),  # BPF_MAP_CREATE with an empty attribute block
    "unshare": (CLONE_NEWUSER,),
    "mount": (b"none", b"/tmp", b"tmpfs", 0, None),
    "userfaultfd": (0,),
    "perf_event_open": (buffer, 0, -1, -1, 0),
    "ptrace": (PTRACE_PEEKDATA, 1, 0, 0),  # never ATTACH: a stopped init hangs the run
    "setns": (0, CLONE_NEWUSER),  # fd 0 is no namespace: EINVAL where the call is allowed
    "personality": (0x0040000,),  # ADDR_COMPAT_LAYOUT: not one of the harmless values
    "chroot": (b"/tmp",),
    "clone3": (buffer, 88),
}

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = {}
for name, number in NUMBERS[platform.machine()].items():
    ctypes.set_errno(0)
    returned = libc.syscall(number, *ARGS[name])
    code = ctypes.get_errno()
    calls[name] = "ok" if returned >= 0 else errno.errorcode.get(code, str(code))


def work() -> dict[str, object]:
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    forked = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    ran = subprocess.run(["sh", "-c", "echo hi"], capture_output=True, text=True, check=True)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        squares = pool.map(abs, [-2, -3])

    async def spawn() -> int:
        process = await asyncio.create_subprocess_exec("true")
        return await process.wait()

    return {
        "fork": forked,
        "subprocess": ran.stdout.strip(),
        "pool": squares,
        "asyncio": asyncio.run(spawn()),
    }


print(json.dumps({"calls": calls, "work": work()}))
