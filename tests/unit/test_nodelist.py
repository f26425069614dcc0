"""Node-list sources (cluster_tests.core.nodelist): Slurm hostlists exactly as Slurm expands them,
SLURM_* slot counts, MPI hostfiles linted like H1, SkyPilot, the choice between sources, and a
DeepSpeed hostfile read from disk."""

from __future__ import annotations

import json
import os
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from paths import SAMPLES

from cluster_tests.core import nodelist as nl
from cluster_tests.core.nodelist import load_hostfile
from cluster_tests.judge.hostfile.hostmodel import (
    ERROR,
    MAX_BYTES,
    MAX_LINES,
    WARNING,
    Host,
    HostfileError,
)

CAPTURES = json.loads((SAMPLES / "scontrol-show-hostnames-22.05.8.json").read_text())["captures"]


@pytest.mark.parametrize("capture", CAPTURES, ids=[repr(c["expression"]) for c in CAPTURES])
def test_expander_agrees_with_real_scontrol(capture):
    """Every expression captured from `scontrol show hostnames` (Slurm 22.05.8): the same hosts
    in the same order, or refused where scontrol says "Invalid hostlist"."""
    if "Invalid hostlist" in capture["stderr"]:
        with pytest.raises(nl.HostlistError, match="Invalid hostlist"):
            nl.expand_hostlist(capture["expression"])
    else:
        assert nl.expand_hostlist(capture["expression"]) == capture["stdout"].split()


def test_documented_examples():
    # Slurm::Hostlist(3pm) and slurm_hostlist_create(3) examples
    assert nl.expand_hostlist("node1,node[2-5,12]") == [
        "node1", "node2", "node3", "node4", "node5", "node12"]
    assert nl.expand_hostlist("linux[1-3,6]") == ["linux1", "linux2", "linux3", "linux6"]
    assert len(nl.expand_hostlist("tux[0-5,12,20-25]")) == 13
    # the forms: zero padding kept, several ranges, order as written
    assert nl.expand_hostlist("gpu-[01-04,07]") == ["gpu-01", "gpu-02", "gpu-03", "gpu-04",
                                                    "gpu-07"]
    assert nl.expand_hostlist("a[1-2],b3") == ["a1", "a2", "b3"]
    # Slurm refuses text after the last bracket (scontrol: "Invalid hostlist: a[1-2]-ib,b3")
    with pytest.raises(nl.HostlistError):
        nl.expand_hostlist("a[1-2]-ib,b3")


def test_range_limits():
    assert len(nl.expand_hostlist("n[0-65535]")) == 65536
    with pytest.raises(nl.HostlistError, match="Too many hosts"):
        nl.expand_hostlist("n[0-65536]")


def test_tasks_per_node():
    assert nl.parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert nl.parse_tasks_per_node("8") == [8]
    with pytest.raises(nl.NodeListError, match="N or N"):
        nl.parse_tasks_per_node("2(3)")
    assert nl.count_job_gpus("0,1,2,3") == 4
    assert nl.count_job_gpus("0-3,6") == 5


def test_slurm_slots_precedence_and_order():
    env = {"SLURM_JOB_NODELIST": "gpu-[03,01-02]", "SLURM_TASKS_PER_NODE": "2(x2),1"}
    got = nl.slurm_nodes(env)
    assert [(h.name, h.slots) for h in got.hosts] == [("gpu-03", 2), ("gpu-01", 2), ("gpu-02", 1)]
    assert "SLURM_TASKS_PER_NODE=2(x2),1" in got.description
    assert "built-in" in got.description
    env["SLURM_JOB_GPUS"] = "0,1,2,3"
    assert {h.slots for h in nl.slurm_nodes(env).hosts} == {4}
    env["SLURM_GPUS_ON_NODE"] = "8"
    assert {h.slots for h in nl.slurm_nodes(env).hosts} == {8}
    assert {h.slots for h in nl.slurm_nodes(env, slots=2).hosts} == {2}
    with pytest.raises(nl.NodeListError, match="3 counts for the 2 nodes"):
        nl.slurm_nodes({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "1(x3)"})
    with pytest.raises(nl.NodeListError, match="more than once"):
        nl.slurm_nodes({"SLURM_JOB_NODELIST": "n1,n1", "SLURM_TASKS_PER_NODE": "1(x2)"})


