"""JUnit XML from the store, as Jenkins, GitLab and GitHub read it: a ``testsuite`` per
manifest, a ``testcase`` per row (``classname`` the manifest, ``name`` the row id); a
failed run a ``failure`` (its code and first line; the stderr tail), an infra-failed one
an ``error``, a row without a final result ``skipped``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from runner.outputs import write_output

from .store import FAILED, INFRA_FAILED, Store


def write_junit(store: Store, path: Path, manifest: str | None = None) -> None:
    """Write the store's rows (of ``manifest``, or all) as JUnit XML to ``path``, whole or
    not at all (:func:`runner.outputs.write_output`)."""
    suites = ET.Element("testsuites", name="flow-runner batch")
    tallies: dict[ET.Element, Counter[str]] = {suites: Counter()}
    current: ET.Element | None = None
    where, params = ("manifest = ?", (manifest,)) if manifest is not None else ("1", ())
    for row in store.rows(where, params):
        if current is None or current.get("name") != row["manifest"]:
            current = ET.SubElement(suites, "testsuite", name=row["manifest"])
            tallies[current] = Counter()
        case = ET.SubElement(
            current, "testcase", classname=row["manifest"], name=row["id"],
            time=f"{row['seconds'] or 0:.3f}",
        )  # fmt: skip
        props = ET.SubElement(case, "properties")
        for name in ("key", "image_id", "outcome", "attempts", "run_id"):
            if row[name] is not None:
                ET.SubElement(props, "property", name=name, value=str(row[name]))
        kind = "tests"
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
        for tally in (tallies[current], tallies[suites]):
            tally.update({"tests": 1, kind: 1, "time": row["seconds"] or 0})
    for element, tally in tallies.items():
        for name in ("tests", "failures", "errors", "skipped"):
            element.set(name, str(int(tally[name])))
        element.set("time", f"{tally['time']:.3f}")
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
