"""judge/env/envvars.py (CHECKLIST E1-E4, E6): .deepspeed_env read as DeepSpeed 0.19 reads it,
~/.bashrc early returns, secrets masked, values compared across nodes; and the verdicts on the
facts envprobe.py really reports, run here as a node runs it (tests/envnode.py): a home with
Debian's stock ~/.bashrc and a broken .deepspeed_env, temporary directories missing, not a
directory or read-only, `hccn_tool` printing the real captures."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import envnode
import pytest

from cluster_tests.core.testids import Scope
from cluster_tests.judge.env import envvars
from cluster_tests.judge.env.envvars import EnvCause, TmpdirFacts

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"


def _deepspeed_reads(text: str) -> dict[str, str]:
    """DeepSpeed 0.19's own loop (runner.py), to compare our reading with."""
    out = {}
    for var in text.splitlines(keepends=True):
        key, val = var.split("=", maxsplit=1)
        out[key.strip()] = val.strip()
    return out


def test_parse_matches_deepspeed_on_good_files():
    text = "NCCL_DEBUG=INFO\n PYTHONPATH = /a:/b \nX=a=b"
    assert envvars.parse_deepspeed_env(text) == _deepspeed_reads(text) == {
        "NCCL_DEBUG": "INFO", "PYTHONPATH": "/a:/b", "X": "a=b"}


@pytest.mark.parametrize("text,line", [("A=1\n\nB=2\n", 2), ("A=1\nNCCL_IB_DISABLE\n", 2),
                                       ("# my settings\nA=1\n", 1)])
def test_lines_without_equals_crash_deepspeed_and_are_errors(text, line):
    with pytest.raises(ValueError):
        _deepspeed_reads(text)
    findings = envvars.lint_deepspeed_env(text, "~/.deepspeed_env")
    assert [f.lineno for f in findings if f.error] == [line]


def test_lint_traps():
    findings = envvars.lint_deepspeed_env('# x=y\nexport A=1\nB="a b"\nC=$HOME/x\n1BAD=2\n', "f")
    by_line = {f.lineno: f for f in findings}
    assert by_line[1].error and "comment" in by_line[1].text
    assert not by_line[2].error and "bare name" in by_line[2].text
    assert not by_line[3].error and "quotes" in by_line[3].text
    assert not by_line[4].error and "expanded" in by_line[4].text
    assert by_line[5].error and "not a valid variable name" in by_line[5].text
    assert envvars.lint_deepspeed_env("A=1\nB=2", "f") == []


def test_secrets_masked_even_in_lint():
    findings = envvars.lint_deepspeed_env("HF_TOKEN hf_abc\n", "f")
    assert findings and "hf_abc" not in findings[0].text and "HF_TOKEN ****" in findings[0].text
    assert envvars.shown("MY_API_KEY", "s3cr3t") == "****"
    assert envvars.shown("NCCL_DEBUG", "INFO") == "INFO"
    assert envvars.shown("X", None) == "(unset)"
    table = {"n1": {"AWS_SECRET_ACCESS_KEY": "abc"}, "n2": {"AWS_SECRET_ACCESS_KEY": "def"}}
    assert "abc" not in envvars.side_by_side(table, ["AWS_SECRET_ACCESS_KEY"])


STOCK_BASHRC = """# ~/.bashrc: executed by bash(1) for non-login shells.

# If not running interactively, don't do anything
case $- in
    *i*) ;;
      *) return;;
esac
export PATH=/opt/venv/bin:$PATH
"""


def test_early_return_and_exports():
    assert envvars.early_return_line(STOCK_BASHRC) == 6
    assert envvars.export_line(STOCK_BASHRC, "PATH") == 8
    assert envvars.early_return_line('[ -z "$PS1" ] && return\n') == 1
    assert envvars.early_return_line("[[ $- != *i* ]] && return\n") == 1
    assert envvars.early_return_line("export A=1\n") is None
    assert envvars.early_return_line(None) is None


def test_differing_uses_majority_then_rank0():
    table = {"n1": {"A": "1", "B": "x"}, "n2": {"A": "1", "B": "y"}, "n3": {"A": "2"}}
    assert envvars.differing(table, "n3", prefer="n1") == ["A", "B"]
    assert envvars.differing(table, "n1", prefer="n1") == []
    assert envvars.differing(table, "n2", prefer="n1") == ["B"]  # x/y/unset tie: n1's value wins
    text = envvars.side_by_side(table, ["A"], mark="n3")
    assert "n3 <" in text and "(unset)" not in text


# -- E1, E2: what a node's files say ---------------------------------------------------------

