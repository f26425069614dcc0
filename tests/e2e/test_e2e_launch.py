"""The promise, end to end (issue 13): on the simulated cluster, the fast checklist is green
exactly where a real `deepspeed --hostfile` launch from the rank-0 node works, and where the
launch fails because of one node, the fast checklist is red on that node only, for the same
reason.  Every fault is injected for real, and the launch is the real one (deepspeed -> pdsh ->
ssh -> launch.py -> torch.distributed on gloo)."""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from suite import FAST, accepted_logins, logins_from, run_suite

from fixtures.sim import free_subnet_in

NODES = ["node1", "node2", "node3"]
#: the venv whose `deepspeed` the nodes run (its `#!` line names this path, unresolved)
VENV = Path(sys.executable).parent.parent


def train_script(imports: str, init: str) -> str:
    """The launch tests' job: `init` (a process group on gloo), one all-reduce, a line per rank."""
    return (f"import datetime, {imports}torch, torch.distributed as dist\n{init}\n"
            "t = torch.ones(1)\n"
            "dist.all_reduce(t)\n"
            'print("CT_LAUNCH_OK rank=%d sum=%d" % (dist.get_rank(), int(t.item())), flush=True)\n'
            "dist.destroy_process_group()\n")


def gloo_job(init_timeout: int) -> str:
    return train_script("", 'dist.init_process_group("gloo", timeout=datetime.timedelta('
                            f'seconds={init_timeout}))')


TRAIN = gloo_job(20)
#: where the launch is meant to fail on one node (or on every one, for a rendezvous that is not
#: there), the ranks that did start need not wait 20 s for it: their rendezvous gives up sooner
FAILING = gloo_job(8)


def real_launch(sim, hosts: list[str], *, launch_dir: str = "/root", master: str | None = None,
                timeout: int = 150, derive_master: bool = False, extra: str = "") -> str:
    """`deepspeed --hostfile` started on the rank-0 node, in `launch_dir`, as a user would (its
    non-interactive shell, its PATH); the training script is `train.py` there.  Returns what it
    printed (stdout and stderr).  `derive_master`: no --master_addr, DeepSpeed derives it."""
    hostfile = sim.state_dir / "shared" / f"launch-hostfile-{random.randrange(1 << 30)}"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in hosts))
    port = random.randrange(30000, 31000)
    addr = "" if derive_master else f"--master_addr {master or hosts[0]} "
    cmd = (f"cd {launch_dir} && timeout -s KILL {timeout - 10} deepspeed --hostfile {hostfile} "
           f"{addr}{extra + ' ' if extra else ''}--master_port {port} train.py 2>&1; "
           f"echo CT_LAUNCH_EXIT=$?")
    try:
        res = sim.ssh(sim.nodes[0].name, cmd, timeout=timeout)
        return res.stdout + res.stderr
    finally:
        hostfile.unlink(missing_ok=True)


def put_script(sim, nodes, launch_dir: str = "/root", job: str = TRAIN) -> None:
    """train.py in the launch directory (under /root) of each node: homes are private on the sim."""
    rel = Path(launch_dir).relative_to("/root") / "train.py"
    for n in nodes:
        sim.set_env_file(n, str(rel), job)


def launch_ok(output: str, ranks: int) -> bool:
    return output.count("CT_LAUNCH_OK") == ranks and "CT_LAUNCH_EXIT=0" in output


def names_only(failed: set[str], node: str) -> list[str]:
    """Red ids that do not name `node` (the promise: every red names the node at fault)."""
    return sorted(t for t in failed if node not in t)


@pytest.mark.parametrize("naming", ["hostnames", "addresses", "service-fqdns"])
def test_healthy_cluster_is_green_and_the_launch_works(healthy_sim, tmp_path, naming, request):
    """Cost: one fast-checklist run (about 20 CPU s; for plain hostnames, the shared healthy run
    of conftest.py, the same hostfile and ssh config) and one real launch (about 20 CPU s)."""
    sim = healthy_sim
    names = {nd.name: nd.name for nd in sim.nodes}
    if naming == "addresses":
        names = {nd.name: nd.address for nd in sim.nodes}
    elif naming == "service-fqdns":
        names = {nd.name: f"{nd.name}.workers.default.svc.cluster.local" for nd in sim.nodes}
        for node, name in names.items():
            sim.add_name(node, name)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{names[nd.name]} slots=1\n" for nd in sim.nodes))
    config = sim.ssh_config_for({n: v for n, v in names.items() if n != v}, tmp_path / "ssh_config")
    # plain hostnames: the hostfile and the ssh config are the sim's own (its run restores the
    # sim first, so the script is put after it)
    shared = request.getfixturevalue("healthy_fast_run") if naming == "hostnames" else None
    put_script(sim, list(names))
    r = shared if shared is not None else run_suite(sim, *FAST, hostfile=hostfile,
                                                    ssh_config=config)
    assert r.returncode == 0, r.describe()
    rehearsed = {f"test_launch_rehearsal[{v}]" for v in names.values()}
    assert rehearsed <= r.passed, r.describe()
    assert r.properties[f"test_launch_rehearsal[{names['node2']}]"]["launch_python"] == \
        str(VENV / "bin" / "python")
    out = real_launch(sim, list(names.values()))
    assert launch_ok(out, 3), out[-3000:]


