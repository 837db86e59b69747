"""The run report's JSON text (``exec --report``, ``job``, the batch store's ``report``):
its members in the file's order, ``unsandboxed`` last, text as UTF-8, and floats under
1e-4 spelled as the report's files spell them (``0.00001``, ``1.5e-6``)."""

from __future__ import annotations

import json

from runner.report import ReportedError, ReportedPackage, RunReport, SandboxLoss

CHILD = RunReport(run_id="c", target="child", backend="process", status="succeeded")
REPORT = RunReport(
    run_id="r",
    target="img",
    backend="docker",
    package=ReportedPackage("p", "sha256:0", "sha256:1"),
    status="failed",
    outcome=None,
    error=ReportedError("X", 'é "q" 3.5e-05 \u2028', {"n": [1e-5, -2.5e-7, 1e16, 0.0001]}),
    reasons=["a"],
    lost=SandboxLoss("engine", "cleanup", 1.5e-06, "cid", True),
    timings={"start": 0.5, "cleanup": 3.744599996480247e-05},
    children=[CHILD],
)


def test_the_report_file_is_written_as_it_always_reads() -> None:
    expected = """{
  "run_id": "r",
  "target": "img",
  "backend": "docker",
  "package": {
    "name": "p",
    "digest": "sha256:0",
    "source": "sha256:1"
  },
  "status": "failed",
  "outcome": null,
  "error": {
    "code": "X",
    "message": "é \\"q\\" 3.5e-05 \u2028",
    "details": {
      "n": [
        0.00001,
        -2.5e-7,
        1e+16,
        0.0001
      ]
    }
  },
  "reasons": [
    "a"
  ],
  "exit_code": null,
  "oom_killed": false,
  "host_kill": null,
  "condition": null,
  "lost": {
    "what": "engine",
    "step": "cleanup",
    "seconds": 1.5e-6,
    "container_id": "cid",
    "container_left": true
  },
  "timings": {
    "start": 0.5,
    "cleanup": 0.00003744599996480247
  },
  "pooled": false,
  "bytes_from_component": 0,
  "bytes_to_component": 0,
  "component_requests": 0,
  "dispatches": 0,
  "stderr_bytes": 0,
  "stderr_truncated": false,
  "stderr": "",
  "children": [
    {
      "run_id": "c",
      "target": "child",
      "backend": "process",
      "package": null,
      "status": "succeeded",
      "outcome": null,
      "error": null,
      "reasons": [],
      "exit_code": null,
      "oom_killed": false,
      "host_kill": null,
      "condition": null,
      "lost": null,
      "timings": {},
      "pooled": false,
      "bytes_from_component": 0,
      "bytes_to_component": 0,
      "component_requests": 0,
      "dispatches": 0,
      "stderr_bytes": 0,
      "stderr_truncated": false,
      "stderr": "",
      "children": [],
      "children_omitted": 0,
      "unsandboxed": true
    }
  ],
  "children_omitted": 0,
  "unsandboxed": false
}"""
    assert REPORT.dumps() == expected


def test_the_one_line_form_is_the_same_json_without_spaces() -> None:
    line = REPORT.dumps(indent=None)
    assert "\n" not in line and ", " not in line.replace('\\"q\\" ', "")
    assert json.loads(line) == json.loads(REPORT.dumps())
    assert '"cleanup":0.00003744599996480247' in line and '"seconds":1.5e-6' in line