def test_skypilot():
    env = {"SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.2\n", "SKYPILOT_NUM_GPUS_PER_NODE": "8"}
    got = nl.skypilot_nodes(env)
    assert [(h.name, h.slots) for h in got.hosts] == [("10.0.0.5", 8), ("10.0.0.2", 8)]
    with pytest.raises(nl.NodeListError, match="--slots"):
        nl.skypilot_nodes({"SKYPILOT_NODE_IPS": "10.0.0.5", "SKYPILOT_NUM_GPUS_PER_NODE": "0"})
    assert nl.skypilot_nodes({"SKYPILOT_NODE_IPS": "10.0.0.5"}, slots=1).hosts[0].slots == 1


OMPI = """\
# Open MPI hostfile
node1 slots=2 max_slots=4
node2 count=2   // a comment of Open MPI's lexer
/* a block
   comment */ node3 slots=1 # tail
node1 slots=1
node4
bad/host slots=1
node5 slots=two
"""


def test_open_mpi_hostfile_is_linted_with_lines_and_deepspeed_lines():
    got = nl.parse_mpi_hostfile(OMPI, "ompi.txt")
    assert [(h.name, h.slots, h.lineno) for h in got.hosts] == [
        ("node1", 3, 2), ("node2", 2, 3), ("node3", 1, 5)]
    by = {(f.line, f.code): f for f in got.findings}
    assert by[(6, "M1-duplicate")].fixed_line == "node1 slots=3"
    assert by[(7, "M1-no-slots")].severity == ERROR
    assert by[(7, "M1-no-slots")].fixed_line == "node4 slots=<N>"
    assert by[(8, "M1-hostname")].severity == ERROR
    assert by[(9, "M1-slots")].fixed_line == "node5 slots=<N>"
    assert str(by[(7, "M1-no-slots")]).startswith("ompi.txt:7:6: error: no slot count for node4")
    # with --slots, a line without a count takes it
    assert ("node4", 4) in [(h.name, h.slots) for h in
                            nl.parse_mpi_hostfile(OMPI, "ompi.txt", slots=4).hosts]


def test_mpich_hostfile():
    got = nl.parse_mpi_hostfile("n1:4\nn2:2\nalice@n3:1\nn4:x\n", "machines")
    assert [(h.name, h.slots) for h in got.hosts] == [("n1", 4), ("n2", 2), ("n3", 1)]
    codes = {(f.line, f.code) for f in got.findings}
    assert (3, "M1-user") in codes and (4, "M1-count") in codes


def test_the_warnings_of_an_mpi_hostfile_give_the_line_to_write():
    """Lines DeepSpeed can use once written its way: a user@, a max_slots below the slots, a
    placement keyword, a host given twice (the sum), both styles in one file; comments of
    both kinds (a /* */ block across lines) and a byte-order mark are no hosts."""
    text = ("\ufeffnode1:2\nalice@node2 slots=4 max_slots=2 // two\nnode3 slots=1 rank=0 /* a\n"
            "b */ node4 count=2\nnode1:3\n")
    got = nl.parse_mpi_hostfile(text, "m")
    assert [(h.name, h.slots, h.lineno) for h in got.hosts] == [
        ("node1", 5, 1), ("node2", 4, 2), ("node3", 1, 3), ("node4", 2, 4)]
    assert [(f.line, f.column, f.code, f.fixed_line) for f in got.findings] == [
        (1, 1, "M1-mixed", "node1 slots=5"),
        (2, 1, "M1-user", "node2 slots=4"),
        (2, 1, "M1-max-slots", "node2 slots=4"),
        (3, 15, "M1-ignored", "node3 slots=1"),
        (5, 1, "M1-duplicate", "node1 slots=5")]
    assert {f.severity for f in got.findings} == {WARNING}
    assert got.findings[-1].message == ("node1 is already on line 1; MPI adds the slots up, "
                                        "DeepSpeed refuses a host twice: one line with the sum")


