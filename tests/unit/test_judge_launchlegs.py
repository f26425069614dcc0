"""launchenv reproduces what DeepSpeed's runner sends through pdsh: compared with DeepSpeed's own
`runner.main()` (subprocess calls captured, nothing launched) on generated environments and
`.deepspeed_env` files; and the per-node verdicts on pdsh output shaped like the real thing
(the label rules were observed with pdsh on the simulated cluster)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import envnode
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_tests.judge.env import launchlegs
from cluster_tests.judge.env.launchlegs import LaunchCause

runner = pytest.importorskip("deepspeed.launcher.runner")
multinode = pytest.importorskip("deepspeed.launcher.multinode_runner")


class _Done(Exception):
    pass


def deepspeed_pdsh_cmd(monkeypatch, tmp_path, env: dict[str, str], files: dict[str, str],
                       hosts=("node1", "node2")) -> list[str]:
    """The pdsh command DeepSpeed 0.19's runner.main() builds, in a launch directory with
    `files` (name -> text; "~/..." in a fake home), with exactly `env` as its environment."""
    home, launch = tmp_path / "home", tmp_path / "launch"
    home.mkdir(exist_ok=True)
    launch.mkdir(exist_ok=True)
    for old in (home / ".deepspeed_env", launch / ".deepspeed_env"):
        old.unlink(missing_ok=True)  # hypothesis reuses tmp_path across examples
    for name, text in files.items():
        target = home / name[2:] if name.startswith("~/") else launch / name
        target.write_text(text)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in hosts))
    captured: list[list[str]] = []

    def popen(cmd, env=None, **kw):
        captured.append(list(cmd))
        raise _Done

    monkeypatch.setattr(subprocess, "check_call", lambda *a, **k: 0)
    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(runner, "DEEPSPEED_ENVIRONMENT_PATHS", [str(home), "."])
    monkeypatch.chdir(launch)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        with pytest.raises(_Done):
            runner.main(["--hostfile", str(hostfile), "--master_addr", hosts[0], "train.py"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return captured[0]


def ours(tmp_path, env, files, hosts=("node1", "node2")) -> list[str]:
    launch = str(tmp_path / "launch")
    env_files = []
    for d, prefix in ((tmp_path / "home", "~/"), (tmp_path / "launch", "")):
        for name, text in files.items():
            if name.startswith("~/") == (prefix == "~/"):
                env_files.append((str(d / name.removeprefix("~/")), text))
    # CPU accelerator: no extra prefixes
    exports = launchlegs.launch_exports(env, launch, env_files)
    return (launchlegs.pdsh_argv(list(hosts))
            + launchlegs.remote_words(exports, launch, sys.executable, []))


ENV = {"PATH": "/usr/bin:/bin", "HOME": "/root", "DS_ACCELERATOR": "cpu"}


@pytest.mark.parametrize("env, files", [
    ({}, {}),
    ({"PYTHONPATH": "/opt/lib", "PYTHONUNBUFFERED": "1", "NCCL_DEBUG": "INFO", "UCX_TLS": "rc"},
     {}),
    ({"MLFLOW_TRACKING_URI": "http://x:5000/a b", "MV2_X": "$HOME"},
     {"~/.deepspeed_env": "NCCL_IB_HCA=mlx5_0:1\nHF_HOME = /data/hf \nA=b=c\n",
      ".deepspeed_env": "NCCL_DEBUG=WARN\r\nPYTHONPATH=/x\n"}),
    ({"AISC_JOB_NAME": "j", "UCX_NET_DEVICES": "mlx5_0:1", "UCX_TLS": "rc"}, {}),
])
def test_the_pdsh_command_is_deepspeeds(monkeypatch, tmp_path, env, files):
    theirs = deepspeed_pdsh_cmd(monkeypatch, tmp_path, {**ENV, **env}, files)
    mine = ours(tmp_path, {**ENV, **env}, files)
    # DeepSpeed's own words go on with `-u -m deepspeed.launcher.launch ...`; ours stop at the
    # interpreter (the rehearsal puts its check there)
    assert theirs[:len(mine)] == mine
    assert theirs[len(mine):len(mine) + 3] == ["-u", "-m", "deepspeed.launcher.launch"]


_values = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00\n\r"),
                  max_size=20)
_names = st.from_regex(r"(PYTHON|NCCL|UCX|MV2|MLFLOW|HCCL|OTHER)_[A-Z]{1,4}", fullmatch=True)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=st.dictionaries(_names, _values, max_size=5),
       lines=st.lists(st.tuples(_names, _values), max_size=4))
def test_generated_environments_and_env_files(monkeypatch, tmp_path, env, lines):
    files = {".deepspeed_env": "".join(f"{k}={v}\n" for k, v in lines)} if lines else {}
    theirs = deepspeed_pdsh_cmd(monkeypatch, tmp_path, {**ENV, **env}, files)
    mine = ours(tmp_path, {**ENV, **env}, files)
    assert theirs[:len(mine)] == mine


def test_a_line_without_equals_stops_deepspeed_and_us(monkeypatch, tmp_path):
    files = {"~/.deepspeed_env": "NCCL_DEBUG=INFO\n\nNCCL_IB_DISABLE\n"}
    with pytest.raises(ValueError, match="not enough values to unpack"):
        deepspeed_pdsh_cmd(monkeypatch, tmp_path, dict(ENV), files)
    with pytest.raises(launchlegs.EnvFileCrash) as exc:
        ours(tmp_path, dict(ENV), files)
    assert exc.value.lineno == 2  # the blank line comes first


def test_quote_value_is_add_export():
    class Fake:
        exports: dict

    for value in ["plain", "a b", 'x"y', "$HOME/x", " padded ", "a=b:c,d/e.f@g%h+i-j", ""]:
        f = Fake()
        f.exports = {}
        multinode.MultiNodeRunner.add_export(f, "K", value)
        assert f.exports["K"] == launchlegs.quote_value(value)


def test_export_problems():
    assert launchlegs.export_problems({"A": "1", "B": '"x y"'}) == []
    bad = launchlegs.export_problems({"1X": "1"})
    assert bad and "'1X' is not a valid variable name" in bad[0]
    assert "cannot be parsed by a shell" in launchlegs.export_problems({"A": '"a "b"'})[0]


# -- pdsh's output ---------------------------------------------------------------------------

def test_labels_with_the_common_domain_stripped():
    """Observed on the sim: `pdsh -w node2.w.default.svc,node1 echo hi` prints `node2: hi`,
    while hosts of different domains and addresses keep their full names."""
    hosts = ["node1.w.svc", "node2.w.svc", "10.0.0.3", "node10.w.svc"]
    out = launchlegs.split_pdsh_output(
        "node1: a\nnode10.w.svc: b\n10.0.0.3: c\npdsh@node1: node2: ssh exited with exit code 255\n"
        "node2: ssh: connect to host node2.w.svc port 22: Connection refused\n", hosts)
    assert out["node1.w.svc"].lines == ["a"]
    assert out["node10.w.svc"].lines == ["b"]
    assert out["10.0.0.3"].lines == ["c"]
    assert out["node2.w.svc"].exit_code == 255
    assert "Connection refused" in out["node2.w.svc"].lines[0]


def _leg(text: str, node="node3"):
    out = launchlegs.split_pdsh_output(text, ["node1", "node2", "node3"])[node]
    return launchlegs.judge_leg(node, out, launchlegs.LegContext("node1", "/venv/bin/python",
                                                                 "/root", 60), "ssh node3 ...")


def test_verdicts():
    import json

    ok = {"cwd": "/root", "steps": [{"step": "import torch", "ok": True}], "packages": {}}
    assert _leg(f"node3: CT_REHEARSAL:{json.dumps(ok)}\n").kind == "ok"
    moved = dict(ok, cwd="/home/u")
    leg = _leg("node3: bash: line 1: cd: /root: No such file or directory\n"
               f"node3: CT_REHEARSAL:{json.dumps(moved)}\n")
    assert leg.kind == "fail" and "`cd /root` failed there" in leg.text
    assert leg.fix.startswith("on node3: create or mount /root")
    assert leg.cause is LaunchCause.LAUNCH_DIR_MISSING
    missing = _leg("node3: bash: line 1: /venv/bin/python: No such file or directory\n"
                   "pdsh@node1: node3: ssh exited with exit code 127\n")
    assert missing.kind == "fail" and "which does not exist on node3" in missing.text
    assert missing.cause is LaunchCause.INTERPRETER_MISSING
    ssh = _leg("node3: Host key verification failed.\n"
               "pdsh@node1: node3: ssh exited with exit code 255\n")
    assert ssh.kind == "skip" and "see test_pdsh[node1->node3]" in ssh.text
    hung = _leg("node3: CT_STEP:import torch\npdsh@node1: node3: command timeout\n")
    assert hung.kind == "fail" and "stuck in `import torch`" in hung.text
    assert hung.cause is LaunchCause.LAUNCH_HANGS
    stray = dict(ok, steps=[{"step": "import deepspeed.launcher.launch", "ok": False,
                             "error": "ModuleNotFoundError: No module named 'deepspeed.launcher'"}],
                 packages={"deepspeed": {"imported": True, "file": "/root/deepspeed/__init__.py",
                                         "version": None, "owned": None}})
    leg = _leg(f"node3: CT_REHEARSAL:{json.dumps(stray)}\n")
    assert leg.kind == "fail" and "remove or rename /root/deepspeed" in leg.fix
    assert _leg("node1: CT_REHEARSAL:{}\n").kind == "fail"  # nothing from node3 at all


def test_whether_a_leg_reached_its_host():
    """S5 reads rank 0's legs from the rehearsal's pdsh output: reached where anything of the
    command's own came back, not where ssh failed, and undecided where nothing did (S5 then runs
    its own pdsh)."""
    def reached(text: str):
        outputs = launchlegs.split_pdsh_output(text, ["node1", "node2", "node3"])
        return launchlegs.leg_reached(outputs["node3"])

    assert reached("node3: CT_STEP:import deepspeed.launcher.launch\nnode3: CT_REHEARSAL:{}\n")
    # the interpreter is missing there: ssh got in, the shell said so
    assert reached("node3: bash: line 1: /venv/bin/python: No such file or directory\n"
                   "pdsh@node1: node3: ssh exited with exit code 127\n")
    assert reached("node3: CT_STEP:import torch\npdsh@node1: node3: command timeout\n")
    assert reached("node3: Host key verification failed.\n"
                   "pdsh@node1: node3: ssh exited with exit code 255\n") is False
    assert reached("node3: ssh: connect to host node3 port 22: Connection refused\n"
                   "pdsh@node1: node3: ssh exited with exit code 255\n") is False
    assert reached("pdsh@node1: node3: ssh exited with exit code 255\n") is False
    # a leg pdsh ended before the host said anything: a hung ~/.bashrc or a hung ssh, unknown
    assert reached("pdsh@node1: node3: command timeout\n") is None
    assert reached("node1: CT_REHEARSAL:{}\n") is None  # nothing from node3 at all


def test_a_hung_leg_says_where_it_hung(tmp_path) -> None:
    """The rehearsal's code word (measure/rehearsal.py) run for real with a `deepspeed` whose
    import never returns: its faulthandler fires 5 s before CT_DEADLINE (1 s floor here), and
    the red of a leg that pdsh timed out says where the leg was."""
    import time

    from cluster_tests.measure.rehearsal import _code_word

    pkg = tmp_path / "deepspeed"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import time\ntime.sleep(60)\n")
    word = _code_word(6, "ct-run-0123456789ab")
    assert word.startswith("'CT_DEADLINE=6;") and word.endswith("#ct-run-0123456789ab'")
    proc = subprocess.Popen([sys.executable, "-u", "-c", word[1:-1]], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(4)  # the dump comes at 1 s
    finally:
        proc.kill()
        said, _ = proc.communicate()
    out = launchlegs.HostOutput(lines=said.splitlines(),
                        pdsh_errors=["node2: command timeout (60 secs) expired"])
    assert out.timed_out
    ctx = launchlegs.LegContext("node1", sys.executable, str(tmp_path), 60)
    leg = launchlegs.judge_leg("node2", out, ctx, "ssh node2 true")
    assert leg.kind == "fail"
    assert "(stuck in `import deepspeed.launcher.launch`)" in leg.text, leg.text
    assert "where it was, 5 s before: importing deepspeed, at __init__.py:2 <module>" in leg.text, \
        leg.text
    assert "File \"" not in leg.text.split("it said:")[1]  # the dump is not repeated raw


# -- the launch on the rank-0 node: envprobe.py's `launch`, run here as a node runs it ---------

def _plan(launch_dir, **params) -> launchlegs.LaunchPlan:
    return launchlegs.LaunchPlan.read(envnode.envprobe(
        "launch", launch_dir=str(launch_dir), import_timeout=120, **params))


DEEPSPEED = os.path.join(os.path.dirname(sys.executable), "deepspeed")


def test_a_launch_that_starts_and_what_it_exports(tmp_path):
    (tmp_path / ".deepspeed_env").write_text("NCCL_DEBUG=INFO\n")
    plan = _plan(tmp_path, deepspeed=DEEPSPEED)
    assert plan.launch_dir_ok and plan.deepspeed == DEEPSPEED and plan.facts is not None
    assert launchlegs.judge_plan("node1", plan) is None
    facts = plan.facts
    assert facts.error is None and facts.cwd == str(tmp_path) and facts.deepspeed
    assert (str(tmp_path / ".deepspeed_env"), "NCCL_DEBUG=INFO\n") in facts.env_files
    assert facts.rules().export_prefixes[:len(facts.export_prefixes)] == facts.export_prefixes
    exports = launchlegs.launch_exports(facts.env, facts.cwd, facts.env_files, facts.rules())
    assert exports["NCCL_DEBUG"] == "INFO"


def test_a_launch_that_cannot_start(tmp_path):
    plan = _plan(tmp_path / "gone", deepspeed=DEEPSPEED)
    assert not plan.launch_dir_ok and plan.facts is None
    leg = launchlegs.judge_plan("node1", plan)
    assert leg is not None and leg.kind == "fail" and leg.cause is LaunchCause.LAUNCH_DIR_MISSING
    assert f"the launch directory {tmp_path / 'gone'} does not exist there" in leg.text
    problem = launchlegs.leg_problem("node1", leg, "", "deepspeed --hostfile h train.py")
    assert problem.item == "E5" and problem.cause is LaunchCause.LAUNCH_DIR_MISSING
    assert problem.message.endswith("\n  the launch rehearsed: deepspeed --hostfile h train.py")
    assert problem.fix.startswith("create it, or pass the directory")
    # a stray `deepspeed` directory in the launch directory shadows the installed one
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text("")
    leg = launchlegs.judge_plan("node1", _plan(tmp_path, deepspeed=DEEPSPEED))
    assert leg is not None and leg.cause is LaunchCause.IMPORT_FAILS
    assert "DeepSpeed's launcher does not import with" in leg.text
    assert leg.fix.endswith(f"or remove what shadows it in {tmp_path}")
    # no `deepspeed` at all: E1's red holds the cause
    nothing = dataclasses.replace(plan, deepspeed=None)
    leg = launchlegs.judge_plan("node1", nothing)
    assert leg is not None and leg.kind == "skip" and leg.root == "test_required_env[node1]"
