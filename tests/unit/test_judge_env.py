"""Pure logic of the E checks: .deepspeed_env read as DeepSpeed 0.19 reads it, ~/.bashrc early
returns, secrets masked, values compared across nodes."""

from __future__ import annotations

import pytest

from cluster_tests.judge.env import envvars


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


# -- E6: the temporary directory --------------------------------------------------------------

def _dir(path: str, **kw) -> dict:
    return {"path": path, "exists": True, "is_dir": True, "writable": True,
            "free_bytes": 50 << 30, **kw}


def test_tmpdir_healthy_and_unset_are_fine():
    assert (envvars.judge_tmpdir({"TMPDIR": None, "effective": _dir("/tmp")})
            == envvars.TmpVerdict([], []))
    assert envvars.judge_tmpdir({"TMPDIR": "/scratch", "tmpdir": _dir("/scratch"),
                            "effective": _dir("/scratch")}) == envvars.TmpVerdict([], [])


def test_tmpdir_missing_is_a_warning_naming_the_line_and_the_fallback():
    facts = {"TMPDIR": "/scratch/job7", "from_launch": False,
             "tmpdir": {"path": "/scratch/job7", "exists": False, "is_dir": False},
             "effective": _dir("/tmp")}
    v = envvars.judge_tmpdir(facts, "# rc\nexport PATH=/x:$PATH\nexport TMPDIR=/scratch/job7\n")
    assert v.problems == []
    [msg] = v.warnings
    assert msg.startswith("TMPDIR=/scratch/job7 (from ~/.bashrc line 3) does not exist: Python, "
                          "gcc and bash fall back to /tmp")


def test_tmpdir_from_the_launch_not_a_dir_not_writable_are_warnings():
    base = {"TMPDIR": "/t", "from_launch": True, "effective": _dir("/tmp")}
    v = envvars.judge_tmpdir({**base, "tmpdir": _dir("/t", is_dir=False)})
    assert v.problems == []
    assert "(from the launch's .deepspeed_env) is not a directory" in v.warnings[0]
    v = envvars.judge_tmpdir({**base,
                              "tmpdir": _dir("/t", writable=False, error="PermissionError: x")})
    assert "is not writable (PermissionError: x)" in v.warnings[0]


def test_tmpdir_red_where_the_tools_really_write():
    small = {"TMPDIR": None, "effective": _dir("/tmp", free_bytes=300 << 20)}
    [msg] = envvars.judge_tmpdir(small).problems
    assert "/tmp, the temporary directory here, has 300 MiB free, below 1024 MiB" in msg
    assert "du -xsh /tmp/*" in msg
    assert envvars.judge_tmpdir(small, min_free_mb=256).problems == []
    big = {**small, "effective": _dir("/tmp", free_bytes=1 << 30)}
    assert envvars.judge_tmpdir(big).problems == []
    full = {"TMPDIR": None, "effective": _dir("/tmp", writable=False,
                                              error="OSError: No space left on device")}
    [msg] = envvars.judge_tmpdir(full).problems
    assert "/tmp, the temporary directory here, takes no file: OSError: No space left" in msg
    [msg] = envvars.judge_tmpdir({"TMPDIR": None, "effective_error":
                             "[Errno 2] No usable temporary directory found in ['/tmp']"}).problems
    assert msg.startswith("Python finds no usable temporary directory: [Errno 2] No usable")
