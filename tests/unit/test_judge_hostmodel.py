"""judge/hostfile/hostmodel.py: section H's shared model, as the parse, the lint and the node
lists use it: a Finding reads as the line to write (or to remove), text from the file is shown
escaped and shortened, and H's causes are words."""

from __future__ import annotations

import json

from cluster_tests.judge.hostfile.hostmodel import (
    EXAMPLE_LINE,
    WARNING,
    Finding,
    HostfileCause,
    example,
    show,
)
from cluster_tests.judge.problem import Problem


def test_a_finding_says_where_what_and_the_line_to_write() -> None:
    f = Finding("hf", 2, 14, WARNING, "H1-trailing-space", "trailing whitespace", "node2 slots=8")
    assert str(f) == "hf:2:14: warning: trailing whitespace; write: 'node2 slots=8'"
    gone = Finding("hf", 3, 1, "error", "H1-duplicate", "host twice", None)
    assert str(gone).endswith("; remove the line")


def test_text_from_the_file_is_shown_inert_and_short() -> None:
    assert show("node9\x1b[2J") == "'node9\\x1b[2J'"
    long = show("x" * 200, limit=10)
    assert long == "'xxxxxxxxxx'... (200 characters)"
    assert example() == f"expected lines like '{EXAMPLE_LINE}'"


def test_a_cause_travels_as_its_words() -> None:
    """A red's cause goes through JSON (pytest-xdist, JUnit) as the enum's value."""
    p = Problem((), HostfileCause.REFUSED, "the hostfile will not launch as it is:", item="H1")
    back = Problem.from_json(p.to_json())
    assert back is not None and back.cause == HostfileCause.REFUSED == "hostfile will not launch"
    assert json.loads(p.to_json())["cause"] == "hostfile will not launch"
