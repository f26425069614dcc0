"""T1/T2 end to end on the simulated cluster (3 nodes, slots=1, CPU, gloo): green when healthy;
each injected fault reds exactly the right test with the node and the cause; nothing of ours is
left running on any node afterwards, Ctrl-C included.

Run: .venv/bin/python -m pytest tests/e2e/test_e2e_training.py -p no:cacheprovider -q
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from suite import run_suite

from cluster_tests.core.settings import Settings, TrainingSettings
from cluster_tests.judge.training import trainargv as targv
from cluster_tests.judge.training import traindiag as tdiag
from cluster_tests.judge.training import trainexplain as tx
from cluster_tests.measure import trainruns as trr

pytest.importorskip("deepspeed")

DEADLINE = 30
ARGS = ("-m", "training", "--training-steps", "10", "--training-deadline", str(DEADLINE))
T1 = {f"test_train_single_node[node{i}]" for i in (1, 2, 3)}
T2 = "test_train_multi_node"
# The launcher is killed at deadline + grace (max(20 s, deadline/4)).
LIMIT = DEADLINE + 20


# --------------------------------------------------------------------------- pure parts


def _settings(**values):
    base: dict[str, Any] = {"zero_stage": 0, "deepspeed_args": "", "steps": 10, "deadline": 30.0}
    base.update(values)
    return Settings(training=TrainingSettings(**base))


def test_config_checks_its_options():
    cfg = trr.config_from_settings(_settings(deepspeed_args="--ssh_port 2222"), environ={})
    assert cfg.launcher_args == ("--ssh_port", "2222") and cfg.forward_env == ()
    assert cfg.dist_timeout == 15 and cfg.limit == 50
    with pytest.raises(trr.ConfigError, match="--zero-stage must be 0, 1, 2 or 3"):
        trr.config_from_settings(_settings(zero_stage=4), environ={})
    with pytest.raises(trr.ConfigError, match="must not set --include"):
        trr.config_from_settings(_settings(deepspeed_args="--include=node1"), environ={})
    with pytest.raises(trr.ConfigError, match="--deepspeed-args"):
        trr.config_from_settings(_settings(deepspeed_args="'unclosed"), environ={})
    fwd = trr.config_from_settings(_settings(), environ={"DS_ACCELERATOR": "cpu", "X": "1"})
    assert fwd.forward_env == (("DS_ACCELERATOR", "cpu"),)


def test_command_is_sigkilled_at_the_limit_and_carries_the_run_dir():
    cfg = trr.config_from_settings(_settings(), environ={"DS_ACCELERATOR": "cpu"})
    runs = trr.TrainingRuns(None, cfg, None)  # type: ignore[arg-type]
    d = runs.run_dir("t1-node1")
    argv = targv.single_node_argv("python3", f"{d}/train_smoke.py", 1, 29500, ["--run-id", "x y"])
    cmd = runs._command(d, argv)
    assert cmd.startswith(f"cd {d} && echo CT_LAUNCH")
    assert f"exec timeout -s KILL {cfg.limit} env DS_ACCELERATOR=cpu python3 -u -m " in cmd
    assert "'x y'" in cmd
    pattern, glob = runs._pattern("t1-node1")
    assert glob == d and pattern.endswith("t1-node1/") and pattern in cmd
    assert runs._pattern(None)[1] == f"/tmp/ct-train-{runs.session_id}-*"
    assert trr._ere("ct-train-a.b-t1/") == "ct-train-a\\.b-t1/"


PDSH_PUBLICKEY = """\
node1: CT_SMOKE {"event": "start", "rank": 0, "world_size": 3, "host": "node1"}
node3: root@node3: Permission denied (publickey).
pdsh@node1: node3: ssh exited with exit code 255
"""


def test_t2_message_names_the_pair_and_keeps_consequences_short():
    cfg = trr.config_from_settings(_settings(), environ={})
    launch = tx.Launch("T2", "node1", ["node1", "node2", "node3"], 3, "cmd", text=PDSH_PUBLICKEY,
                        exit_status=None, seconds=4.0, stopped="ssh-publickey")
    launch.diagnoses = tdiag.diagnose(PDSH_PUBLICKEY, 3, ["node1", "node2", "node3"])
    roots, rest = tdiag.root_causes(launch.diagnoses)
    assert [d.kind for d in roots] == ["ssh-publickey"]
    assert "ssh-exit" in {d.kind for d in rest}  # the same node's ssh failure, said once
    msg = tx.launch_failed(launch, cfg).text()
    assert "node1 -> node3: ssh key login refused" in msg
    assert "test_ssh_trust[node1->node3]" in msg and "stopped after 4.0 s" in msg
    assert tx.short_cause(launch).startswith("ssh key login refused")


def test_exit_code_of_a_remote_launch_is_not_called_an_ssh_failure():
    diags = tdiag.diagnose("pdsh@node1: node2: ssh exited with exit code 4\n",
                           hosts=["node1", "node2"])
    assert diags[0].kind == "ssh-exit" and "exited with code 4" in diags[0].cause
    assert "ssh leg" not in diags[0].cause


# --------------------------------------------------------------------------- on the sim


def _ours_left(sim) -> list[str]:
    """train_smoke processes (and launchers of it) running inside this sim's nodes; processes of
    other sims and local runs on the same machine (one process table) are not ours."""
    return [str(p) for p in sim.processes() if "train_smoke" in p.cmdline]


def _no_leftovers(sim, wait: float = 5.0) -> None:
    end = time.monotonic() + wait
    left = _ours_left(sim)
    while left and time.monotonic() < end:
        time.sleep(0.5)
        left = _ours_left(sim)
    assert not left, left
    # DeepSpeed's CPU all-reduce never unlinks its 64 MiB a rank in /dev/shm: the job does, once
    # every rank has it mapped, and the cleanup of a job killed before that
    shm = {nd.name: [f for f in sim.exec(nd.name, ["ls", "/dev/shm"]).stdout.split()
                     if f.startswith("deepspeed_allreduce_buffer")] for nd in sim.nodes}
    assert not any(shm.values()), shm


def test_healthy_cluster_trains(healthy_sim):
    # DS_ACCELERATOR where pytest runs is passed on to every rank (T2: .deepspeed_env).
    result = run_suite(healthy_sim, *ARGS, env={"DS_ACCELERATOR": "cpu"})
    assert result.returncode == 0, result.describe()
    assert result.passed == T1 | {T2}, result.describe()
    props = result.properties[T2]
    assert props["ranks"] == "3" and props["rank0"] == "node1"
    assert {"loss_rank0", "loss_rank1", "loss_rank2"} <= set(props)
    print(f"pytest -m training on the healthy sim: {result.seconds:.1f} s "
          f"(T2 {props['seconds']} s)")
    _no_leftovers(healthy_sim)


def test_broken_trust_fails_t2_fast_naming_the_pair(healthy_sim):
    healthy_sim.remove_authorized_key("node3", from_node="node1")
    result = run_suite(healthy_sim, *ARGS)
    assert result.failed == {T2}, result.describe()
    assert result.passed == T1
    msg = result.message(T2)
    assert "node1 -> node3" in msg and "Permission denied (publickey)" in msg, msg
    assert "test_ssh_trust[node1->node3]" in msg
    assert "stopped after" in msg
    # no waiting for the rendezvous to time out (PITFALLS 8)
    assert float(result.properties[T2]["seconds"]) < 15, msg
    _no_leftovers(healthy_sim)


def test_firewall_dropping_high_ports_fails_t1_on_loopback(healthy_sim):
    # The rule has no -i: it also drops the node's own loopback rendezvous, so T1 already fails.
    healthy_sim.iptables("node3",
                         ["-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "DROP"])
    result = run_suite(healthy_sim, *ARGS)
    assert result.failed == {"test_train_single_node[node3]"}, result.describe()
    msg = result.message("test_train_single_node[node3]")
    assert "node3: this node cannot connect to the rendezvous master 127.0.0.1:29500" in msg, msg
    assert "iptables -I INPUT -i lo -j ACCEPT" in msg
    assert result.outcomes[T2] == "skipped"
    assert ("blocked by test_train_single_node[node3]: node3 cannot train alone"
            in result.message(T2))
    _no_leftovers(healthy_sim)


def test_firewall_on_the_network_fails_t2_within_deadline_naming_the_node(healthy_sim):
    healthy_sim.iptables(
        "node3", ["-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", "1024:65535", "-j", "DROP"]
    )
    result = run_suite(healthy_sim, *ARGS)
    assert result.failed == {T2}, result.describe()
    assert result.passed == T1
    msg = result.message(T2)
    # T2 launches as the user does (no --master_addr): DeepSpeed derives node1's address
    master = healthy_sim.nodes[0].address
    assert f"node3: this node cannot connect to the rendezvous master {master}:29500" in msg, msg
    assert f"nc -vz -w 3 {master} 29500" in msg
    assert float(result.properties[T2]["seconds"]) < LIMIT, msg
    _no_leftovers(healthy_sim)


def test_missing_module_fails_t1_of_that_node_and_skips_t2(healthy_sim):
    healthy_sim.append_bashrc("node2", "export PATH=/usr/bin:/bin\n")
    result = run_suite(healthy_sim, *ARGS)
    assert result.failed == {"test_train_single_node[node2]"}, result.describe()
    msg = result.message("test_train_single_node[node2]")
    assert "node2: deepspeed is not importable" in msg, msg
    assert "python=/usr/bin/python3" in msg and "No module named 'deepspeed'" in msg
    assert result.outcomes[T2] == "skipped"
    skip = result.message(T2)
    assert "node2" in skip and "deepspeed is not importable" in skip, skip
    _no_leftovers(healthy_sim)


def test_t1_at_its_deadline_shows_where_the_rank_was(healthy_sim):
    """A job that cannot finish within --training-deadline (endless steps): the rank's watchdog
    dumps its own stacks before it ends the rank; the red says where the rank was, and the dump
    lies under the report directory (issue 26: T1/T2 as C1/C2)."""
    result = run_suite(healthy_sim, "-m", "training", "-k", "single_node and node1",
                       "--training-steps", "1000000", "--training-deadline", "20")
    assert result.failed == {"test_train_single_node[node1]"}, result.describe()
    msg = result.message("test_train_single_node[node1]")
    assert "where the ranks were when the deadline passed" in msg, msg
    assert re.search(r"rank 0 \(node1\) in \S+", msg), msg
    dump = result.junit.parent / "stacks" / "train_single_node-node1" / "rank0-node1.txt"
    assert "most recent call first" in dump.read_text()
    assert "train_smoke.py" in dump.read_text()
    _no_leftovers(healthy_sim)


def test_not_training_deselects(healthy_sim):
    result = run_suite(healthy_sim, "-m", "not training", "-k", "train")
    assert not result.outcomes, result.describe()