#: a cloud cluster's names: its machines known by ssh configs alone (issue 41)
ALIASES = {"node1": "gpu-a", "node2": "gpu-b", "node3": "gpu-c"}


def _alias_shape(sim, tmp_path, hostnames: dict[str, str] | None = None):
    """The hostfile names ALIASES, which only ssh configs know: every node's ~/.ssh/config and
    the launcher's (`Host gpu-a` / `HostName <address>`); no DNS record, no /etc/hosts line.
    Returns (hostfile, the launcher's ssh config)."""
    config = sim.ssh_aliases(ALIASES, tmp_path / "ssh_config", hostnames)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{a} slots=1\n" for a in ALIASES.values()))
    return hostfile, config


def test_ssh_alias_hostfile_is_green_and_the_launch_works(healthy_sim, tmp_path):
    """The names exist for ssh alone, as DeepSpeed needs them (pdsh and its `ssh <first host>
    hostname -I` go through ssh; each rank's own address comes from its node): green, each alias
    shown with its HostName, the pair checks dialing each node's own address, and the real
    launch without --master_addr trains on every rank."""
    sim = healthy_sim
    hostfile, config = _alias_shape(sim, tmp_path)
    assert sim.exec("node1", ["getent", "hosts", "gpu-b"]).returncode != 0  # no resolver knows it
    put_script(sim, NODES)
    r = run_suite(sim, *FAST, hostfile=hostfile, ssh_config=config)
    assert r.returncode == 0, r.describe()
    addr = {nd.name: nd.address for nd in sim.nodes}
    h2 = r.properties["test_hostname_matches[gpu-b]"]
    assert h2["name_is"] == "ssh alias", h2
    assert h2["ssh_alias"].startswith(f"gpu-b -> HostName {addr['node2']} (ssh config on gpu-a"), h2
    assert {f"test_resolves[{a}->{b}]" for a in ALIASES.values() for b in ALIASES.values()} \
        <= r.passed, r.describe()
    assert "test_high_ports[gpu-c->gpu-b]" in r.passed and "test_master_port[gpu-c->gpu-a]" in \
        r.passed, r.describe()
    assert r.properties["test_master_addr[gpu-a]"]["master_addr"] == addr["node1"]
    nodes = {n["name"]: n for n in json.loads((r.junit.parent / "summary.json").read_text())[
        "nodes"]}
    assert nodes["gpu-c"]["ssh alias"] == f"HostName {addr['node3']}", nodes["gpu-c"]
    assert nodes["gpu-c"]["hostname"] == "node3"
    out = real_launch(sim, list(ALIASES.values()), derive_master=True)
    assert launch_ok(out, 3), out[-3000:]


@pytest.fixture(scope="module")
def port_and_hostname_run(sim):
    """One green shape of two tests, one suite run and one real launch (about 45 CPU s): every
    node's sshd on 2222, 22 answering nothing (the port in each sshd_config, in the launcher's
    and every node's ssh config, known_hosts keyed `[name]:2222`); and node3's `hostname` is
    'gpu-box-7', which resolves there to its own routable address. Returns (whether node1's
    sshd still answered on 22, the fast checklist's result, the real launch's output)."""
    sim.restore()
    try:
        put_script(sim, NODES)
        sim.move_sshd(2222)
        sim.set_hostname("node3", "gpu-box-7")
        sim.add_hosts_line("node3", f"{sim.nodes[2].address} gpu-box-7")
        answers = sim.sshd_answers("node1")
        r = run_suite(sim, *FAST)
        out = real_launch(sim, NODES)
    finally:
        sim.restore()
    return answers, r, out


def test_sshd_on_another_port_everywhere_is_green_and_the_launch_works(healthy_sim,
                                                                        port_and_hostname_run):
    """Every node's sshd on 2222, 22 answering nothing: the fast checklist is green, and the real
    launch works, pdsh's ssh taking the port from the rank-0 node's ssh config as the suite's
    checks do. Cost: shares port_and_hostname_run (node3's hostname differs there too)."""
    answers, r, out = port_and_hostname_run
    assert not answers  # nothing on 22 any more
    assert r.returncode == 0, r.describe()
    assert launch_ok(out, 3), out[-3000:]


