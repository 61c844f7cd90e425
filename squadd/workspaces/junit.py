"""Reading a land check's JUnit XML report: the ids of the tests that ran and of those that failed.

The report is written by the project's own test suite, so it is untrusted input: it is read
with expat directly, and a document type declaration (where entities, external or expanding,
would be declared) is refused outright, as is a file past `MAX_REPORT_BYTES`.
"""

from __future__ import annotations

import xml.parsers.expat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squadd.errors import WorkspaceError

MAX_REPORT_BYTES = 64 << 20
"""Largest report read (a suite of a hundred thousand tests writes a few MB)."""
MAX_TESTS = 1_000_000


@dataclass
class TestReport:
    """The tests a report names, by id (`classname::name`), and those that failed or erred."""

    __test__ = False  # not a pytest test class

    tests: set[str] = field(default_factory=set)
    failing: set[str] = field(default_factory=set)


class _Refused(Exception):
    pass


def parse_report(data: bytes, *, where: str = "the report") -> TestReport:
    """The tests of a JUnit XML document (`WorkspaceError` naming `where` when it is not one,
    or declares a document type)."""
    if len(data) > MAX_REPORT_BYTES:
        raise WorkspaceError(f"{where} is {len(data)} bytes, over {MAX_REPORT_BYTES}: not read")
    report = TestReport()
    current: list[str | None] = [None]  # the id of the <testcase> being read
    parser = xml.parsers.expat.ParserCreate()

    def refuse(*_: object) -> Any:
        raise _Refused("it declares a document type or entities, which a JUnit report never "
                       "needs")

    def start(tag: str, attrs: dict[str, str]) -> None:
        if tag == "testcase":
            name, classname = attrs.get("name", ""), attrs.get("classname", "")
            test_id = f"{classname}::{name}" if classname else name
            current[0] = test_id
            if len(report.tests) >= MAX_TESTS:
                raise _Refused(f"it names over {MAX_TESTS} tests")
            report.tests.add(test_id)
        elif tag in ("failure", "error") and current[0] is not None:
            report.failing.add(current[0])

    def end(tag: str) -> None:
        if tag == "testcase":
            current[0] = None

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.UnparsedEntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except _Refused as exc:
        raise WorkspaceError(f"{where} is refused: {exc}") from None
    except xml.parsers.expat.ExpatError as exc:
        raise WorkspaceError(f"{where} is not well-formed XML: {exc}") from None
    return report


def read_report(path: Path) -> TestReport:
    """The report at `path` (`WorkspaceError` when missing, too large or not JUnit XML)."""
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise WorkspaceError(f"the check's report {path} is {size} bytes, over "
                                 f"{MAX_REPORT_BYTES}: not read")
        data = path.read_bytes()
    except FileNotFoundError:
        raise WorkspaceError(f"the check wrote no report at {path}") from None
    except OSError as exc:
        raise WorkspaceError(f"cannot read the check's report {path}: {exc}") from None
    return parse_report(data, where=f"the check's report {path}")
