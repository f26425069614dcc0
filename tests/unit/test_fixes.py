"""The fix script's pieces (cluster_tests.report.fixes): each command does its job, a second run
changes nothing, any path or name is quoted safely, and the script is `bash -n` clean, in
checklist order, with manual fixes as comments. The commands run here for real, on temporary
files."""

from __future__ import annotations

import os
import stat
import subprocess

from cluster_tests.judge.common import fixcmd
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.problem import PROPERTY, Headline, Problem
from cluster_tests.report import fixes as fixes_mod
from cluster_tests.report.summary import Outcome

ODD = "we ird $(touch pwned) 'q' `x`;"


def sh(command: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=30, check=False)


def snapshot(path):
    st = os.stat(path)
    return path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_ctime_ns


def test_hosts_entry_sets_one_address_and_is_idempotent(tmp_path):
    hosts = tmp_path / ODD / "hosts"
    hosts.parent.mkdir()
    hosts.write_text("127.0.0.1 localhost\n10.0.0.2 node1 other  # stale\n10.0.0.3 node3\n")
    cmd = fixcmd.hosts_entry_cmd("node1", "10.0.0.1", str(hosts))
    assert sh(cmd, tmp_path).returncode == 0
    assert hosts.read_text() == ("127.0.0.1 localhost\n10.0.0.2 other\n10.0.0.3 node3\n"
                                 "10.0.0.1 node1\n")
    before = snapshot(hosts)
    assert sh(cmd, tmp_path).returncode == 0
    assert snapshot(hosts) == before  # not even rewritten
    assert not (tmp_path / "pwned").exists()


