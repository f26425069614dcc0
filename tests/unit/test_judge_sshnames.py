"""judge/ssh/sshnames.py: a hostfile name is what ssh makes of it (`ssh -G`, read from real
captures), where a node's ssh sends a name (its ssh config's HostName before its resolver), and
the fixes of a name that leads nowhere or elsewhere (never the node's hostname)."""

from __future__ import annotations

from paths import SAMPLES

from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.ssh import sshnames


def _view(sample: str) -> dict:
    return sshnames.parse_ssh_g((SAMPLES / sample).read_text())


def test_ssh_g_is_read_as_openssh_prints_it():
    assert _view("ssh-G-alias-openssh9.2p1.txt") == {
        "hostname": "10.45.227.2", "port": "22", "user": "root"}
    assert _view("ssh-G-no-alias-openssh9.2p1.txt")["hostname"] == "nosuchhost"
    # a Host pattern with a token, a port and a user: as ssh itself applies them
    assert _view("ssh-G-pattern-port-user-openssh9.2p1.txt") == {
        "hostname": "gpu-07.cluster.internal", "port": "2222", "user": "ubuntu"}


def _facts(resolve: dict[str, list[str]], ssh: dict[str, dict] | None = None) -> dict:
    return {"resolve": {n: {"addrs": a, "error": None if a else "[Errno -2] Name or service "
                            "not known", "seconds": 0.001} for n, a in resolve.items()},
            "ssh_names": ssh or {}}


def test_an_alias_is_placed_at_its_hostname_before_the_resolver():
    facts = _facts({"gpu-b": [], "node2": ["10.0.0.2"]},
                   {"gpu-b": _view("ssh-G-alias-openssh9.2p1.txt")})
    p = sshnames.placement(BaseFacts.read(facts), "gpu-b")
    assert (p.addrs, p.by, p.hostname, p.port) == (("10.45.227.2",), sshnames.BY_SSH, "10.45.227.2",
                                                   "22")
    assert p.describe() == "ssh config: Host gpu-b -> HostName 10.45.227.2"
    # the resolver where ssh keeps the name as it is
    facts["ssh_names"]["node2"] = {"hostname": "node2", "port": "22", "user": "root"}
    assert sshnames.placement(BaseFacts.read(facts), "node2").by == sshnames.BY_RESOLVER
    assert sshnames.placement(BaseFacts.read(facts), "node2").addrs == ("10.0.0.2",)
    # an ssh config naming another name: where that name resolves
    facts["ssh_names"]["gpu-07"] = {**_view("ssh-G-pattern-port-user-openssh9.2p1.txt"),
                                    "resolve": {"addrs": ["10.0.0.7"], "error": None}}
    p = sshnames.placement(BaseFacts.read(facts), "gpu-07")
    assert (p.addrs, p.hostname, p.user) == (("10.0.0.7",), "gpu-07.cluster.internal", "ubuntu")


def test_a_name_neither_ssh_nor_the_resolver_knows_is_placed_nowhere():
    facts = _facts({"gpu-x": []}, {"gpu-x": _view("ssh-G-no-alias-openssh9.2p1.txt")
                                   | {"hostname": "gpu-x"}})
    p = sshnames.placement(BaseFacts.read(facts), "gpu-x")
    assert not p.placed and p.by == sshnames.NOWHERE and "not known" in p.error
    assert sshnames.placement(None, "gpu-x").placed is False
    assert sshnames.placement(None, "10.0.0.9").addrs == ("10.0.0.9",)  # an address is itself


def test_a_master_address_is_resolved_not_taken_through_ssh():
    facts = _facts({"gpu-a": []}, {"gpu-a": _view("ssh-G-alias-openssh9.2p1.txt")})
    assert sshnames.placement(BaseFacts.read(facts), "gpu-a").placed
    # torch's store asks the resolver
    assert not sshnames.resolved(BaseFacts.read(facts), "gpu-a").placed


def test_misplaced_compares_where_ssh_goes_with_the_nodes_addresses():
    b = BaseFacts.read({"ip_link": "2: eth0: <UP> mtu 1500 state UP",
                        "ip_addr": "2: eth0 inet 10.45.227.2/24"})
    right = _facts({"gpu-b": []}, {"gpu-b": _view("ssh-G-alias-openssh9.2p1.txt")})
    assert sshnames.misplaced(BaseFacts.read(right), b, "gpu-b") is None
    wrong = _facts({"gpu-b": []}, {"gpu-b": {"hostname": "10.45.227.3"}})
    assert sshnames.misplaced(BaseFacts.read(wrong), b, "gpu-b") == (["10.45.227.3"],
                                                                     "10.45.227.2")
    # not placed: N1 says so
    assert sshnames.misplaced(BaseFacts.read(_facts({"gpu-b": []})), b, "gpu-b") is None


def test_the_fixes_edit_the_ssh_config_or_the_hosts_file():
    assert sshnames.place_fix("node1", "gpu-c", "10.0.0.3", alias=True) == (
        "on node1: add a 'Host gpu-c' block with 'HostName 10.0.0.3' to ~/.ssh/config (as the "
        "launcher's ssh config has it), or '10.0.0.3 gpu-c' to /etc/hosts")
    assert sshnames.place_fix("node1", "node3", "10.0.0.3").startswith(
        "on node1: add '10.0.0.3 node3' to /etc/hosts")
    assert sshnames.alias_fix("node1", "gpu-c", "10.0.0.3") == (
        "on node1: make the 'Host gpu-c' block of the ssh config say 'HostName 10.0.0.3'")
    assert all("hostnamectl" not in f and "hostname " not in f
               for f in (sshnames.place_fix("a", "b", None), sshnames.alias_fix("a", "b", None)))


def test_the_launchers_ssh_g_reads_the_runs_ssh_config(tmp_path):
    """core/transport.ssh_g runs this machine's OpenSSH (`ssh -G -F CONFIG NAME`)."""
    from cluster_tests.core import transport

    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu-*\n    HostName %h.cluster.internal\n    Port 2222\n")
    got = transport.ssh_g("gpu-07", cfg)
    assert (got["hostname"], got["port"]) == ("gpu-07.cluster.internal", "2222"), got
    assert transport.ssh_g("node9", cfg)["hostname"] == "node9"
    cfg.write_text("Host x\n    NoSuchOption yes\n")
    assert "error" in transport.ssh_g("x", cfg)
