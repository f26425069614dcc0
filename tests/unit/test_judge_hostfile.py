"""cluster_tests.judge.hostfile.hostparse: equal to DeepSpeed 0.19's parser, lint traps, bad input,
filters."""

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
from cluster_tests.judge.hostfile.hostparse import (
    MAX_BYTES,
    MAX_LINES,
    Finding,
    Host,
    HostfileError,
    HostfileParse,
    deepspeed_parse_lines,
    parse_hostfile_text,
    split_lines,
)
from cluster_tests.judge.hostfile.resourcefilter import ResourceFilterError, parse_resource_filter

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


def only(text: str, code: str) -> Finding:
    found = [f for f in parse_hostfile_text(text, "hf").findings if f.code == code]
    assert len(found) == 1, parse_hostfile_text(text, "hf").findings
    return found[0]


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


# --------------------------------------------------------------------------- H5 filters


def ds_filter(pool: OrderedDict[str, int], inc: str, exc: str) -> object:
    try:
        return list(runner.parse_inclusion_exclusion(pool, inc, exc).items())
    except ValueError:
        return "ValueError"


def our_filter(pool: OrderedDict[str, int], inc: str, exc: str) -> object:
    try:
        return list(parse_resource_filter(pool, inc, exc).items())
    except ResourceFilterError:
        return "ValueError"


FILTER_TOKENS = ["node1", "node2", "node3", "nodeX", "", ":", ",", "@", "0", "1", "3", "-1", " 1"]
filter_spec = st.lists(st.sampled_from(FILTER_TOKENS), max_size=7).map("".join)
pools = st.lists(
    st.tuples(st.sampled_from(["node1", "node2", "node3"]), st.integers(0, 4)),
    min_size=1,
    max_size=3,
    unique_by=lambda t: t[0],
).map(OrderedDict)


@SETTINGS
@given(pools, filter_spec, filter_spec, st.integers(0, 2))
def test_generated_filters_equal_deepspeed(
    pool: OrderedDict[str, int], a: str, b: str, which: int
) -> None:
    inc, exc = [(a, ""), ("", a), (a, b)][which]
    assert our_filter(pool, inc, exc) == ds_filter(pool, inc, exc)


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c"]), st.lists(st.integers(0, 3), max_size=4), min_size=1
    ),
    filter_spec.map(lambda s: s.replace("node", "")),
    st.booleans(),
)
def test_filters_on_slot_lists_equal_deepspeed(
    info: dict[str, list[int]], spec: str, include: bool
) -> None:
    inc, exc = (spec, "") if include else ("", spec)
    try:
        expected: object = list(runner.parse_resource_filter(dict(info), inc, exc).items())
    except ValueError:
        expected = "ValueError"
    try:
        got: object = list(parse_resource_filter(info, inc, exc).items())
    except ResourceFilterError:
        got = "ValueError"
    assert got == expected


POOL = OrderedDict([("node1", 4), ("node2", 2)])


@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        ("", "", [("node1", [0, 1, 2, 3]), ("node2", [0, 1])]),
        ("node2@node1:1,0", "", [("node1", [0, 1]), ("node2", [0, 1])]),  # hostfile order
        ("node1@node1:2", "", [("node1", [2])]),  # whole host + slots = only those slots
        ("node1:3,3", "", [("node1", [3])]),
        ("", "node1", [("node2", [0, 1])]),
        ("", "node2:0@node1", [("node2", [1])]),
        ("", "node1@node2", []),  # nothing left: main() would then fail on [0]
    ],
)
def test_filter_examples(include: str, exclude: str, expected: list) -> None:
    assert list(parse_resource_filter(POOL, include, exclude).items()) == expected
    assert list(runner.parse_inclusion_exclusion(POOL, include, exclude).items()) == expected


@pytest.mark.parametrize(
    ("include", "exclude", "words"),
    [
        ("node1", "node2", "mutually exclusive"),
        ("nodeX", "", "--include names host 'nodeX', which is not in the hostfile"),
        ("", "nodeX:0", "--exclude names host 'nodeX'"),
        ("node2:2", "", "--include names slot 2 on host 'node2', which has slots 0..1"),
        ("node1:a", "", "slot 'a' in 'node1:a' is not a slot index"),
        ("node1:", "", "slot '' in 'node1:'"),
        ("fe80::1:0", "", "has 3 ':'"),
        ("node1@", "", "host ''"),
    ],
)
def test_filter_errors_name_the_culprit(include: str, exclude: str, words: str) -> None:
    with pytest.raises(ResourceFilterError) as info:
        parse_resource_filter(POOL, include, exclude)
    assert words in str(info.value)
    with pytest.raises(ValueError):
        runner.parse_inclusion_exclusion(POOL, include, exclude)


# --------------------------------------------------------------------------- H3


# --------------------------------------------------------------------------- H1 lint


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
    assert_same_as_deepspeed(text)


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


# --------------------------------------------------------------------------- bad input


def write(tmp_path: Path, data: bytes) -> Path:
    p = tmp_path / "hostfile"
    p.write_bytes(data)
    return p


