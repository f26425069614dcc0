"""N3 (cluster_tests.judge.names.ownname): the node's own hostname resolving to a loopback address
there, judged on base-facts dicts, and its /etc/hosts fix run for real on files (twice: the
second run changes nothing, the first backup is kept)."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
from paths import SAMPLES

from cluster_tests.judge.common import fixcmd
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.names import ownname
from cluster_tests.report import fixes as fixes_mod
from cluster_tests.report.summary import Outcome

#: a real node's interfaces: eth0 10.137.169.3 (and IPv6), docker0 172.17.0.1, a veth; then
#: with eth1 192.168.7.3 too
_CAPTURES = json.loads((SAMPLES / "ip-o-addr-link-docker0-dualstack.json").read_text())["captures"]
IP = _CAPTURES["eth0 and docker0"]
IP2 = _CAPTURES["eth0, eth1 and docker0"]
ODD = "we ird $(touch pwned) 'q' `x`;"


def base(hostname: str = "node3", answers: list[str] | None = None, uid: int = 0,
         ip: dict[str, str] = IP, **resolve: list[str]) -> BaseFacts:
    """The base facts the judge reads, as read from node/probe.py section_base's keys."""
    got = {hostname: {"addrs": ["127.0.1.1"] if answers is None else answers, "error": None}}
    got.update({k: {"addrs": v, "error": None} for k, v in resolve.items()})
    return BaseFacts.read({"uid": uid, "hostname": hostname, "resolve": got,
                           "ip_addr": ip["addr"], "ip_link": ip["link"]})


def test_no_loopback_answer_is_no_problem():
    assert ownname.judge("node3", base(answers=["10.137.169.3"])) is None
    assert ownname.judge("node3", None) is None
    assert ownname.judge("node3", base(answers=[])) is None  # unresolved: N1/H2's question


def test_physical_addresses_leave_out_loopback_link_local_and_the_docker_bridge():
    assert ownname.physical_addresses(base()) == ["10.137.169.3", "fd00:c7::3"]


def test_the_127_0_1_1_line_alone_is_red_with_the_hostfile_names_address():
    b = base(answers=["127.0.1.1"], node3=["127.0.1.1"])
    p = ownname.judge("node3", b)
    assert p is not None and p.nodes == ("node3",) and p.item == "N3"
    assert p.cause == ownname.CAUSE
    assert p.headline.startswith("node3: its hostname 'node3' resolves to 127.0.1.1 on the node")
    assert "(the first answer, the one its gloo ranks take)" in p.message
    # no line of its own: the only IPv4 address on a physical interface (not docker0's)
    assert p.fix == ("on node3: remove 'node3' from the 127.x line in /etc/hosts and add "
                     "'10.137.169.3 node3'")
    [fix] = p.fixes
    assert fix.where == "node3" and fix.item == "N3"
    assert fix.commands == (fixcmd.own_name_hosts_cmd("node3", "10.137.169.3"),)
    assert "/etc/hosts.cluster-tests.bak" in fix.note


def test_a_line_of_its_own_is_the_address_and_stays():
    p = ownname.judge("node3", base(answers=["127.0.1.1", "10.137.169.3"]))
    assert p is not None
    assert p.fix.endswith("(the line '10.137.169.3 node3' is there)")
    assert p.fixes[0].commands == (fixcmd.own_name_hosts_cmd("node3", "10.137.169.3"),)
    # the loopback second: still red (one line moved above, and its ranks take it)
    later = ownname.judge("node3", base(answers=["10.137.169.3", "127.0.1.1"]))
    assert later is not None and "first answer" not in later.message


def test_the_hostfile_name_gives_the_address_the_launch_uses():
    b = base(hostname="gpu-box-3", answers=["127.0.1.1"], node3=["fd00:c7::3"])
    assert ownname.routable_address("node3", b) == "fd00:c7::3"
    # an IP in the hostfile is the address the launch uses, where it is the node's own
    assert ownname.routable_address("fd00:c7::3", base(answers=["127.0.1.1"])) == "fd00:c7::3"
    # never docker0's, nor an address that is not the node's
    assert ownname.routable_address("node3", base(answers=["127.0.1.1", "172.17.0.1"],
                                                   node3=["10.9.9.9"])) == "10.137.169.3"


def test_no_certain_address_leaves_the_fix_to_a_person():
    two = base(ip=IP2)
    assert ownname.physical_addresses(two) == ["10.137.169.3", "192.168.7.3", "fd00:c7::3"]
    p = ownname.judge("node3", two)
    assert p is not None and p.fixes == ()
    assert "'<its address> node3'" in p.fix
    assert "one of 10.137.169.3, 192.168.7.3, fd00:c7::3" in p.fix
    # the hostfile name (here not the hostname) tells which one the launch uses
    named = base(hostname="gpu-box-3", ip=IP2, node3=["192.168.7.3"])
    p = ownname.judge("node3", named)
    assert p is not None
    assert p.fixes[0].commands == (fixcmd.own_name_hosts_cmd("gpu-box-3", "192.168.7.3"),)