def test_written_text_is_what_deepspeed_reads(tmp_path):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    got = nl.parse_mpi_hostfile(OMPI, "ompi.txt")
    parse = nl.to_parse(got, str(tmp_path / "hostfile"))
    assert parse.deepspeed_accepts and [h.name for h in parse.hosts] == ["node1", "node2", "node3"]
    path = tmp_path / "hostfile"
    nl.write_hostfile(path, got.deepspeed_text())
    assert dict(runner.fetch_hostfile(str(path))) == {"node1": 3, "node2": 2, "node3": 1}


def test_a_bad_slurm_name_fails_h1_naming_its_position(tmp_path):
    got = nl.slurm_nodes({"SLURM_JOB_NODELIST": "n1,n[2-3", "SLURM_TASKS_PER_NODE": "1(x2)"})
    assert [h.name for h in got.hosts] == ["n1", "n]"]  # as Slurm 22.05 expands it
    parse = nl.to_parse(got, str(tmp_path / "hostfile"))
    assert [h.name for h in parse.hosts] == ["n1"]
    assert any(f.line == 2 and f.severity == ERROR for f in parse.findings)


def test_choose_source_names_both_when_ambiguous():
    kw: dict[str, Any] = {"hostfile": None, "hostfile_from": "--hostfile", "mpi_hostfile": None}
    env = {"SLURM_JOB_NODELIST": "n[1-2]", "SKYPILOT_NODE_IPS": "10.0.0.1"}
    with pytest.raises(nl.NodeListError,
                       match=r"SLURM_JOB_NODELIST=n\[1-2\] and SKYPILOT_NODE_IPS"):
        nl.choose_source(environ=env, **kw)
    assert nl.choose_source(environ=env, nodes_from="skypilot", **kw) == "skypilot"
    with pytest.raises(nl.NodeListError, match="--hostfile /h and --mpi-hostfile /m"):
        nl.choose_source(hostfile="/h", hostfile_from="--hostfile", mpi_hostfile="/m", environ={})
    # an explicit --hostfile inside an allocation wins (the header says the allocation's is unused)
    assert nl.choose_source(hostfile="/h", hostfile_from="--hostfile", mpi_hostfile=None,
                            environ=env) == "hostfile"
    assert "not used" in nl.env_note("hostfile", env)
    assert nl.choose_source(environ={}, **kw) is None


# -- Slurm without a configured scontrol: the built-in expander serves, with a warning ----------

NO_CONFIG = {c["configuration"].split(" (")[0]: c for c in json.loads(
    (SAMPLES / "scontrol-without-configuration-22.05.8.json").read_text())["captures"]}


def _stand_in_scontrol(tmp_path, capture: dict[str, Any], sleep: float = 0) -> str:
    """A real executable named scontrol that says what the real one said (stdout, stderr, exit
    status of a capture), after `sleep` seconds."""
    out = tmp_path / "out.txt"
    err = tmp_path / "err.txt"
    out.write_text(capture["stdout"])
    err.write_text(capture["stderr"])
    script = tmp_path / "scontrol"
    script.write_text("#!/bin/sh\n"
                      f"cat '{out}'; cat '{err}' >&2\n"
                      + (f"exec sleep {sleep}\n" if sleep else f"exit {capture['rc']}\n"))
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("configuration", sorted(NO_CONFIG))
def test_a_failing_scontrol_leaves_the_list_to_the_builtin_expander_with_a_warning(
        tmp_path, configuration):
    capture = NO_CONFIG[configuration]
    scontrol = _stand_in_scontrol(tmp_path, capture)
    env = {"SLURM_JOB_NODELIST": "node[1-3]", "SLURM_TASKS_PER_NODE": "1(x3)"}
    got = nl.slurm_nodes(env, scontrol=scontrol)
    assert [h.name for h in got.hosts] == ["node1", "node2", "node3"]
    fatal = capture["stderr"].strip().splitlines()[-1]
    first = capture["stderr"].strip().splitlines()[0]
    assert fatal.startswith("scontrol: fatal: ")
    # the header's "nodes from ..." and the summary's note both name what scontrol said
    assert "built-in Slurm hostlist expander: `scontrol show hostnames` failed: " \
        in got.description
    assert f"{first} ... {fatal}" in got.description
    [note] = got.notes
    assert note.startswith("warning: SLURM_JOB_NODELIST=node[1-3] was expanded by the built-in")
    assert f"`{scontrol} show hostnames` failed: {first} ... {fatal}" in note