@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A home with Debian's stock ~/.bashrc (PATH exported below its early return) and a
    .deepspeed_env that starts with a comment (DeepSpeed 0.19 stops on it)."""
    root = tmp_path_factory.mktemp("home")
    (root / ".bashrc").write_text(STOCK_BASHRC)
    (root / ".deepspeed_env").write_text("# my settings\nNCCL_DEBUG=INFO\nexport A=1\n")
    return root


def _files(home: Path, launch_dir: Path) -> envvars.EnvFiles:
    return envvars.EnvFiles.read(envnode.envprobe("envfiles", env={"HOME": str(home)},
                                                  launch_dir=str(launch_dir)))


def test_env_files_as_the_node_reads_them(home, tmp_path):
    files = _files(home, tmp_path)
    assert files.bashrc == STOCK_BASHRC and files.ds_env_name == ".deepspeed_env"
    assert list(files.present) == [str(home / ".deepspeed_env")]
    assert files.deepspeed_env[str(tmp_path / ".deepspeed_env")] is None
    # where the launch starts (node2 here), launch-wide: the runner exports it to every rank
    problem = envvars.judge_env_files("node2", files, "node2")
    assert problem is not None and problem.cause is EnvCause.ENV_FILE_BROKEN
    assert problem.item == "E2" and problem.nodes == ("node2",)
    assert problem.scope == Scope.LAUNCH_WIDE
    assert problem.message.startswith("node2: deepspeed's runner reads .deepspeed_env here, "
                                      "where the launch starts, and exports every line")
    env_file = home / ".deepspeed_env"
    assert f"{env_file}:1: " in problem.message
    assert f"{env_file}:3: " not in problem.message  # `export A=1`: a warning only
    # the fix names the file that holds the line, and which of the two it is
    assert problem.fix.startswith(f"on node2, in {env_file} (the home directory's): line 1: "
                                  "delete the line")
    # on a node the launch does not start on, the file is not read: no red
    assert envvars.judge_env_files("node3", files, "node2") is None
    (tmp_path / ".deepspeed_env").write_text("NCCL_DEBUG=INFO\nbroken\n")
    (home / ".deepspeed_env").unlink()
    launch_dir = envvars.judge_env_files("node2", _files(home, tmp_path), "node2")
    assert launch_dir is not None and launch_dir.fix.startswith(
        f"on node2, in {tmp_path / '.deepspeed_env'} (the launch directory's): line 2: ")
    (tmp_path / ".deepspeed_env").write_text("NCCL_DEBUG=INFO\n")
    assert envvars.judge_env_files("node2", _files(home, tmp_path), "node2") is None


def test_required_env_names_the_early_return(home, tmp_path):
    bashrc = _files(home, tmp_path).bashrc
    problem = envvars.judge_required_env("node2", ["HF_HOME"], None, "/usr/bin:/bin", bashrc,
                                         "/usr/bin/python3 3.11.2")
    assert problem is not None and problem.cause is EnvCause.NOT_SET and problem.item == "E1"
    assert problem.message.splitlines() == [
        "node2: as pdsh's non-interactive shell sees it, `deepspeed` is not on PATH "
        "(/usr/bin:/bin); not set: HF_HOME",
        "  ~/.bashrc sets PATH on line 8, below the early return for non-interactive shells "
        "on line 6: pdsh never sees it",
        "  python found there: /usr/bin/python3 3.11.2"]
    assert problem.fix == ("on node2: move the exports above line 6 of ~/.bashrc (or delete "
                           "that return)")
    off = envvars.judge_required_env("node2", [], None, None, None, "/usr/bin/python3 3.11.2")
    assert off is not None and off.cause is EnvCause.DEEPSPEED_OFF_PATH
    assert "(unset)" in off.message and "add the exports to ~/.bashrc" in off.fix
    assert envvars.judge_required_env("node2", [], "/v/bin/deepspeed", "/v/bin", bashrc,
                                      "p") is None
    warned = envvars.deepspeed_off_path("node2", "/usr/bin", bashrc, "/v/bin/python",
                                        "test_launch_rehearsal[node2]")
    assert "~/.bashrc sets PATH on line 8, below its early return for non-interactive shells "\
           "on line 6" in warned and "see test_launch_rehearsal[node2]" in warned


def test_settings_that_differ_are_red_on_the_odd_node():
    table: envvars.Table = {"n1": {"NCCL_IB_DISABLE": "1"}, "n2": {"NCCL_IB_DISABLE": "1"},
                            "n3": {"NCCL_IB_DISABLE": None}}
    assert envvars.judge_env_agrees("n1", table, envvars.differing(table, "n1"), "n1") is None
    problem = envvars.judge_env_agrees("n3", table, envvars.differing(table, "n3"), "n1")
    assert problem is not None and problem.cause is EnvCause.SETTINGS_DIFFER
    assert problem.message.startswith("n3: 1 setting(s) differ from what most nodes have")
    assert "NCCL_IB_DISABLE" in problem.message and "in ~/.deepspeed_env on n1" in problem.fix


# -- E4: the NPU links ------------------------------------------------------------------------

def test_npu_links_from_hccn_tool(tmp_path):
    """A `hccn_tool` that prints the real captures: NPU 0's link up, NPU 1's down."""
    tool = tmp_path / "hccn_tool"
    up, down = SAMPLES / "hccn-tool-link-g-up.txt", SAMPLES / "hccn-tool-link-g-down.txt"
    tool.write_text(f'#!/bin/sh\n[ "$2" = 0 ] && exec cat {up}\nexec cat {down}\n')
    tool.chmod(0o755)
    facts = envvars.AscendFacts.read(envnode.envprobe(
        "ascend", env={"PATH": f"{tmp_path}:{os.environ['PATH']}", "HCCL_CONNECT_TIMEOUT": "1200"},
        devices=[0, 1]))
    assert facts.hccn_tool == str(tool) and facts.env["HCCL_CONNECT_TIMEOUT"] == "1200"
    problem = envvars.judge_npu_links("node2", facts)
    assert problem is not None and problem.cause is EnvCause.NPU_LINKS_DOWN
    assert problem.message == "node2: NPU network links not up:\n  NPU 1: link status: DOWN"
    assert problem.item == "E4" and problem.fix.startswith("on node2: check cabling")
    healthy = dataclasses.replace(facts, links={0: facts.links[0]})
    assert envvars.judge_npu_links("node2", healthy) is None


# -- E6: the temporary directory --------------------------------------------------------------

def _tmpdir(value: Path | None, *, read_only: Path | None = None) -> TmpdirFacts:
    """envprobe.py's `tmpdir`, given the TMPDIR the launch exports (None: this shell's)."""
    if value is None:
        return TmpdirFacts.read(envnode.envprobe("tmpdir", read_only=read_only))
    return TmpdirFacts.read(envnode.envprobe("tmpdir", read_only=read_only, tmpdir=str(value)))


def test_tmpdir_healthy_and_unset_are_fine(tmp_path):
    unset = _tmpdir(None)
    assert unset.value == os.environ.get("TMPDIR") and not unset.from_launch
    assert unset.effective is not None
    assert envvars.judge_tmpdir("node2", unset, min_free_mb=0) == envvars.TmpVerdict(None, [])
    given = _tmpdir(tmp_path)
    assert given.from_launch and given.effective is not None
    assert given.effective.path == str(tmp_path) and given.effective.writable
    assert envvars.judge_tmpdir("node2", given, min_free_mb=0) == envvars.TmpVerdict(None, [])


def test_tmpdir_missing_is_a_warning_naming_the_line_and_the_fallback(tmp_path):
    facts = dataclasses.replace(_tmpdir(tmp_path / "job7"), from_launch=False)
    assert facts.tmpdir is not None and not facts.tmpdir.exists and facts.effective is not None
    v = envvars.judge_tmpdir("node2", facts, f"# rc\nexport PATH=/x:$PATH\nexport "
                                              f"TMPDIR={tmp_path}/job7\n", min_free_mb=0)
    assert v.problem is None
    [msg] = v.warnings
    assert msg.startswith(f"TMPDIR={tmp_path}/job7 (from ~/.bashrc line 3) does not exist: "
                          f"Python, gcc and bash fall back to {facts.effective.path}")


def test_tmpdir_from_the_launch_not_a_dir_not_writable_are_warnings(tmp_path):
    (tmp_path / "file").write_text("")
    v = envvars.judge_tmpdir("node2", _tmpdir(tmp_path / "file"), min_free_mb=0)
    assert v.problem is None
    assert "(from the launch's .deepspeed_env) is not a directory" in v.warnings[0]
    (tmp_path / "ro").mkdir()
    facts = _tmpdir(tmp_path / "ro", read_only=tmp_path / "ro")
    v = envvars.judge_tmpdir("node2", facts, min_free_mb=0)
    assert v.problem is None
    assert "is not writable (OSError: Read-only file system)" in v.warnings[0], v.warnings


def test_tmpdir_red_where_the_tools_really_write(tmp_path):
    real = _tmpdir(tmp_path)
    assert real.effective is not None
    small = dataclasses.replace(real, effective=dataclasses.replace(real.effective,
                                                                    free_bytes=300 << 20))
    problem = envvars.judge_tmpdir("node2", small).problem
    assert problem is not None and problem.cause is EnvCause.TMPDIR_FULL and problem.item == "E6"
    assert problem.message == (f"node2: {tmp_path}, the temporary directory here, has 300 MiB "
                               f"free, below 1024 MiB: {envvars._TMP_USERS} write there "
                               f"(\"No space left on device\")")
    assert problem.fix.startswith(f"on node2: free space (du -xsh {tmp_path}/*")
    assert envvars.judge_tmpdir("node2", small, min_free_mb=256).problem is None
    full = dataclasses.replace(real, effective=dataclasses.replace(
        real.effective, writable=False, error="OSError: No space left on device"))
    problem = envvars.judge_tmpdir("node2", full).problem
    assert problem is not None and problem.cause is EnvCause.TMPDIR_UNWRITABLE
    assert f"{tmp_path}, the temporary directory here, takes no file: OSError: No space " \
           f"left" in problem.message
    none = dataclasses.replace(real, effective=None, effective_error=(
        "[Errno 2] No usable temporary directory found in ['/tmp']"))
    problem = envvars.judge_tmpdir("node2", none).problem
    assert problem is not None and problem.cause is EnvCause.NO_TMPDIR
    assert problem.message.startswith("node2: Python finds no usable temporary directory: "
                                      "[Errno 2] No usable")
