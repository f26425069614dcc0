"""Self-tests of the simulated cluster (the package fixtures/sim/).

Run as root from the repository root:
    .venv/bin/python -m pytest tests/unit/test_sim.py -p no:cacheprovider
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import REPO

from fixtures.sim import (
    SimCluster,
    SimError,
    choose_subnet,
    down,
    prefix_for,
    ssh_banner,
)

STATE_ROOT = REPO / ".sim"
NODES = ["node1", "node2", "node3"]
BATCH = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=3"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sim needs root")


# ----------------------------------------------------------------------------------------------
# helpers


def host_snapshot() -> dict:
    """What the sim must never change on the host."""
    def out(argv: list[str]) -> str:
        cp = subprocess.run(argv, check=False, capture_output=True, text=True)
        return "\n".join(ln for ln in cp.stdout.splitlines() if not ln.startswith("#"))

    ssh_dir = Path("/root/.ssh")
    routes = [r for r in json.loads(out(["ip", "-j", "route"]) or "[]")
              if not str(r.get("dev", "")).startswith("ct")]  # other sims may come and go
    return {
        "etc_hosts": Path("/etc/hosts").read_text(),
        "root_ssh": sorted(
            (p.name, p.stat().st_mode, p.read_bytes() if p.is_file() else b"")
            for p in ssh_dir.iterdir()) if ssh_dir.exists() else None,
        "iptables": out(["iptables-save"]),
        "ip6tables": out(["ip6tables-save"]),
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
        "routes": routes,
        "hostname": socket.gethostname(),
    }


def netns_of(pid: str) -> int | None:
    try:
        link = os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None
    return int(link[link.index("[") + 1:-1])


def leftovers(prefix: str, inodes: frozenset[int] | set[int] = frozenset()) -> list[str]:
    """Everything with the sim's prefix still on the machine."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], check=False, capture_output=True,
                           text=True).stdout
    found += [f"netns {ln.split()[0]}" for ln in netns.splitlines()
              if ln.split() and ln.split()[0].startswith(prefix)]
    links = json.loads(subprocess.run(["ip", "-j", "link"], check=False, capture_output=True,
                                      text=True).stdout or "[]")
    found += [f"link {ln['ifname']}" for ln in links if ln["ifname"].startswith(prefix)]
    if inodes:
        found += [f"process {p}" for p in os.listdir("/proc")
                  if p.isdigit() and netns_of(p) in inodes]
    return found


def group_alive(pgid: int) -> bool:
    """A process of process group ``pgid`` is still alive (not a zombie)."""
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if stat[0] != "Z" and int(stat[2]) == pgid:
            return True
    return False