def test_hosts_entry_keeps_a_right_line_as_it_is(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.1 node1 n1 # ok\n10.0.0.9 node1\n")
    assert sh(fixcmd.hosts_entry_cmd("node1", "10.0.0.1", str(hosts)), tmp_path).returncode == 0
    assert hosts.read_text() == "10.0.0.1 node1 n1 # ok\n"


def test_authorize_key_appends_once(tmp_path):
    ak = tmp_path / ODD / "authorized_keys"
    ak.parent.mkdir()
    ak.write_text("ssh-ed25519 AAAAother someone")  # no newline at the end
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKEFAKEFAKEFAKE root@node1"
    cmd = fixcmd.authorize_key_cmd(str(ak), key)
    assert sh(cmd, tmp_path).returncode == 0
    assert ak.read_text() == f"ssh-ed25519 AAAAother someone\n{key}\n"
    before = snapshot(ak)
    assert sh(cmd, tmp_path).returncode == 0
    assert snapshot(ak) == before
    fresh = tmp_path / "new_ak"
    assert sh(fixcmd.authorize_key_cmd(str(fresh), key), tmp_path).returncode == 0
    assert fresh.read_text() == key + "\n" and stat.S_IMODE(fresh.stat().st_mode) == 0o600


def test_modes_change_once(tmp_path):
    f = tmp_path / ODD
    f.write_text("k")
    f.chmod(0o666)
    assert sh(fixcmd.chmod_cmd(str(f), 0o600), tmp_path).returncode == 0
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    before = snapshot(f)
    assert sh(fixcmd.chmod_cmd(str(f), 0o600), tmp_path).returncode == 0
    assert snapshot(f) == before  # chmod not even called: ctime unchanged
    d = tmp_path / "dir"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    assert sh(fixcmd.chmod_go_w_cmd(str(d)), tmp_path).returncode == 0
    assert stat.S_IMODE(d.stat().st_mode) == 0o755
    assert sh(fixcmd.mkdir_cmd(str(tmp_path / "ssh dir")), tmp_path).returncode == 0
    assert stat.S_IMODE((tmp_path / "ssh dir").stat().st_mode) == 0o700


def _outcome(test_id, module, fixes=(), message="", fix=""):
    where = tuple(test_id.split("[", 1)[1].rstrip("]").split("->"))
    problem = Problem(where, Headline("cause"), message or test_id, fix=fix, fixes=tuple(fixes),
                      check=test_id)
    return Outcome(test_id, test_id.split("[")[0], module, "failed", problem.text(),
                   properties={PROPERTY: problem.to_json()})


def test_script_is_in_checklist_order_merged_quoted_and_bash_n_clean(tmp_path):
    hosts = fixes_mod.Fix("node3", "/etc/hosts: node1",
                          (fixcmd.hosts_entry_cmd("node1", "10.0.0.1"),), "N2")
    modes = fixes_mod.Fix("node-2", "modes", (fixcmd.chmod_cmd(f"/root/{ODD}", 0o600),), "S2")
    outcomes = [
        _outcome("test_name_consistent[node1]", "cluster_tests/checks/names.py", [hosts]),
        _outcome("test_ssh_trust[node3->node1]", "cluster_tests/checks/ssh.py", [hosts]),
        _outcome("test_ssh_modes[node-2]", "cluster_tests/checks/ssh.py", [modes]),
        _outcome("test_login[node4]", "cluster_tests/checks/ssh.py",
                 message="node4: public key refused",
                 fix="on node4: chmod 600 ~/.ssh/authorized_keys\n$(reboot)"),
    ]
    text, n_cmd, n_manual = fixes_mod.render(outcomes, fixes_mod.ssh_prefix(None, "alice", 5))
    assert (n_cmd, n_manual) == (2, 1)
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0
    blocks = [ln for ln in text.splitlines() if ln.startswith("# --- ")]
    assert len(blocks) == 3
    # S (modes, then the manual login) before N; one N block answers both ids
    assert blocks[0].startswith("# --- [S2] on node-2") and "needs a person" in blocks[1]
    assert blocks[2].startswith("# --- [N2] on node3")
    assert "# answers: test_name_consistent[node1], test_ssh_trust[node3->node1]" in text
    assert ("ssh -l alice -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=yes node3 "
            in text)
    # the manual text stays a comment (no line of it is a command)
    assert "# fix: on node4: chmod 600 ~/.ssh/authorized_keys" in text
    assert all(ln.startswith(("#", "ssh ", "set ", "failed=", "ct_failed", "exit")) or not ln
               for ln in text.splitlines())


def test_empty_script_says_nothing_to_fix():
    text, n_cmd, n_manual = fixes_mod.render([], ["ssh"])
    assert (n_cmd, n_manual) == (0, 0) and "nothing to fix" in text
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0


def test_known_host_records_the_verified_key_once_and_replaces_a_stale_one(tmp_path):
    kh = tmp_path / ODD / "known_hosts"  # its directory does not exist yet
    blob = "AAAAC3NzaC1lZDI1NTE5AAAAIFAKEFAKEFAKEFAKE"
    cmd = fixcmd.known_host_cmd(str(kh), "node3", "ssh-ed25519", blob)
    assert sh(cmd, tmp_path).returncode == 0
    assert kh.read_text() == f"node3 ssh-ed25519 {blob}\n"
    before = snapshot(kh)
    assert sh(cmd, tmp_path).returncode == 0
    assert snapshot(kh) == before  # a second run changes nothing
    # a stale key for the name (the host was reinstalled) goes; other hosts' keys stay
    kh.write_text("node3 ssh-ed25519 AAAAold\nnode1 ssh-ed25519 AAAAone\n")
    assert sh(cmd, tmp_path).returncode == 0
    lines = kh.read_text().splitlines()
    assert "node1 ssh-ed25519 AAAAone" in lines and f"node3 ssh-ed25519 {blob}" in lines
    assert not any("AAAAold" in ln for ln in lines)
    assert not (tmp_path / "pwned").exists()


def test_fixes_from_base_facts_run_as_root_or_through_sudo() -> None:
    """H2's and N1/N2's fixes are built from the node's base facts (judge/fixcmd): as root
    where the run logs in as root, else `sudo -n`; H2 names both the hostname and the hosts
    line when the name resolves elsewhere on the node, nothing when it already leads there.
    The interfaces are this machine's own `ip -o addr/link show`, as the base probe reads them."""
    ip = {k: subprocess.run(["ip", "-o", k, "show"], capture_output=True, text=True,
                            check=True).stdout for k in ("addr", "link")}
    raw = {"uid": 0, "hostname": "gpu-7", "resolve": {"node3": {"addrs": ["192.0.2.99"]}},
           "ip_addr": ip["addr"], "ip_link": ip["link"]}
    root, user = BaseFacts.read(raw), BaseFacts.read(dict(raw, uid=1000))
    fix = fixcmd.hosts_fix("node1", user, "node3", "10.0.0.3", ["10.9.9.9"])
    assert fix.where == "node1" and fix.what == "/etc/hosts: node3 is 10.0.0.3 (it says 10.9.9.9)"
    assert fix.commands[0].startswith("sudo -n sh -c ")
    assert fixcmd.hosts_fix("node1", root, "node3", "10.0.0.3").commands == (
        fixcmd.hosts_entry_cmd("node3", "10.0.0.3"),)
    own = fixcmd.own_addresses(root)  # none on a machine with only a loopback
    assert fixcmd.hostname_fix("node3", root)[0].commands == (
        fixcmd.hostname_cmd("node3"), *[fixcmd.hosts_entry_cmd("node3", a) for a in own[:1]])
    assert fixcmd.hostname_fix("10.0.0.3", root) == [] and fixcmd.hostname_fix("node3", None) == []
    right = BaseFacts.read(dict(raw, hostname="node3", resolve={"node3": {"addrs": own[:1]}}))
    assert fixcmd.hostname_fix("node3", right) == []
