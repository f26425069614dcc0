"""`--junitxml` written test by test: the same document as pytest's own writer, without holding
every test's XML element until the session ends.

pytest's LogXML keeps, for every test, its `testcase` element (with its properties, skip reason
or failure text) in a list, and at the session's end serializes the whole tree as one string.
At 4096 nodes (190,000 items) that is several hundred MB held for the session, then a string of
the whole file and its pieces at once.  Here each test's element is serialized when pytest
finalizes it and appended to an anonymous spool file; the list keeps a small record per test
(where its text lies in the spool), and the session's end writes the document by streaming from
the spool, in pytest's order.

Only LogXML's serialization moves: what goes into each element (properties, failures, captured
output, durations) is pytest's own code.  pytest offers no public way to change how the file is
written (core/pytestprivate.py says what this relies on); where its LogXML lacks it (a future
pytest), its own writer is left in place (`install`)."""

from __future__ import annotations

import os
import platform
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import IO, Any

import pytest

from cluster_tests.core.pytestprivate import (
    JUNIT_INI,
    LOG_XML,
    LOG_XML_ATTRS,
    LOG_XML_METHODS,
    junit_global_properties,
    junit_writer,
    replace_junit_writer,
)

#: marks where the test cases go inside the serialized <testsuite> element
_CASES = "CT_JUNIT_CASES_GO_HERE"


class _Spooled:
    """A finalized test's element, as text in the spool: (start, length) in bytes."""

    __slots__ = ("start", "length")

    def __init__(self, start: int, length: int) -> None:
        self.start = start
        self.length = length


_escape_cdata = getattr(ET, "_escape_cdata", None)
_escape_attrib = getattr(ET, "_escape_attrib", None)


def serialized(elem: ET.Element) -> str:
    """`ET.tostring(elem, encoding="unicode")`, written directly for a tree of plain elements
    (what pytest's reporter builds: string tags and attributes, no namespace), with
    ElementTree's own escaping: its writer's set-up (a tree, a buffer, a namespace pass) cost
    more than the test case's text.  Anything else goes to ElementTree."""
    out: list[str] = []
    try:
        _write(elem, out.append)
    except _NotPlain:
        return ET.tostring(elem, encoding="unicode")
    return "".join(out)


class _NotPlain(Exception):
    """An element `_write` leaves to ElementTree."""


def _write(elem: ET.Element, write: Callable[[str], object]) -> None:
    """ElementTree's _serialize_xml for a plain element (short empty elements), tail and all."""
    tag, text = elem.tag, elem.text
    if type(tag) is not str or "{" in tag or _escape_cdata is None or _escape_attrib is None:
        raise _NotPlain
    write("<" + tag)
    for k, v in elem.items():
        if type(k) is not str or type(v) is not str or "{" in k:
            raise _NotPlain
        write(f' {k}="{_escape_attrib(v)}"')
    if text or len(elem):
        write(">")
        if text:
            write(_escape_cdata(text))
        for child in elem:
            _write(child, write)
        write("</" + tag + ">")
    else:
        write(" />")
    if elem.tail:
        write(_escape_cdata(elem.tail))