def test_as_a_regular_user_the_fix_goes_through_sudo():
    p = ownname.judge("node3", base(uid=1000))
    assert p is not None and p.fixes[0].commands[0].startswith("sudo -n sh -c ")


# -- the commands, for real on files -------------------------------------------------------------


def sh(command: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=30, check=False)


def snapshot(path):
    st = os.stat(path)
    return path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_ctime_ns


CASES = {
    # Debian's installer: FQDN first (the canonical name), kept first on the new line
    "fqdn": ("127.0.0.1 localhost\n127.0.1.1 node2.example node2\n\n"
             "# The following lines are desirable for IPv6 capable hosts\n"
             "::1     localhost ip6-localhost ip6-loopback\nff02::1 ip6-allnodes\n"
             "ff02::2 ip6-allrouters\n",
             "127.0.0.1 localhost\n\n"
             "# The following lines are desirable for IPv6 capable hosts\n"
             "::1     localhost ip6-localhost ip6-loopback\nff02::1 ip6-allnodes\n"
             "ff02::2 ip6-allrouters\n10.0.0.2 node2.example node2\n"),
    # the brief's order, a line of its own already there: only the loopback name goes
    "own line": ("127.0.0.1 localhost\n127.0.1.1 node2 node2.example\n10.0.0.1 node1\n"
                 "10.0.0.2 node2\n",
                 "127.0.0.1 localhost\n10.0.0.1 node1\n10.0.0.2 node2\n"
                 "10.0.0.2 node2.example\n"),
    # the name on the localhost line: localhost stays, with its comment
    "localhost line": ("127.0.0.1\tlocalhost NODE2 # lo\n10.0.0.3 node3\n",
                       "127.0.0.1 localhost # lo\n10.0.0.3 node3\n10.0.0.2 NODE2\n"),
    # IPv6: the name off ::1, an IPv6 line of its own (routable) kept as it is
    "ipv6": ("127.0.0.1 localhost\n::1 localhost node2\nfd00::2 node2\n127.0.1.1 node2\n"
             "10.0.0.2 node2 # mine\n",
             "127.0.0.1 localhost\n::1 localhost\nfd00::2 node2\n10.0.0.2 node2 # mine\n"),
    # names that only start like it are not its names
    "prefix": ("127.0.1.1 node2 node20 node2-ib\n",
               "127.0.1.1 node20 node2-ib\n10.0.0.2 node2\n"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fix_heals_the_file_backs_it_up_once_and_changes_nothing_the_second_time(
        tmp_path, case):
    before, after = CASES[case]
    d = tmp_path / ODD
    d.mkdir()
    hosts = d / "hosts"
    hosts.write_text(before)
    hosts.chmod(0o644)
    cmd = fixcmd.own_name_hosts_cmd("node2", "10.0.0.2", str(hosts))
    ran = sh(cmd, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert hosts.read_text() == after
    backup = d / "hosts.cluster-tests.bak"
    assert backup.read_text() == before and stat.S_IMODE(backup.stat().st_mode) == 0o644
    files = snapshot(hosts), snapshot(backup)
    again = sh(cmd, tmp_path)
    assert again.returncode == 0, again.stderr
    assert (snapshot(hosts), snapshot(backup)) == files  # not even rewritten
    assert not (tmp_path / "pwned").exists()


def test_a_backup_already_there_is_kept(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.1.1 node2\n")
    backup = tmp_path / "hosts.cluster-tests.bak"
    backup.write_text("the first original\n")
    assert sh(fixcmd.own_name_hosts_cmd("node2", "10.0.0.2", str(hosts)), tmp_path).returncode == 0
    assert hosts.read_text() == "10.0.0.2 node2\n"
    assert backup.read_text() == "the first original\n"


def test_a_healthy_file_is_neither_rewritten_nor_backed_up(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n10.0.0.2 node2\n")
    before = snapshot(hosts)
    assert sh(fixcmd.own_name_hosts_cmd("node2", "10.0.0.2", str(hosts)), tmp_path).returncode == 0
    assert snapshot(hosts) == before
    assert not (tmp_path / "hosts.cluster-tests.bak").exists()


def test_the_fix_is_a_block_of_fixes_sh():
    p = ownname.judge("node3", base())
    assert p is not None
    red = Outcome("test_hostname_not_loopback[node3]", "test_hostname_not_loopback",
                  "cluster_tests/checks/names.py", "failed", p.text(),
                  properties={"problem": p.to_json()})
    text, n_cmd, n_manual = fixes_mod.render([red], fixes_mod.ssh_prefix(None, None, 5))
    assert (n_cmd, n_manual) == (1, 0)
    assert "# --- [N3] on node3" in text and "test_hostname_not_loopback[node3]" in text
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0
