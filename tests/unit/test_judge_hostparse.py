"""judge/hostfile/hostparse.py: the hostfile parsed as DeepSpeed 0.19 parses it (equal to its own
parser on every edge case and on generated files), each line linted on its own, and H1's red."""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import REPO

from cluster_tests.core.nodelist import load_hostfile
from cluster_tests.judge.hostfile import hostparse as hf
from cluster_tests.judge.hostfile.hostmodel import Host, HostfileCause
from cluster_tests.judge.hostfile.hostparse import (
    HostfileParse,
    deepspeed_parse_lines,
    parse_hostfile_text,
    split_lines,
)

runner = pytest.importorskip("deepspeed.launcher.runner")

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# --------------------------------------------------------------------------- helpers


def ds_fetch(text: str) -> tuple[OrderedDict[str, int] | None, str | None]:
    """DeepSpeed end to end: the text written to a real file, read by fetch_hostfile."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hostfile")
        with open(path, "wb") as fd:
            fd.write(text.encode("utf-8"))
        try:
            return runner.fetch_hostfile(path), None
        except ValueError as exc:
            return None, str(exc)


def assert_same_as_deepspeed(text: str) -> HostfileParse:
    ours = parse_hostfile_text(text)
    resources, error = ds_fetch(text)
    assert ours.deepspeed_accepts == (error is None), (text, error)
    assert ours.deepspeed_error == error
    if resources is not None:
        assert ours.deepspeed_resources == resources
        assert list(ours.deepspeed_resources.items()) == list(resources.items())  # order too
    else:
        assert ours.deepspeed_resources is None
    # whenever DeepSpeed refuses the file, our lint has an error to show for it
    if not ours.deepspeed_accepts:
        assert ours.errors, text
    # a file without findings is one DeepSpeed accepts, with the same hosts
    if not ours.findings:
        assert ours.deepspeed_accepts
        assert list(ours.resources.items()) == list(resources.items())  # type: ignore[union-attr]
    # our usable hosts are DeepSpeed's hosts, same slots, same order
    if resources is not None:
        items = list(resources.items())
        ours_items = [(h.name, h.slots) for h in ours.hosts]
        it = iter(items)
        assert all(pair in it for pair in ours_items), (ours_items, items)
    return ours


# --------------------------------------------------------------------------- DeepSpeed equality

EDGE_CASES = [
    "node1 slots=8\nnode2 slots=8\n",
    "node1 slots=8",  # no final newline
    "node2 slots=4\nnode1 slots=8\n",  # order is file order, not sorted
    "",
    "\n\n\n",
    "# only a comment\n",
    "   # indented comment\nnode1 slots=1\n",
    "node1 slots=8 # trailing comment\n",
    "node1 slots=8#glued comment\n",
    "node1#notacomment slots=8\n",
    "node1\n",  # missing slots: DeepSpeed refuses, no default of 1
    "node1 slots=0\n",  # accepted with 0 slots
    "node1 slots=-1\n",
    "node1 slots=8.5\n",  # accepted as 8
    "node1 slots=8abc\n",
    "node1 slots=\n",
    "node1 slots = 8\n",
    "node1 SLOTS=8\n",
    "node1 slots=08\n",
    "node1 slots=\u0668\n",  # ARABIC-INDIC DIGIT EIGHT: \d matches, int() reads 8
    "node1 slots=8 max_slots=16\n",
    "node1 extra slots=8\n",
    "slots=8\n",
    " slots=8\n",
    "node1 slots=8\nnode1 slots=8\n",
    "node1 slots=8\nNODE1 slots=8\n",
    "node1 slots=8\r\nnode2 slots=8\r\n",
    "node1 slots=8\rnode2 slots=8\r",  # a bare CR ends a line for Python
    "\ufeffnode1 slots=8\n",  # the BOM stays in the host name
    "\ufeff# comment\nnode1 slots=8\n",  # ... and turns a comment into a bad entry
    "\ufeff\nnode1 slots=8\n",
    "node1\tslots=8\n",
    "  node1   slots=8   \n",
    "node1\u00a0slots=8\n",  # NBSP is whitespace to \s and strip()
    "node1\u3000slots=8\n",
    "node1\x0bslots=8\x0c\n",
    "node1 slots=8\x1cnode2 slots=8\n",  # \x1c splits for str.splitlines, not for readlines
    "node1 slots=8\u2028node2 slots=8\n",
    "node1 slots=8\x85\n",
    "node1 slots=" + "9" * 5000 + "\n",  # beyond Python's int() digit limit
    "node1 slots=99999999999999999999\n",
    "$(touch${IFS}/tmp/pwned) slots=1\n",
    "-oProxyCommand=x slots=1\n",
    "bad line\nnode1 slots=8\nnode1 slots=8\n",  # first error wins
    "node1 slots=8\nnode1 slots=8\nbad line\n",
]


@pytest.mark.parametrize("text", EDGE_CASES, ids=[repr(t)[:40] for t in EDGE_CASES])
def test_edge_cases_equal_deepspeed(text: str) -> None:
    assert_same_as_deepspeed(text)


def test_deepspeed_parse_lines_matches_private_function_messages() -> None:
    for text in EDGE_CASES:
        lines = text.splitlines(keepends=True)
        try:
            expected: object = runner._parse_hostfile(lines)
        except ValueError as exc:
            expected = ("raise", str(exc))
        try:
            got: object = deepspeed_parse_lines(lines)
        except ValueError as exc:
            got = ("raise", str(exc))
        assert got == expected


def test_split_lines_is_readlines() -> None:
    text = "a\r\nb\rc\nd\x1ce\u2028f\x85g"
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "f")
        Path(p).write_bytes(text.encode())
        with open(p) as fd:
            expected = fd.readlines()
    got = [c + ("\n" if e else "") for c, e in split_lines(text)]
    assert got == expected


HOSTS = ["node1", "node2", "NODE1", "10.0.0.1", "gpu_3", "-x", "$(id)", "n#1", "é1", "slots=8"]
SEPS = [" ", "  ", "\t", "\u00a0", " \t ", ""]
SLOTS = [
    "slots=8", "slots=1", "slots=0", "slots=-1", "slots=8.5", "slots = 4", "SLOTS=2",
    "slots=", "slots=\u0668", "slots=08", "slots=8#c", "slots=1 extra", "",
]  # fmt: skip
TAILS = ["", " ", "\t", " # comment", "#c", "  "]
LEADS = ["", " ", "\t"]
WHOLE = ["", "#", "# comment", "   ", "\t# x", "garbage", "\ufeff"]
ENDS = ["\n", "\n", "\n", "\r\n", "\r"]

entry_line = st.builds(
    lambda lead, host, sep, slots, tail: lead + host + sep + slots + tail,
    st.sampled_from(LEADS),
    st.sampled_from(HOSTS) | st.text("ab1.-_ #=\t", max_size=6),
    st.sampled_from(SEPS),
    st.sampled_from(SLOTS),
    st.sampled_from(TAILS),
)
any_line = entry_line | st.sampled_from(WHOLE) | st.text("ab #=\t\r\nslot0189\u00a0", max_size=12)


@st.composite
def hostfile_texts(draw: st.DrawFn) -> str:
    lines = draw(st.lists(any_line, max_size=8))
    text = "".join(line + draw(st.sampled_from(ENDS)) for line in lines)
    if draw(st.booleans()) and text:
        text = text[:-1]  # no final newline
    if draw(st.integers(0, 9)) == 0:
        text = "\ufeff" + text
    return text


@SETTINGS
@given(hostfile_texts())
def test_generated_hostfiles_equal_deepspeed(text: str) -> None:
    assert_same_as_deepspeed(text)


@SETTINGS
@given(hostfile_texts())
def test_applying_the_fixes_leaves_a_clean_file(text: str) -> None:
    parsed = parse_hostfile_text(text)
    by_line: dict[int, str | None] = {}
    for f in parsed.findings:
        if f.code != "H1-empty":
            by_line[f.line] = f.fixed_line
    if any(v is not None and "<" in v for v in by_line.values()):
        return  # a placeholder ('<N>') the user must fill in
    out = []
    for lineno, (content, _end) in enumerate(split_lines(text), 1):
        if lineno in by_line:
            fixed = by_line[lineno]
            if fixed is not None:
                out.append(fixed)
        elif content.strip():
            out.append(content)
    fixed_text = "".join(line + "\n" for line in out)
    again = parse_hostfile_text(fixed_text)
    unfixable = {"H1-empty", "H1-hostname-underscore"}  # warnings only the user can resolve
    assert [f for f in again.findings if f.code not in unfixable] == [], fixed_text
    if again.hosts:
        assert again.deepspeed_accepts
        # the good lines stay, in order; fixed bad lines may join them
        it = iter([(h.name, h.slots) for h in again.hosts])
        assert all(pair in it for pair in [(h.name, h.slots) for h in parsed.hosts])


def test_bad_lines_fail_good_lines_still_become_nodes() -> None:
    parsed = parse_hostfile_text("node1 slots=8\nnode2\nnode3 slots=4 \n", "hf")
    assert parsed.hosts == [Host("node1", 8, 1), Host("node3", 4, 3)]
    assert [f.code for f in parsed.errors] == ["H1-missing-slots"]
    assert [f.code for f in parsed.warnings] == ["H1-trailing-space"]
    assert not parsed.deepspeed_accepts
    assert parsed.deepspeed_error == (
        "Hostfile contains a bad entry: node2, unable to proceed with launching"
    )


def test_clean_file_has_no_findings() -> None:
    parsed = parse_hostfile_text("node1 slots=8\n10.0.0.2 slots=8\n\nnode3 slots=4\n")
    assert parsed.findings == []
    assert (
        parsed.resources
        == parsed.deepspeed_resources
        == OrderedDict([("node1", 8), ("10.0.0.2", 8), ("node3", 4)])
    )


def test_the_shipped_example_hostfile_is_clean() -> None:
    parse = load_hostfile(REPO / "configs" / "hostfile")
    assert parse.deepspeed_accepts and not parse.errors and not parse.warnings


# --------------------------------------------------------------------------- H1's red


def test_a_clean_file_is_no_red_and_its_traps_are_warnings_only() -> None:
    parse = parse_hostfile_text("node1 slots=8 \nnode2 slots=8\n", "/etc/ds/hostfile")
    assert [f.code for f in parse.warnings] == ["H1-trailing-space"]
    assert hf.judge_syntax(parse) is None


def test_what_deepspeed_refuses_is_one_red_naming_each_bad_line_and_what_to_write() -> None:
    """The text as it always read (DeepSpeed's own words first, then each bad line with its
    column and the line to write), the file's lines as data, and a fix naming the file."""
    parse = parse_hostfile_text("node1 slots=8\nnode2 slot=4\nnode1 slots=8\n", "/etc/ds/hf")
    p = hf.judge_syntax(parse)
    assert p is not None and p.cause is HostfileCause.REFUSED and p.item == "H1"
    assert p.nodes == () and p.facts == {"lines": [2, 3]}
    assert p.message.splitlines() == [
        "the hostfile will not launch as it is:",
        "/etc/ds/hf: deepspeed --hostfile would stop with: Hostfile contains a bad entry: "
        "node2 slot=4, unable to proceed with launching",
        "/etc/ds/hf:2:7: error: 'slot=4' is not written 'slots=<n>' (lower case, no spaces); "
        "DeepSpeed rejects the line; write: 'node2 slots=4'",
        "/etc/ds/hf:3:1: error: host 'node1' is already on line 1; DeepSpeed refuses a host "
        "twice; remove the line"]
    assert p.fix.startswith("edit /etc/ds/hf: ") and p.text().endswith(f"\n  fix: {p.fix}")


def test_a_line_deepspeed_takes_but_the_launch_cannot_use_is_red_too() -> None:
    """slots=0: DeepSpeed accepts the file, and starts the node with no ranks."""
    parse = parse_hostfile_text("node1 slots=8\nnode2 slots=0\n", "hf")
    assert parse.deepspeed_accepts
    p = hf.judge_syntax(parse)
    assert p is not None and "deepspeed --hostfile would stop" not in p.message
    assert "hf:2:13: error: slots=0" in p.message
