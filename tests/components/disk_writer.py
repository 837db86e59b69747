"""A Run/1 component that fills a directory (standard library only, Python 3.11).

Run in the fake-component image as ``python3 -c SOURCE`` (tests/test_disk_bounds.py), so
it needs no image rebuild. Its input says where and how much:
``{"into": "scratch" | ATTACHMENT, "mib": N, "files": M}`` writes N MiB in 1 MiB blocks to
one file, then M empty files, and answers with what it wrote and the first error it met
(``ENOSPC`` from a bounded tmpfs, for example). A host-side disk bound kills it instead.
"""

import errno
import json
import os
import sys

root = json.loads(sys.stdin.readline())
params = root["params"]
spec = params["input"]
into = spec["into"]
directory = params["scratch"] if into == "scratch" else params["attachments"][into]["path"]
block = b"x" * (1 << 20)
written = files = 0
failure = None
try:
    with open(os.path.join(directory, "big"), "wb") as f:
        for _ in range(spec.get("mib", 0)):
            f.write(block)
            f.flush()
            written += len(block)
    for index in range(spec.get("files", 0)):
        with open(os.path.join(directory, f"f{index}"), "wb"):
            files += 1
except OSError as exc:
    failure = errno.errorcode.get(exc.errno or 0, str(exc.errno))
output = {"written": written, "files": files, "error": failure}
result = {"outcome": "done", "output": output}
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": root["id"], "result": result}) + "\n")
