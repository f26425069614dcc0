"""CHECKLIST H2, S1-S5, N1-N3 end to end: each fault injected for real on the simulated cluster,
then exactly the expected test ids are red, with the cause and the fix in the message."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from suite import run_suite

FAST = ("-m", "hostfile or ssh or names")
NODES = ("node1", "node2", "node3")


def blocked(result) -> dict[str, str]:
    """test id -> the red that blocks it (its `blocked_by` property)."""
    return {t: p["blocked_by"] for t, p in result.properties.items() if "blocked_by" in p}


def dead(node: str, result) -> None:
    """The launcher cannot log in to `node`: one red, test_login[node], and every check that
    needed the node blocked naming it (its own checks, the pairs that start on it, ssh and pdsh
    into it from anywhere)."""
    assert result.failed == {f"test_login[{node}]"}, result.describe()
    by = blocked(result)
    wrong = {t: by.get(t) for t in needing(node, result) - {f"test_login[{node}]"}
             if by.get(t) != f"test_login[{node}]"}
    assert not wrong, wrong


def needing(node: str, result) -> set[str]:
    """The ids that need `node` to be logged in to: its own checks, the pairs that start on it,
    ssh and pdsh into it from anywhere."""
    out = {f"test_pdsh[launcher->{node}]", f"test_pdsh[node1->{node}]"}
    for t in result.outcomes:
        if "[" not in t:
            continue
        name, inside = t[: t.index("[")], t[t.index("[") + 1 : -1]
        ends = inside.split("->")
        if ends[0] == node or (name in ("test_ssh_trust", "test_pdsh") and ends[-1] == node):
            out.add(t)
    return out


def test_world_writable_authorized_keys(healthy_sim):
    healthy_sim.chmod("node2", "authorized_keys", 0o666)
    r = run_suite(healthy_sim, *FAST)
    # sshd refuses every key into node2, the launcher's too: one red, everything into it blocked
    dead("node2", r)
    assert {f"test_ssh_trust[{a}->node2]" for a in NODES} <= set(blocked(r))
    login = r.message("test_login[node2]")
    assert "public key refused" in login and "chmod 600 ~/.ssh/authorized_keys" in login
    assert ("blocked by test_login[node2]: node2 refuses the launcher's key"
            in r.message("test_ssh_modes[node2]"))
    assert "test_ssh_trust[node1->node3]" in r.passed


# --- warnings, not reds: five harmless shapes in one suite run (module fixture), each test
# asserting its own; the run stays green only if none of them is red ----------------------------


@pytest.fixture(scope="module")
def warnings_run(sim):
    """One run of the ssh and name checks (about 6 CPU s) on five harmless shapes at once:
    node2's sshd with StrictModes off and its ~/.ssh 0777; node2's `hostname` is gpu-07 while
    'node2' still leads to it; node3's ~/.ssh 0755 and its authorized_keys 0660 (its private
    group); node1's non-interactive shell unsets PDSH_RCMD_TYPE (the launcher's sets it)."""
    sim.restore()
    try:
        sim.set_sshd_option("node2", "StrictModes", "no")
        sim.chmod("node2", "ssh_dir", 0o777)
        sim.set_hostname("node2", "gpu-07")
        sim.chmod("node3", "ssh_dir", 0o755)
        sim.chmod("node3", "authorized_keys", 0o660)
        sim.append_bashrc("node1", "unset PDSH_RCMD_TYPE\n")
        return run_suite(sim, *FAST, env={"PDSH_RCMD_TYPE": "ssh"})
    finally:
        sim.restore()


def test_strictmodes_off_makes_modes_a_warning(warnings_run):
    # with StrictModes off, sshd takes keys whatever the modes: not red, but shown
    r = warnings_run
    assert r.returncode == 0, r.describe()
    assert "/root/.ssh has mode 0777; the guide asks for 0700" in r.output


def test_group_writable_in_private_group_is_a_warning(warnings_run):
    # Debian's sshd accepts a group-writable authorized_keys whose group is the user's
    # private group (root's group has no other member here)
    r = warnings_run
    assert r.returncode == 0, r.describe()
    assert "/root/.ssh/authorized_keys has mode 0660; the guide asks for 0600" in r.output


def test_ssh_dir_755_is_a_warning_only(warnings_run):
    r = warnings_run
    assert r.returncode == 0, r.describe()
    assert "/root/.ssh has mode 0755; the guide asks for 0700" in r.output


def test_hostname_differs_but_the_name_leads_to_the_node(warnings_run):
    """`hostname` is gpu-07 but 'node2' resolves to node2 everywhere: the launch works (pdsh
    reaches node2 by that name), so it is a warning, not a red."""
    r = warnings_run
    assert r.returncode == 0, r.describe()
    assert "node2: `hostname` there prints 'gpu-07'" in r.output
    assert r.properties["test_hostname_matches[node2]"]["name_is"] == "alias"


def test_pdsh_rcmd_type_unset_is_a_warning(warnings_run):
    r = warnings_run
    assert r.returncode == 0, r.describe()
    assert "node1: PDSH_RCMD_TYPE is unset" in r.output


def test_writable_home_refuses_keys(healthy_sim):
    healthy_sim.chmod("node3", "home", 0o777)
    r = run_suite(healthy_sim, *FAST)
    dead("node3", r)
    assert "chmod go-w ~" in r.message("test_login[node3]")


def test_private_key_readable_by_others(healthy_sim):
    key = healthy_sim.node("node1").paths["ssh_dir"] / "id_ed25519"
    healthy_sim.chmod("node1", key, 0o644)
    r = run_suite(healthy_sim, *FAST)
    assert r.failed == {"test_ssh_modes[node1]"}, r.describe()
    assert "UNPROTECTED PRIVATE KEY FILE" in r.message("test_ssh_modes[node1]")
    assert "chmod 600 /root/.ssh/id_ed25519" in r.message("test_ssh_modes[node1]")
    # and ssh from node1 really fails, for every target: blocked by that one red
    by = blocked(r)
    for b in NODES:
        assert by[f"test_ssh_trust[node1->{b}]"] == "test_ssh_modes[node1]"
        assert by[f"test_pdsh[node1->{b}]"] == "test_ssh_modes[node1]"
    # DeepSpeed's own `ssh node1 hostname -I` on node1 (H3's derived master address) too
    assert by["test_master_addr[node1]"] == "test_ssh_modes[node1]"


def test_missing_key_fails_only_that_ordered_pair(healthy_sim):
    healthy_sim.remove_authorized_key("node3", from_node="node1")
    r = run_suite(healthy_sim, *FAST)
    assert r.failed == {"test_ssh_trust[node1->node3]"}, r.describe()
    assert ("blocked by test_ssh_trust[node1->node3]: node1 -> node3: public key refused"
            in r.message("test_pdsh[node1->node3]"))
    msg = r.message("test_ssh_trust[node1->node3]")
    assert "node1 -> node3: public key refused" in msg
    assert ("node1's key (~/.ssh/id_ed25519.pub) is not in /root/.ssh/authorized_keys on node3"
            in msg)
    assert ("ssh node1 cat ~/.ssh/id_ed25519.pub | ssh node3 'cat >> /root/.ssh/authorized_keys'"
            in msg)
    assert "test_ssh_trust[node3->node1]" in r.passed


def test_missing_known_host(healthy_sim):
    healthy_sim.remove_known_host("node1", "node3")
    r = run_suite(healthy_sim, *FAST)
    assert r.failed == {"test_ssh_trust[node1->node3]"}, r.describe()
    assert blocked(r)["test_pdsh[node1->node3]"] == "test_ssh_trust[node1->node3]"
    msg = r.message("test_ssh_trust[node1->node3]")
    # the fix copies the key the launcher verified, never ssh-keyscan (trust on first use)
    assert "host key unknown" in msg and "copy the key the launcher verified" in msg


def test_changed_host_key(healthy_sim):
    healthy_sim.change_host_key("node3")
    r = run_suite(healthy_sim, *FAST)
    assert "host key changed" in r.message("test_login[node3]")
    # one cause, the node's new key, for the launcher and every node alike
    dead("node3", r)
    for a in ("node1", "node2"):
        assert ("blocked by test_login[node3]: node3 answers with a changed host key"
                in r.message(f"test_ssh_trust[{a}->node3]")), r.describe()


def test_hostname_differs_and_the_name_leads_elsewhere(healthy_sim):
    healthy_sim.set_hostname("node2", "gpu-07")
    healthy_sim.set_hosts_entry("node2", "node2", healthy_sim.node("node3").address)
    r = run_suite(healthy_sim, *FAST)
    assert "test_hostname_matches[node2]" in r.failed, r.describe()
    msg = r.message("test_hostname_matches[node2]")
    assert "prints 'gpu-07'" in msg and "the name leads elsewhere" in msg
    assert "hostnamectl set-hostname node2" in msg
    assert all("node2" in t for t in r.failed), r.describe()


def test_missing_hosts_entry(healthy_sim):
    healthy_sim.remove_hosts_entry("node1", "node3")
    r = run_suite(healthy_sim, *FAST)
    assert r.failed == {"test_resolves[node1->node3]"}, r.describe()
    addr = healthy_sim.node("node3").address
    assert f"add '{addr} node3' to /etc/hosts" in r.message("test_resolves[node1->node3]")
    by = blocked(r)
    assert by["test_ssh_trust[node1->node3]"] == by["test_pdsh[node1->node3]"] == \
        "test_resolves[node1->node3]"


def test_wrong_hosts_entry(healthy_sim):
    wrong = healthy_sim.node("node2").address
    healthy_sim.set_hosts_entry("node1", "node3", wrong)  # node1 thinks node3 is node2's address
    r = run_suite(healthy_sim, *FAST)
    assert "test_resolves[node1->node3]" in r.failed, r.describe()
    msg = r.message("test_resolves[node1->node3]")
    right = healthy_sim.node("node3").address
    assert f"fix: on node1: make the /etc/hosts line read '{right} node3'" in msg
    assert f"{wrong} is not an address of node3" in msg
    # N2 does not repeat it under node3 alone, nor S4 (node1 -> "node3" reaches node2's sshd,
    # whose host key is not node3's): both are blocked by the pair's red
    assert r.failed == {"test_resolves[node1->node3]"}, r.describe()
    by = blocked(r)
    assert by["test_name_consistent[node3]"] == by["test_ssh_trust[node1->node3]"] == \
        "test_resolves[node1->node3]"


def test_hostname_on_loopback(healthy_sim):
    healthy_sim.add_hosts_line("node2", "127.0.1.1 node2")
    r = run_suite(healthy_sim, *FAST)
    assert r.failed == {"test_hostname_not_loopback[node2]"}, r.describe()
    msg = r.message("test_hostname_not_loopback[node2]")
    assert "resolves to 127.0.1.1" in msg and "remove 'node2' from the 127.x line" in msg


def test_pubkey_authentication_off(healthy_sim):
    healthy_sim.set_sshd_option("node2", "PubkeyAuthentication", "no")
    r = run_suite(healthy_sim, *FAST)
    assert "does not accept public keys" in r.message("test_login[node2]")
    assert "PubkeyAuthentication yes" in r.message("test_login[node2]")
    dead("node2", r)


def _path_without(tool: str, tmp: Path) -> str:
    """A PATH with every tool of /usr/bin and /bin except `tool` (symlinks)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        for name in os.listdir(d):
            link = tmp / name
            if name != tool and not link.exists():
                link.symlink_to(Path(d) / name)
    venv_bin = Path(sys.executable).parent
    return f"{venv_bin}:{tmp}"