def ssh_from(sim: SimCluster, a: str, b: str, cmd: str = "hostname",
             extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return sim.exec(a, ["ssh", *BATCH, "-o", "StrictHostKeyChecking=yes", *extra, b, cmd],
                    timeout=20)


# ----------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module", autouse=True)
def exclusive():
    """One run of these self-tests at a time: they reuse fixed state dirs (so that a crashed
    run is cleaned up by the next one), and a second run's ``up`` would tear ours down."""
    STATE_ROOT.mkdir(exist_ok=True)
    with open(STATE_ROOT / "test_sim.lock", "w") as lock:
        deadline = time.monotonic() + 600
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail("another run of tests/unit/test_sim.py holds .sim/test_sim.lock")
                time.sleep(0.5)
        yield


@pytest.fixture(scope="module")
def host_before(exclusive: None) -> dict:
    return host_snapshot()


@pytest.fixture(scope="module")
def sim(host_before: dict):
    cluster = SimCluster(STATE_ROOT / "test_sim", nodes=3, slots=2)
    with cluster:
        yield cluster
    assert leftovers(cluster.prefix) == []


@pytest.fixture
def healthy(sim: SimCluster):
    """The shared cluster, restored after the test whatever the test did."""
    assert sim.faults == [], f"faults left by an earlier test: {sim.faults}"
    yield sim
    sim.restore()
    for node in NODES:
        assert sim.sshd_answers(node), node


# ----------------------------------------------------------------------------------------------
# the cluster as built


def test_cluster_json_and_files(sim: SimCluster) -> None:
    info = json.loads(sim.cluster_json.read_text())
    assert info["status"] == "up"
    assert [n["name"] for n in info["nodes"]] == NODES
    assert sim.hostfile.read_text() == "node1 slots=2\nnode2 slots=2\nnode3 slots=2\n"
    net = ipaddress.IPv4Network(info["subnet"])
    assert net.prefixlen == 24 and net.subnet_of(ipaddress.IPv4Network("10.0.0.0/8"))
    assert info["launcher_address"] == str(net.network_address + 254)
    assert len(info["bridge"]) <= 15 and info["bridge"].startswith(sim.prefix)
    for node in sim.nodes:
        assert node.interface == "eth0" and node.netns == f"{sim.prefix}-{node.name}"
        assert set(node.paths) >= {"home", "ssh_dir", "authorized_keys", "known_hosts", "bashrc",
                                   "hosts", "etc_ssh", "sshd_config", "sshd_log", "sshd_pid"}
        assert node.paths["home"].stat().st_mode & 0o777 == 0o700
        assert node.paths["ssh_dir"].stat().st_mode & 0o777 == 0o700
        assert node.paths["authorized_keys"].stat().st_mode & 0o777 == 0o600
        assert len(node.paths["authorized_keys"].read_text().splitlines()) == 4
        known = node.paths["known_hosts"].read_text()
        for other in sim.nodes:
            assert f"{other.name},{other.address} ssh-ed25519 " in known
        bashrc = node.paths["bashrc"].read_text()
        assert "return;;" not in bashrc and "PDSH_RCMD_TYPE=ssh" in bashrc


def test_hostnames(sim: SimCluster) -> None:
    for node in NODES:
        assert sim.exec(node, ["hostname"]).stdout.strip() == node
    assert socket.gethostname() != "node1"


def test_each_node_has_its_address_and_no_default_route(sim: SimCluster) -> None:
    for node in sim.nodes:
        cp = sim.exec(node.name, ["ip", "-j", "-4", "addr", "show", "dev", "eth0"], check=True)
        addrs = [a["local"] for link in json.loads(cp.stdout) for a in link["addr_info"]]
        assert addrs == [node.address]
        routes = sim.exec(node.name, ["ip", "route"], check=True).stdout
        assert "default" not in routes
        # a stray address fails on the spot (sealed network)
        cp = sim.exec(node.name, ["ping", "-c1", "-W1", "192.0.2.1"])
        assert cp.returncode != 0


def test_nodes_reach_each_other_and_the_launcher(sim: SimCluster) -> None:
    for node in NODES:
        for target in [*(n.address for n in sim.nodes), sim.launcher_address]:
            cp = sim.exec(node, ["ping", "-c1", "-W2", target])
            assert cp.returncode == 0, (node, target, cp.stdout + cp.stderr)


def test_etc_hosts_private_per_node(healthy: SimCluster) -> None:
    sim = healthy
    for node in sim.nodes:
        inside = sim.exec(node.name, ["cat", "/etc/hosts"], check=True).stdout
        assert inside == node.paths["hosts"].read_text()
        for other in sim.nodes:
            got = sim.exec(node.name, ["getent", "hosts", other.name]).stdout.split()
            assert got[:1] == [other.address]
    sim.add_hosts_line("node1", "127.0.1.1 node1")
    assert "127.0.1.1" in sim.exec("node1", ["cat", "/etc/hosts"]).stdout
    assert "127.0.1.1" not in sim.exec("node2", ["cat", "/etc/hosts"]).stdout
    assert "127.0.1.1" not in Path("/etc/hosts").read_text()
    assert sim.exec("node1", ["getent", "hosts", "node1"]).stdout.split()[0] == "127.0.1.1"


def test_etc_private_per_node(healthy: SimCluster) -> None:
    """A file a node writes in /etc (a fix's backup of /etc/hosts) is that node's alone: in
    its overlay's upper dir, not in the machine's /etc nor another node's; the machine's /etc
    is read through."""
    sim = healthy
    marker = "/etc/hosts.sim-selftest-marker"
    sim.exec("node1", ["sh", "-c", f"echo node1 > {marker}"], check=True)
    try:
        assert sim.exec("node1", ["cat", marker]).stdout == "node1\n"
        assert sim.exec("node2", ["cat", marker]).returncode != 0
        assert not Path(marker).exists()
        assert (sim.node("node1").paths["etc_upper"] / Path(marker).name).read_text() == "node1\n"
        assert sim.exec("node2", ["cat", "/etc/os-release"]).stdout == \
            Path("/etc/os-release").read_text()
    finally:
        sim.exec("node1", ["rm", "-f", marker])


def test_home_private_per_node(healthy: SimCluster) -> None:
    sim = healthy
    marker = ".sim-selftest-marker"
    sim.exec("node1", ["sh", "-c", f"echo node1 > ~/{marker}"], check=True)
    try:
        assert sim.exec("node1", ["cat", f"/root/{marker}"]).stdout == "node1\n"
        assert sim.exec("node2", ["cat", f"/root/{marker}"]).returncode != 0
        assert not Path("/root", marker).exists()
        assert (sim.node("node1").paths["home"] / marker).exists()
        # the rest of the real home (pyenv, caches) is still visible, the private files are not
        for entry in os.listdir("/root"):
            if entry not in (".bashrc", ".profile", ".ssh", ".bash_history"):
                assert sim.exec("node2", ["test", "-e", f"/root/{entry}"]).returncode == 0, entry
        assert "PDSH_RCMD_TYPE" in sim.exec("node2", ["cat", "/root/.bashrc"]).stdout
    finally:
        (sim.node("node1").paths["home"] / marker).unlink(missing_ok=True)


def test_dev_shm_private_per_node(sim: SimCluster) -> None:
    sim.exec("node1", ["sh", "-c", "echo x > /dev/shm/sim-selftest"], check=True)
    assert sim.exec("node1", ["cat", "/dev/shm/sim-selftest"]).stdout == "x\n"
    assert sim.exec("node2", ["cat", "/dev/shm/sim-selftest"]).returncode != 0
    assert not Path("/dev/shm/sim-selftest").exists()
    sim.exec("node1", ["rm", "/dev/shm/sim-selftest"], check=True)


def test_venv_python_imports_torch_inside_a_node(sim: SimCluster) -> None:
    cp = sim.exec("node2",
                  [sys.executable, "-c", "import torch, socket; print(socket.gethostname())"],
                  timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == "node2"


def test_processes_are_listed_under_their_node(sim: SimCluster) -> None:
    """A process belongs to a node by its network namespace (the machine's process table is
    every node's); the sim's own daemons (holders, sshd) are left out unless asked for."""
    proc = sim.popen("node2", ["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        mine: list = []
        while not mine and time.monotonic() < deadline:
            mine = [p for p in sim.processes() if p.cmdline == "sleep 30"]
            time.sleep(0.05)
        assert [p.node for p in mine] == ["node2"], sim.processes()
        assert str(mine[0]).startswith(f"node2: {mine[0].pid} sleep: sleep 30")
        assert not [p for p in sim.processes() if p.comm == "sshd" or p.cmdline == "sleep infinity"]
        own = sim.processes(own=True)
        assert {p.node for p in own if p.comm == "sshd"} == set(NODES)
        assert {p.node for p in own if p.cmdline == "sleep infinity"} == set(NODES)
    finally:
        proc.kill()
        proc.wait()


def test_shared_dir_is_shared(sim: SimCluster) -> None:
    f = sim.shared_dir / "selftest-shared.txt"
    sim.exec("node1", ["sh", "-c", f"echo from-node1 > {f}"], check=True)
    try:
        for node in NODES:
            assert sim.exec(node, ["cat", str(f)]).stdout == "from-node1\n"
    finally:
        f.unlink(missing_ok=True)


def test_ssh_from_launcher(sim: SimCluster) -> None:
    for node in NODES:
        cp = subprocess.run(["ssh", "-F", str(sim.ssh_config), *BATCH, node, "hostname"],
                            check=False, capture_output=True, text=True, timeout=20)
        assert cp.returncode == 0, cp.stderr
        assert cp.stdout.strip() == node
        assert sim.ssh(node, ["echo", "a b"]).stdout == "a b\n"
    assert not Path("/root/.ssh").exists() or host_snapshot()["root_ssh"] is not None


def test_ssh_every_ordered_pair_with_strict_host_keys(sim: SimCluster) -> None:
    for a in NODES:
        for b in NODES:
            cp = ssh_from(sim, a, b)
            assert cp.returncode == 0, (a, b, cp.stderr)
            assert cp.stdout.strip() == b
            # by address too: known_hosts holds both
            cp = ssh_from(sim, a, sim.node(b).address)
            assert cp.stdout.strip() == b, (a, b, cp.stderr)


def test_noninteractive_ssh_shell_sees_bashrc(sim: SimCluster) -> None:
    for node in NODES:
        out = sim.ssh(node, 'echo "$PDSH_RCMD_TYPE|$PATH|$TORCH_EXTENSIONS_DIR"').stdout.strip()
        rcmd, path, tx = out.split("|")
        assert rcmd == "ssh"
        assert path.split(":")[0] == os.path.dirname(sys.executable)
        assert tx.startswith(str(sim.state_dir))


def test_pdsh_from_a_node(sim: SimCluster) -> None:
    cp = sim.ssh("node1", "pdsh -w node1,node2,node3 hostname | sort", timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == ["node1: node1", "node2: node2", "node3: node3"]


# ----------------------------------------------------------------------------------------------
# faults bite, restore heals


def test_world_writable_authorized_keys_refused(healthy: SimCluster) -> None:
    sim = healthy
    sim.chmod("node2", "authorized_keys", 0o666)
    cp = sim.ssh("node2", ["hostname"])
    assert cp.returncode == 255 and "Permission denied" in cp.stderr
    assert "bad ownership or modes" in sim.node("node2").paths["sshd_log"].read_text()
    assert ssh_from(sim, "node1", "node2").returncode == 255
    assert sim.ssh("node1", ["hostname"]).returncode == 0
    sim.restore()
    assert sim.ssh("node2", ["hostname"]).stdout.strip() == "node2"


def test_ssh_dir_permissions(healthy: SimCluster) -> None:
    sim = healthy
    sim.chmod("node3", "ssh_dir", 0o755)  # accepted (PITFALLS 4)
    assert sim.ssh("node3", ["true"]).returncode == 0
    sim.chmod("node3", "ssh_dir", 0o777)
    assert "Permission denied" in sim.ssh("node3", ["true"]).stderr
    sim.restore()
    assert sim.node("node3").paths["ssh_dir"].stat().st_mode & 0o777 == 0o700
    sim.chmod("node3", "home", 0o777)
    assert "Permission denied" in sim.ssh("node3", ["true"]).stderr
    sim.restore()
    sim.chown("node3", "authorized_keys", 1000, 1000)
    assert "Permission denied" in sim.ssh("node3", ["true"]).stderr
    sim.restore()
    assert sim.ssh("node3", ["true"]).returncode == 0


def test_stopped_sshd_refuses(healthy: SimCluster) -> None:
    sim = healthy
    sim.stop_sshd("node3")
    assert not sim.sshd_answers("node3")
    cp = sim.ssh("node3", ["hostname"])
    assert cp.returncode == 255 and "Connection refused" in cp.stderr
    sim.start_sshd("node3")
    assert sim.ssh("node3", ["hostname"]).returncode == 0
    sim.stop_sshd("node3")
    sim.restore()
    assert sim.ssh("node3", ["hostname"]).stdout.strip() == "node3"


def test_iptables_drop_times_out(healthy: SimCluster) -> None:
    sim = healthy
    sim.iptables("node3", ["-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "DROP"])
    sim.iptables("node3", ["-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "DROP"])
    t0 = time.monotonic()
    cp = sim.ssh("node3", ["hostname"], options=["-o", "ConnectTimeout=2"])
    assert cp.returncode == 255 and "timed out" in cp.stderr
    assert time.monotonic() - t0 >= 1.5
    rules = sim.exec("node3", ["iptables", "-S", "INPUT"]).stdout
    assert "--dport 22 -j DROP" in rules
    assert "DROP" not in sim.exec("node2", ["iptables", "-S", "INPUT"]).stdout
    sim.restore()
    assert "DROP" not in sim.exec("node3", ["iptables", "-S", "INPUT"]).stdout
    assert sim.ssh("node3", ["hostname"]).returncode == 0


def test_sshd_option_pubkey_off(healthy: SimCluster) -> None:
    sim = healthy
    sim.set_sshd_option("node2", "PubkeyAuthentication", "no")
    assert "PubkeyAuthentication no" in sim.node("node2").paths["sshd_config"].read_text()
    effective = sim.exec("node2", ["/usr/sbin/sshd", "-T", "-f", "/etc/ssh/sshd_config"]).stdout
    assert "pubkeyauthentication no" in effective
    assert "Permission denied" in sim.ssh("node2", ["true"]).stderr
    sim.restore()
    assert sim.ssh("node2", ["true"]).returncode == 0
    assert "PubkeyAuthentication yes" in sim.node("node2").paths["sshd_config"].read_text()


def test_changed_host_key(healthy: SimCluster) -> None:
    sim = healthy
    sim.change_host_key("node3")
    cp = sim.ssh("node3", ["true"])
    assert cp.returncode == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in cp.stderr
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in ssh_from(sim, "node1", "node3").stderr
    sim.restore()
    assert sim.ssh("node3", ["true"]).returncode == 0
    assert ssh_from(sim, "node1", "node3").returncode == 0


def test_unknown_host_key(healthy: SimCluster) -> None:
    sim = healthy
    sim.remove_known_host("node1", "node3")
    cp = ssh_from(sim, "node1", "node3")
    assert cp.returncode == 255 and "Host key verification failed" in cp.stderr
    assert ssh_from(sim, "node2", "node3").returncode == 0
    sim.remove_known_host("launcher", "node2")
    assert "Host key verification failed" in sim.ssh("node2", ["true"]).stderr
    sim.restore()
    assert ssh_from(sim, "node1", "node3").returncode == 0
    assert sim.ssh("node2", ["true"]).returncode == 0


def test_missing_authorized_key(healthy: SimCluster) -> None:
    sim = healthy
    sim.remove_authorized_key("node3", from_node="node1")
    assert "Permission denied" in ssh_from(sim, "node1", "node3").stderr
    assert ssh_from(sim, "node2", "node3").returncode == 0
    assert ssh_from(sim, "node1", "node2").returncode == 0
    sim.remove_authorized_key("node1", from_node="launcher")
    assert "Permission denied" in sim.ssh("node1", ["true"]).stderr
    sim.restore()
    assert ssh_from(sim, "node1", "node3").returncode == 0
    assert sim.ssh("node1", ["true"]).returncode == 0


def test_hosts_entries(healthy: SimCluster) -> None:
    sim = healthy
    sim.set_hosts_entry("node1", "node3", "10.9.9.9")
    assert sim.exec("node1", ["getent", "hosts", "node3"]).stdout.split()[0] == "10.9.9.9"
    assert sim.exec("node2", ["getent", "hosts", "node3"]).stdout.split()[0] == sim.node(
        "node3").address
    sim.remove_hosts_entry("node2", "node3")
    assert sim.exec("node2", ["getent", "hosts", "node3"]).returncode == 2
    assert "Could not resolve hostname" in ssh_from(sim, "node2", "node3").stderr
    sim.restore()
    for node in NODES:
        assert sim.exec(node, ["getent", "hosts", "node3"]).stdout.split()[0] == sim.node(
            "node3").address


def test_hostname_change(healthy: SimCluster) -> None:
    sim = healthy
    sim.set_hostname("node2", "other")
    assert sim.ssh("node2", ["hostname"]).stdout.strip() == "other"
    assert sim.exec("node1", ["hostname"]).stdout.strip() == "node1"
    sim.restore()
    assert sim.ssh("node2", ["hostname"]).stdout.strip() == "node2"


def test_bashrc_faults(healthy: SimCluster) -> None:
    sim = healthy
    sim.append_bashrc("node2", "export NCCL_SOCKET_IFNAME=ib0\n")
    assert sim.ssh("node2", "echo $NCCL_SOCKET_IFNAME").stdout.strip() == "ib0"
    sim.prepend_bashrc("node2", "case $- in *i*) ;; *) return;; esac\n")
    out = sim.ssh("node2", 'echo "[$NCCL_SOCKET_IFNAME][$PDSH_RCMD_TYPE]"').stdout.strip()
    assert out == "[][]"
    sim.restore()
    assert sim.ssh("node2", 'echo "[$NCCL_SOCKET_IFNAME][$PDSH_RCMD_TYPE]"').stdout.strip() \
        == "[][ssh]"


def test_env_file(healthy: SimCluster) -> None:
    sim = healthy
    sim.set_env_file("node2", ".deepspeed_env", "NCCL_DEBUG=INFO\n")
    assert sim.ssh("node2", ["cat", ".deepspeed_env"]).stdout == "NCCL_DEBUG=INFO\n"
    assert sim.ssh("node1", ["cat", ".deepspeed_env"]).returncode != 0
    sim.restore()
    assert not (sim.node("node2").paths["home"] / ".deepspeed_env").exists()


def test_private_dir_breaks_sharing(healthy: SimCluster) -> None:
    sim = healthy
    f = sim.shared_dir / "selftest-private.txt"
    f.write_text("shared\n")
    try:
        sim.bind_private_dir("node3", sim.shared_dir)
        assert sim.exec("node3", ["cat", str(f)]).returncode != 0
        assert sim.exec("node2", ["cat", str(f)]).stdout == "shared\n"
        sim.restore()
        assert sim.exec("node3", ["cat", str(f)]).stdout == "shared\n"
    finally:
        f.unlink(missing_ok=True)


def test_tc_rate_limit(healthy: SimCluster) -> None:
    sim = healthy
    sim.tc("node2", ["qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "1mbit",
                     "burst", "32kbit", "latency", "100ms"])
    assert "tbf" in sim.exec("node2", ["tc", "qdisc", "show", "dev", "eth0"]).stdout
    sim.restore()
    assert "tbf" not in sim.exec("node2", ["tc", "qdisc", "show", "dev", "eth0"]).stdout


def test_restore_undoes_stacked_faults_in_reverse(healthy: SimCluster) -> None:
    sim = healthy
    before = sim.node("node1").paths["hosts"].read_text()
    sim.set_hosts_entry("node1", "node2", "10.9.9.2")
    sim.remove_hosts_entry("node1", "node2")
    sim.add_hosts_line("node1", "10.9.9.3 node2")
    sim.stop_sshd("node1")
    sim.set_sshd_option("node1", "PermitRootLogin", "no")  # edits the file while sshd is down
    assert len(sim.faults) == 5
    assert not sim.sshd_answers("node1")  # a stopped sshd stays stopped after a config change
    sim.restore()
    assert sim.faults == []
    assert sim.node("node1").paths["hosts"].read_text() == before
    assert sim.ssh("node1", ["hostname"]).stdout.strip() == "node1"


def test_iptables_undo_rules() -> None:
    undo = SimCluster._iptables_undo
    assert undo([], ["-A", "INPUT", "-j", "DROP"]) == [["-D", "INPUT", "-j", "DROP"]]
    assert undo([], ["-I", "INPUT", "1", "-j", "DROP"]) == [["-D", "INPUT", "-j", "DROP"]]
    assert undo([], ["-t", "raw", "-A", "PREROUTING", "-j", "DROP"]) == [
        ["-t", "raw", "-D", "PREROUTING", "-j", "DROP"]]
    assert undo([], ["-N", "X"]) == [["-F", "X"], ["-X", "X"]]
    with pytest.raises(SimError):
        undo([], ["-F"])


# ----------------------------------------------------------------------------------------------
# lifecycle: down, crashes, subnet choice


def test_status_cli(sim: SimCluster) -> None:
    cp = subprocess.run([sys.executable, "-m", "fixtures.sim", "status", "--state",
                         str(sim.state_dir)], check=False, capture_output=True, text=True,
                        cwd=REPO)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.count("answers (SSH-2.0-") == 3


def test_down_leaves_nothing(sim: SimCluster, host_before: dict) -> None:
    state = STATE_ROOT / "test_sim_down"
    with SimCluster(state, nodes=2) as other:
        prefix, inodes = other.prefix, other.netns_inodes()
        assert prefix != sim.prefix and other.subnet != sim.subnet  # two sims coexist
        assert len(inodes) == 2
        # a stray process in a node
        other.exec("node1", ["sh", "-c", "sleep 300 >/dev/null 2>&1 &"])
        other.popen("node2", ["sleep", "300"])
        assert other.ssh("node2", ["hostname"]).stdout.strip() == "node2"
        assert sim.ssh("node2", ["hostname"]).stdout.strip() == "node2"
    assert leftovers(prefix, inodes) == []
    assert json.loads((state / "cluster.json").read_text())["status"] == "down"
    assert host_snapshot() == host_before
    # idempotent
    assert down(state) == []
    # the other cluster still works
    assert sim.ssh("node3", ["hostname"]).stdout.strip() == "node3"


def test_context_manager_tears_down_on_exception() -> None:
    state = STATE_ROOT / "test_sim_raise"
    with pytest.raises(ZeroDivisionError), SimCluster(state, nodes=1) as c:
        prefix, inodes = c.prefix, c.netns_inodes()
        assert leftovers(prefix) != []
        raise ZeroDivisionError
    assert leftovers(prefix, inodes) == []


def test_context_manager_tears_down_on_keyboard_interrupt() -> None:
    state = STATE_ROOT / "test_sim_raise"
    with pytest.raises(KeyboardInterrupt), SimCluster(state, nodes=1) as c:
        prefix, inodes = c.prefix, c.netns_inodes()
        raise KeyboardInterrupt
    assert leftovers(prefix, inodes) == []


def test_crashed_up_is_cleaned_by_down() -> None:
    state = STATE_ROOT / "test_sim_crash"
    prefix = prefix_for(state)
    down(state)
    proc = subprocess.Popen([sys.executable, "-m", "fixtures.sim", "up", "--nodes", "16",
                             "--state", str(state)], cwd=REPO, start_new_session=True)
    deadline = time.monotonic() + 20
    while not any(ln.startswith("netns") for ln in leftovers(prefix)):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # the crash is over once every process of its group is: a killed `ip link add` finishes the
    # kernel's half of its work first, and a link made after `down` looked would be left over
    deadline = time.monotonic() + 30
    while group_alive(proc.pid):
        assert time.monotonic() < deadline, "the killed up's processes did not end"
        time.sleep(0.01)
    assert leftovers(prefix) != []
    inodes = {int(x) for x in (state / ".sim-netns-inodes").read_text().split()} \
        if (state / ".sim-netns-inodes").exists() else set()
    cp = subprocess.run([sys.executable, "-m", "fixtures.sim", "down", "--state", str(state)],
                        check=False, capture_output=True, text=True, cwd=REPO)
    assert cp.returncode == 0, cp.stderr
    assert leftovers(prefix, inodes) == []


def test_leftover_netns_is_cleaned_by_up() -> None:
    state = STATE_ROOT / "test_sim_leftover"
    prefix = prefix_for(state)
    down(state)
    stray = f"{prefix}-node7"
    subprocess.run(["ip", "netns", "add", stray], check=True)
    subprocess.run(["ip", "link", "add", f"{prefix}br", "type", "bridge"], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", stray, "sleep", "300"],
                               start_new_session=True)
    time.sleep(0.2)
    stray_ino = netns_of(str(sleeper.pid))
    assert stray_ino is not None
    try:
        with SimCluster(state, nodes=2) as c:
            assert f"netns {stray}" not in leftovers(prefix)
            sleeper.wait(timeout=5)  # killed by up's cleanup
            assert c.ssh("node2", ["hostname"]).stdout.strip() == "node2"
            inodes = c.netns_inodes()
        assert leftovers(prefix, inodes | {stray_ino}) == []
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        down(state)


def test_subnet_choice_avoids_used_networks(tmp_path: Path) -> None:
    first = choose_subnet(tmp_path, used=[])
    taken = ipaddress.IPv4Network(f"{first}.0/24")
    second = choose_subnet(tmp_path, used=[taken])
    assert second != first
    assert not ipaddress.IPv4Network(f"{second}.0/24").overlaps(taken)
    # a wide route covering the candidate also counts
    wide = ipaddress.IPv4Network(f"{first}.0/24").supernet(new_prefix=16)
    assert not ipaddress.IPv4Network(f"{choose_subnet(tmp_path, used=[wide])}.0/24").overlaps(wide)
    with pytest.raises(SimError, match="no free /24"):
        choose_subnet(tmp_path, used=[ipaddress.IPv4Network("10.0.0.0/8")])
    # the real one overlaps none of this machine's routes
    real = ipaddress.IPv4Network(f"{choose_subnet(tmp_path)}.0/24")
    assert not real.overlaps(ipaddress.IPv4Network("192.0.2.0/24"))


def test_ssh_banner_helper(sim: SimCluster) -> None:
    banner = ssh_banner(sim.node("node1").address)
    assert banner is not None and banner.startswith("SSH-2.0-")
    assert ssh_banner(sim.launcher_address, port=1, timeout=0.5) is None
