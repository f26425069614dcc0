"""judge/hostfile/hostlint.py: H1's lint of one hostfile line, each trap DeepSpeed 0.19 tolerates
or refuses a Finding with its line, column, severity and the line to write (read through the
parse, which adds the traps across lines: duplicates, line ends, the byte-order mark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_tests.core.nodelist import load_hostfile
from cluster_tests.judge.hostfile.hostlint import lint_line
from cluster_tests.judge.hostfile.hostmodel import ERROR, WARNING, Finding, Host
from cluster_tests.judge.hostfile.hostparse import parse_hostfile_text

runner = pytest.importorskip("deepspeed.launcher.runner")


def only(text: str, code: str) -> Finding:
    found = [f for f in parse_hostfile_text(text, "hf").findings if f.code == code]
    assert len(found) == 1, parse_hostfile_text(text, "hf").findings
    return found[0]


def test_one_line_alone() -> None:
    """lint_line on its own: the host and slots it reads, its findings (the corrected line is
    put on them when the line is finished)."""
    ln = lint_line("hf", 3, "node1\tslots=8")
    assert (ln.host, ln.slots, ln.fixed, ln.has_error) == ("node1", 8, "node1 slots=8", False)
    assert [(f.code, f.column, f.severity) for f in ln.finish()] == [("H1-tab", 6, WARNING)]
    assert ln.finish()[0].fixed_line == "node1 slots=8"
    bad = lint_line("hf", 1, "node1 slots=x")
    assert bad.has_error and bad.host == "node1" and bad.slots is None
    assert [f.severity for f in bad.findings] == [ERROR]
    assert lint_line("hf", 2, "# a comment").host is None


def test_finding_str() -> None:
    f = only("node1 slots=8\nnode2 slots=8   \n", "H1-trailing-space")
    assert str(f) == (
        "hf:2:14: warning: trailing whitespace after 'slots=8'; write: 'node2 slots=8'"
    )
    assert str(only("# c\nnode1 slots=1\n", "H1-comment")).endswith("; remove the line")


LINT = [
    # text, code, line, column, severity, fixed_line
    ("node1 slots=8   \n", "H1-trailing-space", 1, 14, "warning", "node1 slots=8"),
    ("node1  slots=8\n", "H1-double-space", 1, 6, "warning", "node1 slots=8"),
    ("node1\tslots=8\n", "H1-tab", 1, 6, "warning", "node1 slots=8"),
    ("  node1 slots=8\n", "H1-leading-space", 1, 1, "warning", "node1 slots=8"),
    ("node1\u00a0slots=8\n", "H1-odd-space", 1, 6, "warning", "node1 slots=8"),
    ("a slots=1\nnode1 slots=8\r\n", "H1-crlf", 2, 14, "warning", "node1 slots=8"),
    ("node1 slots=8\rnode2 slots=1", "H1-cr", 1, 14, "warning", "node1 slots=8"),
    ("\ufeffnode1 slots=8\n", "H1-bom", 1, 1, "error", "node1 slots=8"),
    ("node1 slots=1\n# racks 1-2\n", "H1-comment", 2, 1, "warning", None),
    ("node1 slots=8 # gpu box\n", "H1-trailing-comment", 1, 15, "warning", "node1 slots=8"),
    ("node1 slots=8#x\n", "H1-trailing-comment", 1, 14, "warning", "node1 slots=8"),
    ("node1 slots=1\n   \n", "H1-blank-whitespace", 2, 1, "warning", None),
    ("node1 slots=1\nnode2\n", "H1-missing-slots", 2, 6, "error", "node2 slots=<N>"),
    ("slots=8\n", "H1-missing-host", 1, 1, "error", "<host> slots=8"),
    ("node1 slots = 8\n", "H1-slots-syntax", 1, 7, "error", "node1 slots=8"),
    ("node1 SLOTS=8\n", "H1-slots-syntax", 1, 7, "error", "node1 slots=8"),
    ("node1 gpus=8\n", "H1-bad-entry", 1, 7, "error", "node1 slots=<N>"),
    ("node1 slots=0\n", "H1-slots-zero", 1, 13, "error", None),
    ("node1 slots=-2\n", "H1-slots-negative", 1, 13, "error", "node1 slots=<N>"),
    ("node1 slots=8.5\n", "H1-slots-not-integer", 1, 14, "error", "node1 slots=8"),
    ("node1 slots=x\n", "H1-slots-not-integer", 1, 13, "error", "node1 slots=<N>"),
    ("node1 slots=\u0668\n", "H1-slots-non-ascii", 1, 13, "error", "node1 slots=8"),
    ("node1 slots=8 max_slots=8\n", "H1-extra-text", 1, 15, "warning", "node1 slots=8"),
    ("-oProxyCommand=x slots=1\n", "H1-hostname-dash", 1, 1, "error", None),
    ("no;de slots=1\n", "H1-hostname-chars", 1, 3, "error", None),
    ("nöde slots=1\n", "H1-hostname-chars", 1, 2, "error", None),
    ("fe80::1 slots=1\n", "H1-hostname-chars", 1, 5, "error", None),
    ("gpu_1 slots=1\n", "H1-hostname-underscore", 1, 4, "warning", "gpu_1 slots=1"),
    ("a" * 64 + " slots=1\n", "H1-hostname-long", 1, 1, "error", None),
    ("node1 slots=8\nnode1 slots=4\n", "H1-duplicate", 2, 1, "error", None),
    ("node1 slots=8\nNode1 slots=8\n", "H1-case-duplicate", 2, 1, "error", None),
    ("node1 slots=1 " + "x" * 2000 + "\n", "H1-long-line", 1, 1025, "error", None),
    ("# nothing\n\n", "H1-empty", 1, 1, "error", "node1 slots=8"),
]


@pytest.mark.parametrize(
    ("text", "code", "line", "column", "severity", "fixed"),
    LINT,
    ids=[f"{row[1]}-{i}" for i, row in enumerate(LINT)],
)
def test_lint_trap(
    text: str, code: str, line: int, column: int, severity: str, fixed: str | None
) -> None:
    f = only(text, code)
    assert (f.line, f.column, f.severity, f.fixed_line) == (line, column, severity, fixed)
    assert f.path == "hf" and f.message
    parsed = parse_hostfile_text(text, "hf")
    if severity == "error":
        assert all(h.lineno != line for h in parsed.hosts)  # a bad line is no node


def test_slots_beyond_int_digit_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed's int() raises past 4300 digits; such a line is caught as too long first,
    and as too large when the line-length limit is lifted."""
    text = "node1 slots=" + "9" * 5000 + "\n"
    assert only(text, "H1-long-line").severity == "error"
    monkeypatch.setattr("cluster_tests.judge.hostfile.hostlint.MAX_LINE_CHARS", 10**6)
    f = only(text, "H1-slots-too-large")
    assert (f.line, f.column, f.severity, f.fixed_line) == (1, 13, "error", None)
    # DeepSpeed's int() raises there too: it refuses the file
    assert not parse_hostfile_text(text).deepspeed_accepts
    with pytest.raises(ValueError):
        runner._parse_hostfile(text.splitlines(keepends=True))