def streaming_class() -> type | None:
    """The LogXML subclass, or None where pytest's LogXML is not what it was written for."""
    if LOG_XML is None or not all(hasattr(LOG_XML, n) for n in LOG_XML_METHODS):
        return None

    class StreamingLogXML(LOG_XML):  # type: ignore[valid-type,misc]
        _spool: IO[bytes] | None = None

        def __init__(self, *args: object) -> None:
            super().__init__(*args)
            #: a live reporter's place in node_reporters_ordered, until it is finalized
            self._index: dict[int, int] = {}

        def node_reporter(self, report: pytest.TestReport) -> Any:
            n = len(self.node_reporters_ordered)
            reporter = super().node_reporter(report)
            if len(self.node_reporters_ordered) > n:  # created now, in the file's order
                self._index[id(reporter)] = n
            return reporter

        def finalize(self, report: pytest.TestReport) -> None:
            workernode = getattr(report, "node", None)
            reporter = self.node_reporters.pop((report.id, workernode))
            for propname, propvalue in report.user_properties:
                reporter.add_property(propname, str(propvalue))
            data = serialized(reporter.to_xml()).encode("utf-8")
            if self._spool is None:
                self._spool = tempfile.TemporaryFile(prefix="ct-junit-")
            start = self._spool.seek(0, os.SEEK_END)
            self._spool.write(data)
            # the test's place in the file now holds where its text is, not its element
            ordered: list[Any] = self.node_reporters_ordered
            ordered[self._index.pop(id(reporter))] = _Spooled(start, len(data))

        def pytest_sessionfinish(self) -> None:
            _write_document(self, self._spool)
            if self._spool is not None:
                self._spool.close()
                self._spool = None

    return StreamingLogXML


def _write_document(xml: Any, spool: IO[bytes] | None) -> None:
    """LogXML.pytest_sessionfinish's document, each test's text read back from the spool."""
    os.makedirs(os.path.dirname(os.path.abspath(xml.logfile)), exist_ok=True)
    head, tail = _suite_frame(xml)
    with open(xml.logfile, "w", encoding="utf-8") as logfile:
        logfile.write('<?xml version="1.0" encoding="utf-8"?>')
        logfile.write(head)
        global_properties = junit_global_properties(xml)
        if global_properties is not None:
            logfile.write(ET.tostring(global_properties, encoding="unicode"))
        for entry in xml.node_reporters_ordered:
            if isinstance(entry, _Spooled):
                assert spool is not None
                spool.seek(entry.start)
                logfile.write(spool.read(entry.length).decode("utf-8"))
            else:  # never finalized (a collection error, an internal error)
                logfile.write(ET.tostring(entry.to_xml(), encoding="unicode"))
        logfile.write(tail)


def _suite_frame(xml: Any) -> tuple[str, str]:
    """The <testsuites><testsuite ...> text before the test cases, and after them."""
    duration = xml.suite_start.elapsed()
    stats = xml.stats
    numtests = (stats["passed"] + stats["failure"] + stats["skipped"] + stats["error"]
                - xml.cnt_double_fail_tests)
    suite_node = ET.Element(
        "testsuite", name=xml.suite_name, errors=str(stats["error"]),
        failures=str(stats["failure"]), skipped=str(stats["skipped"]),
        tests=str(numtests), time=f"{duration.seconds:.3f}",
        timestamp=xml.suite_start.as_utc().astimezone().isoformat(),
        hostname=platform.node())
    suite_node.text = _CASES
    testsuites = ET.Element("testsuites")
    testsuites.set("name", "pytest tests")
    testsuites.append(suite_node)
    head, _, tail = ET.tostring(testsuites, encoding="unicode").partition(_CASES)
    return head, tail


def install(config: pytest.Config) -> bool:
    """Put the streaming writer in place of pytest's LogXML, built from the same settings (after
    pytest's junitxml plugin configured its own, before the session starts).  False where
    nothing changed."""
    xml = junit_writer(config)
    cls = streaming_class()
    if (cls is None or type(xml) is not LOG_XML or not all(hasattr(xml, n) for n in LOG_XML_ATTRS)
            or getattr(xml, "node_reporters_ordered", None)
            or getattr(xml, "global_properties", None)):
        return False
    new = cls(config.option.xmlpath, config.option.junitprefix,
              *(config.getini(name) for name in JUNIT_INI))
    replace_junit_writer(config, xml, new)
    return True


class Installer:
    """The plugin that puts the streaming writer in place (:func:`install`): --junitxml (on by
    default: reports/junit.xml) written test by test."""

    NAME = "cluster_tests_junit"

    @pytest.hookimpl(trylast=True)  # after pytest's junitxml plugin made its writer
    def pytest_configure(self, config: pytest.Config) -> None:
        install(config)
