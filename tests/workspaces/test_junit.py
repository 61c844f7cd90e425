"""The land check's JUnit report: test ids and failures read, hostile XML refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.errors import WorkspaceError
from squadd.workspaces.junit import parse_report, read_report

REPORT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" tests="4">
<testcase classname="tests.test_calc" name="test_add" time="0.001"/>
<testcase classname="tests.test_calc" name="test_sub" time="0.001">
  <failure message="assert 1 == 2">tests/test_calc.py:7: AssertionError</failure></testcase>
<testcase classname="tests.test_calc" name="test_div[0]"><error message="boom"/></testcase>
<testcase classname="tests.test_calc" name="test_skip"><skipped message="later"/></testcase>
</testsuite></testsuites>
"""


def test_a_report_names_every_test_and_the_failing_and_erring_ones() -> None:
    report = parse_report(REPORT)
    assert report.tests == {"tests.test_calc::test_add", "tests.test_calc::test_sub",
                            "tests.test_calc::test_div[0]", "tests.test_calc::test_skip"}
    assert report.failing == {"tests.test_calc::test_sub", "tests.test_calc::test_div[0]"}


def test_a_report_written_by_pytest_is_read(tmp_path: Path) -> None:
    import subprocess
    import sys
    (tmp_path / "test_it.py").write_text("def test_ok():\n    pass\n\n"
                                         "def test_bad():\n    assert 1 == 2\n")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--junitxml=out.xml", "test_it.py"], cwd=tmp_path, capture_output=True,
                   check=False, timeout=120)
    report = read_report(tmp_path / "out.xml")
    assert report.tests == {"test_it::test_ok", "test_it::test_bad"}
    assert report.failing == {"test_it::test_bad"}


@pytest.mark.parametrize("hostile", [
    b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
    b"<testsuite><testcase name='&b;'/></testsuite>",
    b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    b"<testsuite><testcase name='&x;'/></testsuite>",
    b'<!DOCTYPE testsuite SYSTEM "http://127.0.0.1:9/evil.dtd"><testsuite/>',
])
def test_a_report_that_declares_a_doctype_or_entities_is_refused(hostile: bytes) -> None:
    with pytest.raises(WorkspaceError, match="document type"):
        parse_report(hostile, where="report.xml")


def test_a_missing_or_broken_report_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="wrote no report"):
        read_report(tmp_path / "none.xml")
    (tmp_path / "bad.xml").write_text("<testsuite><testcase name='x'>")
    with pytest.raises(WorkspaceError, match="not well-formed"):
        read_report(tmp_path / "bad.xml")
