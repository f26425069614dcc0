"""Node-list sources (cluster_tests.core.nodelist): Slurm hostlists exactly as Slurm expands them,
SLURM_* slot counts, MPI hostfiles linted like H1, SkyPilot, and the choice between sources."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paths import SAMPLES

from cluster_tests.core import nodelist as nl
from cluster_tests.judge.hostfile import hostparse as hf

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
    assert by[(7, "M1-no-slots")].severity == hf.ERROR
    assert by[(7, "M1-no-slots")].fixed_line == "node4 slots=<N>"
    assert by[(8, "M1-hostname")].severity == hf.ERROR
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
    assert any(f.line == 2 and f.severity == hf.ERROR for f in parse.findings)


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