def test_a_regular_user_with_a_shared_home_is_green_and_the_launch_works(healthy_sim, tmp_path):
    """Many clusters' shape: the user is not root, and one home (NFS) is every node's, with one
    key pair authorized for itself, one known_hosts and one .bashrc, in a world-writable sticky
    directory (/home is 1777 on every node, as HPC scratch areas are: sshd stops its checks at
    the home). The launcher's ssh config says `User alice`: the fast checklist, run as alice on
    every node, is green, and alice's own `deepspeed --hostfile` from node1, in her home, runs
    on every node."""
    sim = healthy_sim
    home = sim.add_user("alice", uid=1500, homes_mode=0o1777)
    for name, text in (("train.py", TRAIN),
                       ("hostfile", "".join(f"{n} slots=1\n" for n in NODES))):
        (home / name).write_text(text)
        os.chown(home / name, 1500, 1500)
    config = sim.ssh_config_as("alice", tmp_path / "ssh_config")
    seen = {nd.name: len(accepted_logins(sim, nd.name)) for nd in sim.nodes}
    r = run_suite(sim, *FAST, ssh_config=config)
    assert r.returncode == 0, r.describe()
    # what alice cannot read is said as such (F4 once said no firewall tool was installed:
    # /usr/sbin is not on a regular user's PATH)
    assert "needs root; uid 1500" in r.message("test_firewall_rules[node1]"), r.describe()
    assert "uid 1500" in r.message("test_sshd_config[node1]"), r.describe()
    for n, before in seen.items():  # every login of the run, the launcher's and pdsh's, alice's
        accepted = accepted_logins(sim, n)[before:]
        assert accepted and all(" for alice " in ln for ln in accepted), (n, accepted[:5])
    port = random.randrange(30000, 31000)
    res = subprocess.run(
        ["ssh", "-F", str(config), "-o", "BatchMode=yes", "node1",
         f"cd && timeout -s KILL 110 deepspeed --hostfile hostfile --master_addr node1 "
         f"--master_port {port} train.py 2>&1; echo CT_LAUNCH_EXIT=$?"],
        check=False, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    out = res.stdout + res.stderr
    assert launch_ok(out, 3), out[-3000:]


def test_an_ssh_alias_to_a_dead_address_is_one_red_on_that_node(healthy_sim, tmp_path):
    """gpu-c's HostName (in every ssh config) is an address where nothing answers: one red, the
    launcher's login to gpu-c, whose fix is the ssh config's HostName (never the node's
    hostname); every check that needs gpu-c is blocked by it; the real launch fails there."""
    sim = healthy_sim
    dead = sim.subnet.split("/")[0].rsplit(".", 1)[0] + ".99"
    hostfile, config = _alias_shape(sim, tmp_path, {"node3": dead})
    put_script(sim, NODES, job=FAILING)
    r = run_suite(sim, *FAST, "--timeout-connect", "3", hostfile=hostfile, ssh_config=config)
    assert r.failed == {"test_login[gpu-c]"}, r.describe()
    msg = r.message("test_login[gpu-c]")
    assert f"sends gpu-c to HostName {dead}, where nothing answers on port 22" in msg, msg
    assert "correct the HostName of its 'Host gpu-c' block" in msg, msg
    assert "hostnamectl" not in msg
    by = {t: p["blocked_by"] for t, p in r.properties.items() if "blocked_by" in p}
    for t in ("test_hostname_matches[gpu-c]", "test_resolves[gpu-a->gpu-c]",
              "test_ssh_trust[gpu-a->gpu-c]", "test_pdsh[gpu-a->gpu-c]",
              "test_launch_rehearsal[gpu-c]", "test_high_ports[gpu-b->gpu-c]",
              "test_master_port[gpu-c->gpu-a]"):
        assert by.get(t) == "test_login[gpu-c]", (t, r.describe())
    out = real_launch(sim, list(ALIASES.values()), derive_master=True, timeout=120)
    assert not launch_ok(out, 3), out[-3000:]
    assert any(ln.startswith("gpu-c:") and dead in ln for ln in out.splitlines()), out[-3000:]


#: launch faults, each on one node other than rank 0: name -> (the node, what its red says, what
#: the real launch prints there); the red is the rehearsal's, but E8's where the launch
#: directory is missing (the rehearsal it blocks). Two independent faults share one suite run
#: and one real launch (FAULT_RUNS), on two different nodes: each node's red is asserted alone.
FAULTS = {
    "launch dir missing on node3": (
        "node3", "the launch directory /root/proj does not exist there",
        "can't open file '/root/train.py'"),
    "PYTHONHOME set by node2's bashrc": (
        "node2", "PYTHONHOME is '/opt/python-removed' there", "Fatal Python error"),
    "interpreter missing on node3": (
        "node3", "which does not exist on node3", "No such file or directory"),
    "stray deepspeed package in node2's launch dir": (
        "node2", "No module named 'deepspeed.launcher'", "No module named 'deepspeed.launcher'"),
}


def _faults_launch_dir_and_pythonhome(sim):
    """/root/proj (the launch directory) on node1 and node2 only, the script there only (on
    node3 the ranks start in the home, which has none); node2's bashrc sets PYTHONHOME."""
    for n in ("node1", "node2"):
        sim.exec(n, ["mkdir", "-p", "/root/proj"])
    put_script(sim, ["node1", "node2"], "/root/proj", FAILING)
    sim.append_bashrc("node2", "export PYTHONHOME=/opt/python-removed\n")
    return ("--launch-dir", "/root/proj"), "/root/proj"


def _faults_interpreter_and_stray_package(sim):
    """The venv (deepspeed's interpreter) is not on node3; an old copy of the package is left in
    node2's home, the launch directory (first on sys.path): the suite is told so (--launch-dir;
    it defaults to the directory it runs in), as the real launch starts there."""
    put_script(sim, NODES, job=FAILING)
    sim.bind_private_dir("node3", VENV)
    sim.exec("node2", ["sh", "-c", "mkdir -p /root/deepspeed && "
                                   "echo '__version__ = \"0.14.0\"' > /root/deepspeed/__init__.py"])
    return ("--launch-dir", "/root"), "/root"


#: one suite run (the fast checklist) and one real launch per entry, for the two faults it holds
FAULT_RUNS = {
    ("launch dir missing on node3", "PYTHONHOME set by node2's bashrc"):
        _faults_launch_dir_and_pythonhome,
    ("interpreter missing on node3", "stray deepspeed package in node2's launch dir"):
        _faults_interpreter_and_stray_package,
}


@pytest.fixture(scope="module")
def fault_runs() -> dict[str, tuple]:
    """fault name -> (suite result, real launch output) of the run that held it: filled by the
    first test of each pair, read by the second (two faults, one run)."""
    return {}


def _run_faults(sim, runs: dict[str, tuple], fault: str) -> tuple:
    if fault in runs:
        return runs[fault]
    pair, inject = next((k, v) for k, v in FAULT_RUNS.items() if fault in k)
    try:
        args, launch_dir = inject(sim)
        r = run_suite(sim, *FAST, *args)
        out = real_launch(sim, ["node1", "node2", "node3"], launch_dir=launch_dir)
    finally:
        for n in ("node1", "node2", "node3"):
            sim.exec(n, ["rm", "-rf", "/root/proj", "/root/deepspeed"])
        sim.restore()
    for f in pair:
        runs[f] = (r, out)
    return r, out


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_node_the_launch_fails_on_is_red_alone_and_for_the_same_reason(healthy_sim, fault,
                                                                         fault_runs):
    """Cost: one fast-checklist run and one failing real launch for each two faults (about
    25 CPU s each), shared by the two tests of a pair (FAULT_RUNS)."""
    node, said, launch_says = FAULTS[fault]
    other = "node2" if node == "node3" else "node3"  # the node of the fault it shares a run with
    r, out = _run_faults(healthy_sim, fault_runs, fault)
    mine = {t for t in r.failed if node in t and other not in t}  # the reds of this node alone
    red = "test_launch_files[node3]" if fault.startswith("launch dir") else \
        f"test_launch_rehearsal[{node}]"
    if fault.startswith("launch dir"):
        assert mine == {red}, r.describe()
        assert r.properties["test_launch_rehearsal[node3]"]["blocked_by"] == red, r.describe()
    assert red in r.failed, r.describe()
    assert said in r.message(red), r.describe()
    assert f"fix: on {node}" in r.message(red)
    # every red names the node of one of the run's two faults
    assert [t for t in r.failed if node not in t and other not in t] == [], r.describe()
    assert "test_launch_rehearsal[node1]" in r.passed, r.describe()
    if fault.startswith(("stray", "interpreter")):
        # deepspeed missing (or shadowed) on the node: one red, the rehearsal's; E3, which sees
        # the same from its side, is blocked by it, saying what it saw
        assert mine == {red}, r.describe()
        assert r.properties[f"test_versions[{node}]"]["blocked_by"] == red, r.describe()
    if fault.startswith("stray"):  # E3 names what the launch imports, and from where
        e3 = r.message(f"test_versions[{node}]")
        assert "deepspeed imported from /root/deepspeed/__init__.py is 0.14.0" in e3, e3
        assert "remove or rename /root/deepspeed" in r.message(red)
    assert not launch_ok(out, 3), out[-3000:]
    lines = [ln for ln in out.splitlines() if ln.startswith(f"{node}:")]
    assert any(launch_says in ln for ln in lines), out[-3000:]


def test_broken_deepspeed_env_on_rank0_is_red_on_rank0_only(healthy_sim):
    sim = healthy_sim
    put_script(sim, [nd.name for nd in sim.nodes])
    sim.set_env_file("node1", ".deepspeed_env", "NCCL_DEBUG=INFO\nNCCL_IB_DISABLE\n")
    r = run_suite(sim, *FAST)
    # one cause, one red: E2's, naming the line; the rehearsal (on node1, where the launch
    # stops, and on every node) is blocked by it
    assert r.failed == {"test_deepspeed_env[node1]"}, r.describe()
    # launch-wide: node1's runner hands the file to every rank, so no set of nodes avoids it
    assert "Launch now: no set of nodes launches until this is fixed" in r.output, r.describe()
    assert not r.junit.with_name("hostfile.healthy").exists()
    msg = r.message("test_deepspeed_env[node1]")
    assert ".deepspeed_env:2: " in msg and "'NCCL_IB_DISABLE' has no '='" in msg, msg
    assert "not enough values to unpack" in msg, msg
    assert ("blocked by test_deepspeed_env[node1]: deepspeed --hostfile would stop on node1 "
            "before starting any rank" in r.message("test_launch_rehearsal[node1]"))
    for n in NODES:
        assert r.properties[f"test_launch_rehearsal[{n}]"]["blocked_by"] == \
            "test_deepspeed_env[node1]", r.describe()
    out = real_launch(sim, ["node1", "node2", "node3"])
    assert "ValueError: not enough values to unpack" in out and not launch_ok(out, 3), out[-3000:]


def test_pdsh_leg_to_a_dead_node_is_red_under_its_name_only(healthy_sim):
    sim = healthy_sim
    sim.stop_sshd("node3")
    rank0 = sim.node("node1").address
    before = logins_from(sim, "node2", rank0)
    r = run_suite(sim, "-m", "ssh or env", "--timeout-connect", "3")
    # from node1 into node2: S4's leg and the launch's pdsh (the rehearsal's, which S5 reads)
    assert logins_from(sim, "node2", rank0) - before == 2
    # one red for the dead node; pdsh's legs to it and its rehearsal are blocked by it
    assert r.failed == {"test_login[node3]"}, r.describe()
    for t in ("test_pdsh[node1->node3]", "test_pdsh[launcher->node3]",
              "test_launch_rehearsal[node3]"):
        assert r.properties[t]["blocked_by"] == "test_login[node3]", r.describe()
    assert {"test_pdsh[node1->node2]", "test_pdsh[launcher->node1]",
            "test_pdsh_installed[node1]"} <= r.passed, r.describe()
    assert "node3 refuses connections" in r.message("test_pdsh[node1->node3]")


def test_rendezvous_port_faults_name_both_ends(healthy_sim):
    sim = healthy_sim
    sim.iptables("node3", ["-A", "OUTPUT", "-p", "tcp", "--dport", str(29500), "-j", "DROP"])
    r = run_suite(sim, "-m", "network")
    bad = {t for t in r.failed if t.startswith("test_master_port")}
    assert bad == {"test_master_port[node3->node1]"}, r.describe()
    assert names_only(r.failed, "node3") == [], r.describe()
    sim.restore()
    sim.iptables("node1", ["-A", "INPUT", "-p", "tcp", "--dport", str(29500), "-j", "REJECT"])
    r = run_suite(sim, "-m", "network")
    # one cause, node1's own rule: F4 on node1 is the red, every leg to it is blocked by it
    assert r.failed == {"test_firewall_rules[node1]"}, r.describe()
    for n in NODES:
        assert r.properties[f"test_master_port[{n}->node1]"]["blocked_by"] == \
            "test_firewall_rules[node1]", r.describe()
    msg = r.message("test_firewall_rules[node1]")
    assert "node2 -> node1: master port 29500" in msg and "--dport 29500 -j REJECT" in msg


def test_the_launchs_exports_reach_the_checks_and_the_all_reduce(healthy_sim):
    """GLOO_SOCKET_IFNAME=ib0 in rank 0's ~/.deepspeed_env: deepspeed exports it to every rank,
    and no node has ib0, so the real launch cannot even create gloo's device. F5 judges what the
    ranks get (red on node1, whose file it is; the others cite it), and C1's workers run with the
    launch's exports, so the all-reduce fails as the launch would."""
    sim = healthy_sim
    put_script(sim, NODES)
    sim.set_env_file("node1", ".deepspeed_env", "GLOO_SOCKET_IFNAME=ib0\n")
    r = run_suite(sim, "-m", "network or collective", "-k", "socket_ifname or test_allreduce")
    # one cause, one red: F5 on node1; F5 elsewhere and the all-reduce (which fails as the
    # launch would: gloo finds no address for ib0) are blocked by it
    assert r.failed == {"test_socket_ifname[node1]"}, r.describe()
    msg = r.message("test_socket_ifname[node1]")
    assert ("GLOO_SOCKET_IFNAME=ib0" in msg
            and "exported to every rank by deepspeed from node1" in msg)
    assert "on node1: set GLOO_SOCKET_IFNAME=" in msg
    assert r.properties["test_socket_ifname[node2]"]["blocked_by"] == "test_socket_ifname[node1]"
    for t in ("test_allreduce", "test_allreduce_pair[node1<->node2]"):
        assert r.properties[t]["blocked_by"] == "test_socket_ifname[node1]", r.describe()
    assert "GLOO_SOCKET_IFNAME=ib0 selects no usable interface" in r.message("test_allreduce")
    out = real_launch(sim, NODES)
    assert not launch_ok(out, 3) and "ib0" in out, out[-3000:]


# -- the master address as DeepSpeed derives it (issue 24) -------------------------------------

def _unroutable_first_address(sim):
    """node1's `hostname -I` starts with 10.99.0.1, an address on its eth0 that no peer routes
    to (added, then node1's own address re-added after it, so that it comes first)."""
    sim.exec("node1", ["sh", "-c", "a=$(ip -o -4 addr show eth0 | awk '{print $4}'); "
                                   "ip addr add 10.99.0.1/24 dev eth0 && ip addr del $a dev eth0 "
                                   "&& ip addr add $a dev eth0"], check=True)


MASTER_FAULTS = {
    # name: (inject, what H3 says, the value the real launch takes)
    "rank 0's bashrc prints a line": (
        lambda sim: sim.append_bashrc("node1", "echo 'Welcome to node1'\n"),
        ["DeepSpeed will use 'Welcome' as --master_addr", "/root/.bashrc:",
         "pass --master_addr node1"],
        "Welcome"),
    "hostname -I starts with an address no peer routes to": (
        _unroutable_first_address,
        ["is 10.99.0.1 (eth0 on node1)", "node2 has no route to it", "pass --master_addr"],
        "10.99.0.1"),
}


@pytest.mark.parametrize("fault", list(MASTER_FAULTS))
def test_a_master_addr_deepspeed_derives_badly_is_red_on_rank0(healthy_sim, fault):
    """Without --master_addr the fast checklist judges what DeepSpeed derives: red on node1's id
    naming the value, and the real launch (no --master_addr) fails."""
    sim = healthy_sim
    inject, says, value = MASTER_FAULTS[fault]
    put_script(sim, NODES, job=FAILING)
    try:
        inject(sim)
        r = run_suite(sim, *FAST)
        # one cause, one red: H3's; every F2 leg that fails for that address is blocked by it
        assert r.failed == {"test_master_addr[node1]"}, r.describe()
        msg = r.message("test_master_addr[node1]")
        assert all(x in msg for x in says), msg
        for n in ("node2", "node3"):
            assert r.properties[f"test_master_port[{n}->node1]"]["blocked_by"] == \
                "test_master_addr[node1]", r.describe()
        out = real_launch(sim, NODES, derive_master=True, timeout=120)
        assert f"Using IP address of {value} for node node1" in out, out[-3000:]
        assert not launch_ok(out, 3), out[-3000:]
    finally:
        sim.exec("node1", ["ip", "addr", "del", "10.99.0.1/24", "dev", "eth0"])


def hostname_on_node1(sim, body: str) -> None:
    """A `hostname` of node1's own, first on its non-interactive PATH: /root/ct-bin/hostname
    running ``body`` (/bin/sh). The test removes /root/ct-bin when it ends."""
    script = shlex.quote(f"#!/bin/sh\n{body}\n")
    sim.exec("node1", ["sh", "-c", f"mkdir -p /root/ct-bin && printf '%s' {script} > "
                                   "/root/ct-bin/hostname && chmod +x /root/ct-bin/hostname"],
             check=True)
    sim.prepend_bashrc("node1", "export PATH=/root/ct-bin:$PATH\n")


def test_hostname_I_unsupported_on_the_first_host_is_red_on_rank0(healthy_sim):
    """node1 (the first host) has a `hostname` without -I (as busybox's and the BSDs' are),
    stood in for by coreutils' `uname -n`, whose refusal of -I is uname's own: DeepSpeed's ssh
    check (`ssh node1 hostname`) passes, its `ssh node1 hostname -I` fails, so a launch without
    --master_addr stops before starting any rank.  Red on node1's H3 id, saying why, with the
    fix; the real launch fails so; with the fix (--master_addr given through --launch-args) H3
    is green and the real launch works."""
    sim = healthy_sim
    put_script(sim, NODES)
    hostname_on_node1(sim, 'exec uname -n "$@"')
    try:
        assert sim.ssh("node1", "hostname").stdout.strip() == "node1"
        assert sim.ssh("node1", "hostname -I").returncode != 0
        r = run_suite(sim, *FAST)
        assert "test_master_addr[node1]" in r.failed, r.describe()
        msg = r.message("test_master_addr[node1]")
        assert "DeepSpeed cannot derive --master_addr" in msg, msg
        assert "hostname -I` on node1 fails (this `hostname` has no -I option: uname:" in msg, msg
        assert "deepspeed stops before starting any rank" in msg, msg
        assert "pass --master_addr node1" in msg, msg
        assert names_only(r.failed, "node1") == [], r.describe()
        out = real_launch(sim, NODES, derive_master=True, timeout=120)
        assert "Unable to detect suitable master address via" in out, out[-3000:]
        assert not launch_ok(out, 3), out[-3000:]
        fixed = run_suite(sim, *FAST, "-k", "master_addr", "--launch-args", "--master_addr node1")
        assert "test_master_addr[node1]" in fixed.passed, fixed.describe()
        out = real_launch(sim, NODES)
        assert launch_ok(out, 3), out[-3000:]
    finally:
        sim.exec("node1", ["rm", "-rf", "/root/ct-bin"])


def test_hostname_failing_on_the_first_host_stops_the_launch_whatever_master_addr(healthy_sim):
    """node1 (the first host) runs no `hostname` in a non-interactive shell (exit 127): DeepSpeed's
    own ssh check (`ssh -o PasswordAuthentication=no node1 hostname`) fails before any
    --master_addr is used, so even a launch given --master_addr stops. Red on node1's H3 id
    naming that check and a fix that works (--no_ssh_check), not --master_addr; the real launch
    with --master_addr fails so; with --no_ssh_check it works, and H3 is green."""
    sim = healthy_sim
    put_script(sim, NODES)
    hostname_on_node1(sim, 'echo "sh: 1: hostname: not found" >&2; exit 127')
    try:
        assert sim.ssh("node1", "hostname").returncode == 127
        r = run_suite(sim, *FAST, "-k", "master_addr", "--launch-args", "--master_addr node1")
        assert "test_master_addr[node1]" in r.failed, r.describe()
        msg = r.message("test_master_addr[node1]")
        assert "deepspeed stops before starting any rank: its check `ssh -o " \
               "PasswordAuthentication=no node1 hostname` on node1 fails" in msg, msg
        assert "with or without --master_addr" in msg, msg
        assert "(exit 127: sh: 1: hostname: not found)" in msg, msg
        assert "launch with --no_ssh_check" in msg, msg
        out = real_launch(sim, NODES, master="node1", timeout=120)
        assert "but host=node1 was not reachable via ssh" in out, out[-3000:]
        assert not launch_ok(out, 3), out[-3000:]
        fixed = run_suite(sim, *FAST, "-k", "master_addr", "--launch-args",
                          "--no_ssh_check --master_addr node1")
        assert "test_master_addr[node1]" in fixed.passed, fixed.describe()
        out = real_launch(sim, NODES, master="node1", extra="--no_ssh_check")
        assert launch_ok(out, 3), out[-3000:]
    finally:
        sim.exec("node1", ["rm", "-rf", "/root/ct-bin"])


def test_launch_args_round_trip_to_t2_and_the_rehearsals_red(healthy_sim):
    """--launch-args "--master_port 29533 --exclude node3": the command line T2 launches and the
    one the rehearsal mirrors carry exactly those flags, and say so: in T2's record and in the
    rehearsal's red on node2 (a stray old deepspeed in node2's launch directory)."""
    sim = healthy_sim
    put_script(sim, NODES)
    sim.exec("node2", ["sh", "-c", "mkdir -p /root/deepspeed && "
                                   "echo '__version__ = \"0.14.0\"' > /root/deepspeed/__init__.py"])
    try:
        # node2's home is the launch directory (--launch-dir: it defaults to where pytest runs)
        r = run_suite(sim, "-m", "env or training", "-k", "launch_rehearsal or multi_node",
                      "--launch-dir", "/root",
                      "--launch-args", "--master_port 29533 --exclude node3")
        assert "test_launch_rehearsal[node2]" in r.failed, r.describe()
        said = r.message("test_launch_rehearsal[node2]")
        assert "the launch rehearsed: deepspeed --hostfile" in said, said
        assert "--master_port 29533 --exclude node3" in said and "--master_addr" not in said, said
        assert "test_launch_rehearsal[node3]" in r.ids("skipped"), r.describe()
        t2 = r.properties["test_train_multi_node"]
        line = t2.get("launch_command") or ""
        assert "--master_port 29533" in line and "--exclude node3" in line, (t2, r.describe())
        assert "--master_addr" not in line, line
        if "test_train_multi_node" in r.failed:
            assert f"launched as: {line}" in r.message("test_train_multi_node")
    finally:
        sim.exec("node2", ["rm", "-rf", "/root/deepspeed"])


def test_banner_on_stderr_is_green_and_launch_args_round_trip(healthy_sim):
    """Rank 0's bashrc prints a banner to stderr (DeepSpeed reads stdout only): green, the value
    is node1's address, and the real launch without --master_addr works.  --launch-args is read
    as deepspeed reads it: the port, the exclude filter and the command line the rehearsal
    mirrors."""
    sim = healthy_sim
    put_script(sim, NODES)
    sim.append_bashrc("node1", "echo 'Welcome to node1' >&2\n")
    r = run_suite(sim, *FAST, "--launch-args", "--master_port=29533 --exclude node3 --ssh_port 22")
    assert r.returncode == 0, r.describe()
    props = r.properties["test_master_addr[node1]"]
    assert props["master_addr"] == sim.nodes[0].address, props
    assert props["master_addr_from"] == "ssh -p 22 node1 hostname -I", props
    line = r.properties["test_launch_rehearsal[node1]"]["launch_command"]
    assert ("--master_port 29533 --exclude node3 --ssh_port 22" in line
            and "--master_addr" not in line)
    assert "test_launch_rehearsal[node3]" in r.ids("skipped"), r.describe()
    out = real_launch(sim, NODES, derive_master=True)
    assert launch_ok(out, 3), out[-3000:]


# -- the launch's interpreter, not the non-interactive PATH (issue 24) -------------------------

#: the top of Debian/Ubuntu's stock ~/.bashrc: nothing below it runs in a non-interactive shell
STOCK_EARLY_RETURN = ("# ~/.bashrc as Debian/Ubuntu ship it\n"
                      "case $- in\n    *i*) ;;\n      *) return;;\nesac\n")
NEEDS_VAR = 'import os\nassert os.environ.get("CT_NEEDED") == "1", "CT_NEEDED is not set"\n' + TRAIN


def interactive_launch(sim, hosts: list[str], script: str = "train.py", timeout: int = 150) -> str:
    """`deepspeed --hostfile` typed in an interactive shell on the rank-0 node (where the stock
    bashrc activates the environment), without --master_addr, as a user starts it."""
    hostfile = sim.state_dir / "shared" / f"launch-hostfile-{random.randrange(1 << 30)}"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in hosts))
    port = random.randrange(30000, 31000)
    inner = (f"cd /root && timeout -s KILL {timeout - 10} deepspeed --hostfile {hostfile} "
             f"--master_port {port} {script} 2>&1; echo CT_LAUNCH_EXIT=$?")
    try:
        res = sim.ssh(sim.nodes[0].name, f"bash -i -c {shlex.quote(inner)} 2>&1", timeout=timeout)
        return res.stdout + res.stderr
    finally:
        hostfile.unlink(missing_ok=True)


