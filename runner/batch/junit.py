"""JUnit XML from the store, as Jenkins, GitLab and GitHub read it: a ``testsuite`` per
manifest, a ``testcase`` per row (``classname`` the manifest, ``name`` the row id); a
failed run a ``failure`` (its code and first line; the stderr tail), an infra-failed one
an ``error``, a row without a final result ``skipped``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from runner.outputs import write_output

from .store import FAILED, INFRA_FAILED, Store


def write_junit(store: Store, path: Path, manifest: str | None = None) -> None:
    """Write the store's rows (of ``manifest``, or all) as JUnit XML to ``path``, whole or
    not at all (:func:`runner.outputs.write_output`)."""
    suites = ET.Element("testsuites", name="flow-runner batch")
    current: ET.Element | None = None
    where, params = ("manifest = ?", (manifest,)) if manifest is not None else ("1", ())
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    seconds = 0.0
    for row in store.rows(where, params):
        if current is None or current.get("name") != row["manifest"]:
            current = ET.SubElement(suites, "testsuite", name=row["manifest"])
            _init(current)
        case = ET.SubElement(
            current, "testcase", classname=row["manifest"], name=row["id"],
            time=f"{row['seconds'] or 0:.3f}",
        )  # fmt: skip
        props = ET.SubElement(case, "properties")
        for name in ("key", "image_id", "outcome", "attempts", "run_id"):
            if row[name] is not None:
                ET.SubElement(props, "property", name=name, value=str(row[name]))
        kind = None
        if row["state"] != "done":
            kind = "skipped"
            ET.SubElement(
                case, "skipped", message=f"not finished ({row['status'] or row['state']})"
            )
        elif row["status"] in (FAILED, INFRA_FAILED):
            kind = "failures" if row["status"] == FAILED else "errors"
            first = (row["error_message"] or "").strip().partition("\n")[0]
            element = ET.SubElement(
                case, "failure" if row["status"] == FAILED else "error",
                message=f"{row['error_code']}: {first}", type=row["error_code"] or "",
            )  # fmt: skip
            element.text = row["stderr_tail"] or row["error_message"] or ""
        _add(current, "tests")
        if kind is not None:
            _add(current, kind)
        current.set("time", f"{float(current.get('time', '0')) + (row['seconds'] or 0):.3f}")
    for suite in suites:
        for name in totals:
            totals[name] += int(suite.get(name, "0"))
        seconds += float(suite.get("time", "0"))
    for name, value in totals.items():
        suites.set(name, str(value))
    suites.set("time", f"{seconds:.3f}")
    for element in suites.iter():  # a component chose the messages and the stderr
        if element.text:
            element.text = xml_safe(element.text)
        for attribute, text in element.attrib.items():
            element.set(attribute, xml_safe(text))
    ET.indent(suites)
    write_output(path, ET.tostring(suites, encoding="utf-8", xml_declaration=True))


_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    """``text`` with each character XML 1.0 cannot hold (an ANSI colour code, a NUL)
    spelled as ``\\xNN`` or ``\\uNNNN``: written raw, it makes a reporter reject the file."""
    return _NOT_XML.sub(lambda found: found.group().encode("unicode_escape").decode(), text)


def _init(suite: ET.Element) -> None:
    for name in ("tests", "failures", "errors", "skipped"):
        suite.set(name, "0")
    suite.set("time", "0")


def _add(suite: ET.Element, name: str) -> None:
    suite.set(name, str(int(suite.get(name, "0")) + 1))