def test_pdsh_missing_on_rank0_and_launcher(healthy_sim, tmp_path):
    path = _path_without("pdsh", tmp_path / "bin")
    healthy_sim.append_bashrc("node1", f"export PATH={path}\n")
    r = run_suite(healthy_sim, *FAST, env={"PATH": path})
    assert r.failed == {"test_pdsh_installed[launcher]", "test_pdsh_installed[node1]"}, r.describe()
    assert "apt-get install pdsh" in r.message("test_pdsh_installed[launcher]")
    assert "node1 (rank 0, where `deepspeed --hostfile` starts) has no pdsh" in r.message(
        "test_pdsh_installed[node1]")
    assert blocked(r)["test_pdsh[node1->node2]"] == "test_pdsh_installed[node1]"


@pytest.mark.parametrize("node", ["node2"])
def test_dependent_tests_report_unreachable_once(healthy_sim, node):
    healthy_sim.iptables(node, ["-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "DROP"])
    r = run_suite(healthy_sim, *FAST, "--timeout-connect", "3")
    assert "connection timed out" in r.message(f"test_login[{node}]")
    assert f"blocked by test_login[{node}]: {node} does not answer (connection timed out)" in \
        r.message(f"test_hostname_matches[{node}]")
    # one connect timeout for the node, not one per test (printed; bench/ measures speed)
    print(f"run took {r.seconds:.1f}s")


def test_sshd_settings_are_read_with_match_blocks_applied(healthy_sim):
    """S3 reads `sshd -T -C user=...,addr=...` for the login it came in by: a `Match User root`
    block that turns password logins on for root is what sshd does for root."""
    healthy_sim.add_sshd_match("node2", "Match User root\n    PasswordAuthentication yes\n")
    r = run_suite(healthy_sim, "-m", "ssh", "-k", "sshd_config")
    assert r.returncode == 0, r.describe()
    assert r.properties["test_sshd_config[node2]"]["passwordauthentication"] == "yes"
    assert r.properties["test_sshd_config[node1]"]["passwordauthentication"] == "no"