def test_what_both_refuse_is_a_usage_error_naming_both(tmp_path):
    scontrol = _stand_in_scontrol(tmp_path, NO_CONFIG["SLURM_CONF unset, no /etc/slurm/slurm.conf"])
    env = {"SLURM_JOB_NODELIST": "node[1-2]-ib", "SLURM_TASKS_PER_NODE": "1(x2)"}
    with pytest.raises(nl.NodeListError) as exc:
        nl.slurm_nodes(env, scontrol=scontrol)
    said = str(exc.value)
    assert "`scontrol show hostnames` said: scontrol: error: resolve_ctls_from_dns_srv" in said
    assert "Could not establish a configuration source" in said
    assert "the built-in Slurm hostlist expander: Invalid hostlist: node[1-2]-ib" in said


def test_a_working_scontrol_is_used_without_a_note(tmp_path):
    [capture] = [c for c in CAPTURES if c["expression"] == "gpu-[01-04,07]"]
    scontrol = _stand_in_scontrol(tmp_path, capture)
    got = nl.slurm_nodes({"SLURM_JOB_NODELIST": "gpu-[01-04,07]", "SLURM_GPUS_ON_NODE": "8"},
                         scontrol=scontrol)
    assert [h.name for h in got.hosts] == capture["stdout"].split()
    assert "(scontrol show hostnames;" in got.description and got.notes == []
    # scontrol's own refusal ("Invalid hostlist", exit 0) that the built-in expander shares
    [bad] = [c for c in CAPTURES if c["expression"] == "a[1-2]-ib,b3"]
    with pytest.raises(nl.NodeListError, match=r"said: Invalid hostlist: a\[1-2\]-ib,b3; the "
                                               r"built-in Slurm hostlist expander: Invalid"):
        nl.slurm_nodes({"SLURM_JOB_NODELIST": "a[1-2]-ib,b3", "SLURM_TASKS_PER_NODE": "1(x3)"},
                       scontrol=_stand_in_scontrol(tmp_path, bad))


def test_an_scontrol_that_does_not_answer_is_given_up_with_its_last_words(tmp_path):
    """A missing SLURM_CONF file: Slurm 22.05's scontrol retries for 60 s (the capture)."""
    capture = NO_CONFIG["SLURM_CONF=/nonexistent/slurm.conf"]
    assert capture["seconds"] >= 50
    scontrol = _stand_in_scontrol(tmp_path, {**capture, "stderr": capture["stderr"].splitlines(
        keepends=True)[0]}, sleep=60)
    with pytest.raises(nl.ScontrolFailed) as exc:
        nl.scontrol_hostnames("node[1-3]", scontrol, timeout=1.0)
    assert exc.value.said == ("no answer within 1 s (its last words: scontrol: error: "
                              "s_p_parse_file: cannot stat file /nonexistent/slurm.conf: No such "
                              "file or directory, retrying in 1sec up to 60sec)")
    with pytest.raises(nl.ScontrolFailed, match="did not run: "):
        nl.scontrol_hostnames("node[1-3]", str(tmp_path / "no-such-scontrol"))


# -- a DeepSpeed hostfile read from disk (load_hostfile): one sentence for each unusable file


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
    runner = pytest.importorskip("deepspeed.launcher.runner")
    assert parsed.deepspeed_resources == runner.fetch_hostfile(str(f))
    assert parsed.hosts == [Host("node2", 8, 2)]