def test_stock_bashrc_env_only_in_interactive_shells_is_green_and_launches(healthy_sim):
    """The environment (the venv on PATH, DS_ACCELERATOR...) only below the stock early return on
    every node: no `deepspeed` on the non-interactive PATH, yet the launch works (DeepSpeed runs
    its interpreter by absolute path): green, with E1's warning.  A variable the ranks need that
    is set only below the return stays red (DeepSpeed does not export it), and the launch whose
    script needs it fails."""
    sim = healthy_sim
    put_script(sim, NODES)
    for n in NODES:
        sim.set_env_file(n, "needs.py", NEEDS_VAR)
        sim.prepend_bashrc(n, STOCK_EARLY_RETURN)
        sim.append_bashrc(n, "export CT_NEEDED=1\n")
    r = run_suite(sim, *FAST)
    assert r.returncode == 0, r.describe()
    assert {f"test_required_env[{n}]" for n in NODES} <= r.passed, r.describe()
    assert {f"test_versions[{n}]" for n in NODES} <= r.passed, r.describe()
    assert r.properties["test_versions[node2]"]["deepspeed"], r.properties["test_versions[node2]"]
    out = interactive_launch(sim, NODES)
    assert launch_ok(out, 3), out[-3000:]
    r = run_suite(sim, *FAST, "--required-env", "CT_NEEDED", "-k", "required_env")
    assert r.failed == {f"test_required_env[{n}]" for n in NODES}, r.describe()
    msg = r.message("test_required_env[node2]")
    assert "not set: CT_NEEDED" in msg and "below the early return" in msg, msg
    out = interactive_launch(sim, NODES, script="needs.py")
    assert not launch_ok(out, 3) and "CT_NEEDED is not set" in out, out[-3000:]


