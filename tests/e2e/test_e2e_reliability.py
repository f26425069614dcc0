"""Broken clusters stay harmless: interrupts, black holes, hostile input, host keys, secrets."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from suite import PYTEST, REPO, run_suite, sigint_as_at_a_terminal

FAST = ("-m", "hostfile or ssh or names")


def ours_on(sim, node: str) -> str:
    """Processes of any suite run still alive on `node` (they carry a ct-run- tag)."""
    pid = str(sim.node(node).pid)  # the node's holder: pgrep sees the node's network namespace only
    out = sim.exec(node, ["pgrep", "-af", "--ns", pid, "--nslist", "net", "[c]t-run-"]).stdout
    return "\n".join(ln for ln in out.splitlines() if "pgrep" not in ln)


def test_sigint_while_probing_ends_promptly_and_leaves_nothing(healthy_sim, tmp_path):
    # node2's Python is slow to start: the probe of node2 is in flight when the user presses
    # Ctrl-C (and then its process tree must go, on the node too)
    slow = tmp_path / "slowbin"
    slow.mkdir()
    (slow / "python3").write_text(f"#!/bin/sh\nsleep 60\nexec {sys.executable} \"$@\"\n")
    (slow / "python3").chmod(0o755)
    healthy_sim.append_bashrc("node2", f"export PATH={slow}:$PATH\n")
    argv = [*PYTEST, "--hostfile", str(healthy_sim.hostfile),
            "--ssh-config", str(healthy_sim.ssh_config), "-p", "no:cacheprovider", *FAST,
            f"--junitxml={tmp_path / 'junit.xml'}"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True,
                            preexec_fn=sigint_as_at_a_terminal)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not ours_on(healthy_sim, "node2"):
        time.sleep(0.2)
    assert ours_on(healthy_sim, "node2"), "the probe of node2 never started"
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 2, out[-2000:]
    assert "KeyboardInterrupt" in out
    print(f"ended {took:.1f}s after SIGINT")
    assert took < 20, out[-2000:]
    for node in ("node1", "node2", "node3"):
        assert ours_on(healthy_sim, node) == "", node


def test_black_holed_node_costs_one_connect_timeout(healthy_sim):
    healthy_sim.iptables("node3", ["-I", "INPUT", "-j", "DROP"])
    r = run_suite(healthy_sim, *FAST, "--timeout-connect", "4")
    assert "connection timed out" in r.message("test_login[node3]"), r.describe()
    # the other nodes' results are what they would be without node3
    for a in ("node1", "node2"):
        for b in ("node1", "node2"):
            assert f"test_ssh_trust[{a}->{b}]" in r.passed
        assert "connection timed out" in r.message(f"test_ssh_trust[{a}->node3]")
    print(f"run took {r.seconds:.1f}s with a black-holed node")


def test_changed_host_key_refused_even_with_accept_new(healthy_sim):
    healthy_sim.change_host_key("node2")
    r = run_suite(healthy_sim, "-m", "ssh", "-k", "login", "--accept-new-host-keys")
    assert "host key changed" in r.message("test_login[node2]"), r.describe()
    assert "test_login[node1]" in r.passed


def test_hostile_hostfile_lines_are_never_run(healthy_sim, tmp_path):
    marker = tmp_path / "pwned"
    lines = [
        f"$(touch {marker}1) slots=1",
        f"`touch {marker}2` slots=1",
        f"node1;touch {marker}3 slots=1",
        f"node1|touch {marker}4 slots=1",
        "'node1' slots=1",
        f"-oProxyCommand=touch{marker}5 slots=1",
        "node2 slots=1",
        "x" * 5000 + " slots=1",
    ]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("\n".join(lines) + "\n")
    r = run_suite(healthy_sim, hostfile=hostfile)
    assert "test_hostfile_syntax" in r.failed, r.describe()
    for i in range(1, 6):
        assert not (tmp_path / f"pwned{i}").exists()
    # only the clean line became a node
    assert "test_login[node2]" in r.passed
    assert not [t for t in r.outcomes if "node1" in t or "touch" in t or "xxx" in t], r.outcomes


def test_secret_values_never_reported(healthy_sim):
    secret = "s3cr3t-Value-42"
    healthy_sim.append_bashrc("node2",
                              f"export HF_TOKEN={secret}\nexport NCCL_SOCKET_IFNAME={secret}\n")
    r = run_suite(healthy_sim, "-m", "ssh or names or hostfile or env or network",
                  env={"MY_API_KEY": secret})
    blob = r.output + r.junit.read_text() + (r.junit.parent / "summary.json").read_text()
    assert secret not in blob