def test_hostile_lines_are_only_data(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile = [
        f"$(touch {marker}) slots=1",
        f"$(touch${{IFS}}{marker}) slots=1",
        f"`touch {marker}` slots=1",
        f"`touch${{IFS}}{marker}` slots=1",
        f"a;touch${{IFS}}{marker} slots=1",
        f"a&&touch${{IFS}}{marker} slots=1",
        f"a|touch${{IFS}}{marker} slots=1",
        "'node9' slots=1",
        '"node9" slots=1',
        "node9\x1b[2J slots=1",
        "x" * 5000 + " slots=1",
        "n slots=1 " + "y" * 50_000,
    ]
    f = tmp_path / "hostfile"
    f.write_text("\n".join(["node1 slots=8", *hostile]) + "\n")
    parsed = load_hostfile(f)
    rendered = "\n".join(str(x) for x in parsed.findings)
    assert parsed.hosts == [Host("node1", 8, 1)]
    for lineno in range(2, len(hostile) + 2):
        assert any(e.line == lineno for e in parsed.errors), lineno
    assert "\x1b" not in rendered  # escaped, so a terminal shows it instead of obeying it
    assert max(len(line) for line in rendered.splitlines()) < 400  # long text shortened
    assert not marker.exists()
    with pytest.raises(ValueError, match="bad entry"):  # DeepSpeed refuses it, runs nothing
        runner.fetch_hostfile(str(f))
    assert not marker.exists()