def test_missing(tmp_path: Path) -> None:
    with pytest.raises(HostfileError, match=r"hostfile .*/nope: no such file$"):
        load_hostfile(tmp_path / "nope")


def test_path_through_a_file(tmp_path: Path) -> None:
    f = write(tmp_path, b"node1 slots=1\n")
    with pytest.raises(HostfileError, match="no such file"):
        load_hostfile(f / "x")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(HostfileError, match="is a directory, not a file"):
        load_hostfile(tmp_path)


def test_fifo_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(HostfileError, match="not a regular file"):
        load_hostfile(fifo)  # would block forever if it were opened


def test_unreadable_chmod(tmp_path: Path) -> None:
    """A chmod 000 hostfile, read by a user who may not read it. Root reads it anyway, so as
    root the read is made by a forked child that has dropped to `nobody`."""
    if os.geteuid() != 0:
        f = write(tmp_path, b"node1 slots=1\n")
        f.chmod(0)
        with pytest.raises(HostfileError, match="permission denied"):
            load_hostfile(f)
        return
    where = Path(tempfile.mkdtemp(prefix="ct-hostfile-"))  # tmp_path's parents are root-only
    f = where / "hostfile"
    try:
        where.chmod(0o711)
        write(where, b"node1 slots=1\n").chmod(0)
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop to nobody, read, report, leave without pytest's cleanup
            try:
                os.close(rd)
                os.setgid(65534)
                os.setuid(65534)
                try:
                    load_hostfile(f)
                    said = "read it"
                except HostfileError as exc:
                    said = str(exc)
                os.write(wr, said.encode())
            finally:
                os._exit(0)
        os.close(wr)
        with os.fdopen(rd, "rb") as pipe:
            said = pipe.read().decode()
        os.waitpid(pid, 0)
        assert "permission denied" in said, said
    finally:
        f.unlink(missing_ok=True)
        where.rmdir()


def test_unreadable_permission_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same translation as the chmod case, forced so that it also runs as root."""
    f = write(tmp_path, b"node1 slots=1\n")

    def denied(path: str) -> bytes:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr("cluster_tests.core.nodelist._open_binary", denied)
    with pytest.raises(HostfileError, match=r"^hostfile .*: permission denied$"):
        load_hostfile(f)


@pytest.mark.parametrize("data", [b"", b"\n\n  \n", b"\xef\xbb\xbf"])
def test_empty(tmp_path: Path, data: bytes) -> None:
    f = write(tmp_path, data)
    with pytest.raises(HostfileError) as info:
        load_hostfile(f)
    assert str(info.value) == f"hostfile {f} is empty: expected lines like 'node1 slots=8'"


def test_only_comments(tmp_path: Path) -> None:
    f = write(tmp_path, b"# node1 slots=8\n\n  # node2 slots=8\n")
    with pytest.raises(HostfileError, match="has no hosts, only comments and blank lines"):
        load_hostfile(f)


def test_binary(tmp_path: Path) -> None:
    f = write(tmp_path, b"node1 slots=8\n\x7fELF\x00\x01\x02")
    with pytest.raises(HostfileError, match=r"is binary \(a NUL byte at offset 18\)"):
        load_hostfile(f)


def test_invalid_utf8_names_offset(tmp_path: Path) -> None:
    f = write(tmp_path, b"node1 slots=8\nn\xe9ud slots=8\n")
    with pytest.raises(HostfileError, match="is not UTF-8 text: byte 0xe9 at offset 15"):
        load_hostfile(f)


def test_huge_bytes(tmp_path: Path) -> None:
    f = write(tmp_path, b"node1 slots=8\n" + b"#" * MAX_BYTES)
    with pytest.raises(HostfileError, match=r"bytes, more than 1048576 \(1 MiB\)"):
        load_hostfile(f)


def test_huge_line_count(tmp_path: Path) -> None:
    f = write(tmp_path, b"\n" * (MAX_LINES + 1))
    with pytest.raises(HostfileError, match=f"has {MAX_LINES + 1} lines, more than {MAX_LINES}"):
        load_hostfile(f)


def test_load_good_file_with_bom_and_crlf(tmp_path: Path) -> None:
    f = write(tmp_path, b"\xef\xbb\xbfnode1 slots=8\r\nnode2 slots=8\r\n")
    parsed = load_hostfile(f)
    assert parsed.path == str(f)
    assert [f.code for f in parsed.findings] == ["H1-bom", "H1-crlf"]
    assert parsed.deepspeed_resources == OrderedDict([("\ufeffnode1", 8), ("node2", 8)])
    assert parsed.deepspeed_resources == runner.fetch_hostfile(str(f))
    assert parsed.hosts == [Host("node2", 8, 2)]


# --------------------------------------------------------------------------- hostile content


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
    f = write(tmp_path, ("\n".join(["node1 slots=8", *hostile]) + "\n").encode())
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


def test_the_shipped_example_hostfile_is_clean() -> None:
    parse = load_hostfile(REPO / "configs" / "hostfile")
    assert parse.deepspeed_accepts and not parse.errors and not parse.warnings