# -- each rank's own address, as torch.distributed takes it (issue 24) --------------------------

def test_own_address_peers_cannot_reach_is_red_on_that_node(healthy_sim):
    """node2's hostname resolves there to an IPv6 address of its own first (bindable, so gloo
    advertises it); no peer has IPv6 there.  The other checks resolve names over IPv4 and stay
    green; F7 is red on node2 alone, and the real launch fails at init_process_group."""
    sim = healthy_sim
    put_script(sim, NODES)
    try:
        sim.exec("node2", ["ip", "addr", "add", "fd00:c7::2/64", "dev", "eth0", "nodad"],
                 check=True)
        sim.add_hosts_line("node2", "fd00:c7::2 node2")
        r = run_suite(sim, *FAST)
        assert r.failed == {"test_own_address[node2]"}, r.describe()
        msg = r.message("test_own_address[node2]")
        assert ("would advertise fd00:c7::2 (IPv6" in msg
                and "node1, node3 cannot connect" in msg), msg
        assert "fix: on node2: make 'node2' resolve there" in msg, msg
        assert "gloo needs one address family on every rank" in msg, msg
        out = real_launch(sim, NODES, timeout=120)
        assert not launch_ok(out, 3), out[-3000:]
        assert "ss1.ss_family == ss2.ss_family" in out, out[-3000:]  # gloo's own refusal
    finally:
        sim.exec("node2", ["ip", "addr", "del", "fd00:c7::2/64", "dev", "eth0"])


def test_a_hostname_other_than_the_hostfile_name_resolving_to_a_routable_address_is_green(
        healthy_sim, port_and_hostname_run):
    """node3's `hostname` is 'gpu-box-7', which resolves there to its own routable address: gloo
    advertises that address, the peers reach it, the launch works; F7 is green (H2 warns).
    Cost: shares port_and_hostname_run (every sshd is on port 2222 there too)."""
    sim = healthy_sim
    _answers, r, out = port_and_hostname_run
    assert r.returncode == 0, r.describe()
    own = r.properties["test_own_address[node3]"]["own_address"]
    assert own == f"{sim.nodes[2].address} (hostname)"
    assert launch_ok(out, 3), out[-3000:]


def test_127_0_1_1_where_peers_must_dial_it_is_one_red_n3_with_f7_blocked(healthy_sim):
    """node2's hostname on Debian's `127.0.1.1 node2` line, and its peers' gloo addresses above
    127.0.1.1 (node1's and node3's hostnames resolve there first to a second address of theirs,
    in 192.168.0.0/16): in gloo's tcp pair the greater address dials, so node1 and node3 would
    connect to 127.0.1.1, themselves (run for real: "Connection refused, remote=[127.0.1.1]",
    the launch fails).  F7 finds that red on node2, and it is N3's cause: one red (N3, with its
    fixes.sh block), F7 blocked by it."""
    sim = healthy_sim
    net = free_subnet_in("192.168.0.0/16")
    added = []
    try:
        for i, n in enumerate(NODES, 1):
            sim.exec(n, ["ip", "addr", "add", f"{net}.{i}/24", "dev", "eth0"], check=True)
            added.append((n, f"{net}.{i}/24"))
        for i in (1, 3):
            sim.add_hosts_line(f"node{i}", f"{net}.{i} node{i}")
        sim.add_hosts_line("node2", "127.0.1.1 node2")
        r = run_suite(sim, "-m", "names or network", "-k", "own_address or hostname_not_loopback")
        assert r.failed == {"test_hostname_not_loopback[node2]"}, r.describe()
        assert r.properties["test_own_address[node2]"]["blocked_by"] == \
            "test_hostname_not_loopback[node2]", r.describe()
        assert {"test_own_address[node1]", "test_own_address[node3]"} <= r.passed, r.describe()
        assert r.properties["test_own_address[node1]"]["own_address"] == f"{net}.1 (hostname)"
        script = (r.junit.parent / "fixes.sh").read_text()
        assert [ln.split(":")[0] for ln in script.splitlines() if ln.startswith("# --- [")] == [
            "# --- [N3] on node2"], script
    finally:
        for n, cidr in added:
            sim.exec(n, ["ip", "addr", "del", cidr, "dev", "eth0"])
