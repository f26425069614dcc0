"""The promise, end to end (issue 13): on the simulated cluster, the fast checklist is green
exactly where a real `deepspeed --hostfile` launch from the rank-0 node works, and where the
launch fails because of one node, the fast checklist is red on that node only, for the same
reason.  Every fault is injected for real, and the launch is the real one (deepspeed -> pdsh ->
ssh -> launch.py -> torch.distributed on gloo)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from suite import run_suite

FAST = ("-m", "not collective and not training")
NODES = ["node1", "node2", "node3"]
#: the venv whose `deepspeed` the nodes run (its `#!` line names this path, unresolved)
VENV = Path(sys.executable).parent.parent
TRAIN = """\
import datetime, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
t = torch.ones(1)
dist.all_reduce(t)
print("CT_LAUNCH_OK rank=%d sum=%d" % (dist.get_rank(), int(t.item())), flush=True)
dist.destroy_process_group()
"""


def real_launch(sim, hosts: list[str], *, launch_dir: str = "/root", master: str | None = None,
                timeout: int = 150) -> str:
    """`deepspeed --hostfile` started on the rank-0 node, in `launch_dir`, as a user would (its
    non-interactive shell, its PATH); the training script is `train.py` there.  Returns what it
    printed (stdout and stderr)."""
    hostfile = sim.state_dir / "shared" / f"launch-hostfile-{random.randrange(1 << 30)}"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in hosts))
    port = random.randrange(30000, 31000)
    cmd = (f"cd {launch_dir} && timeout -s KILL {timeout - 10} deepspeed --hostfile {hostfile} "
           f"--master_addr {master or hosts[0]} --master_port {port} train.py 2>&1; "
           f"echo CT_LAUNCH_EXIT=$?")
    try:
        res = sim.ssh(sim.nodes[0].name, cmd, timeout=timeout)
        return res.stdout + res.stderr
    finally:
        hostfile.unlink(missing_ok=True)


def put_script(sim, nodes, launch_dir: str = "/root") -> None:
    """train.py in the launch directory (under /root) of each node: homes are private on the sim."""
    rel = Path(launch_dir).relative_to("/root") / "train.py"
    for n in nodes:
        sim.set_env_file(n, str(rel), TRAIN)


def launch_ok(output: str, ranks: int) -> bool:
    return output.count("CT_LAUNCH_OK") == ranks and "CT_LAUNCH_EXIT=0" in output


def names_only(failed: set[str], node: str) -> list[str]:
    """Red ids that do not name `node` (the promise: every red names the node at fault)."""
    return sorted(t for t in failed if node not in t)


@pytest.mark.parametrize("naming", ["hostnames", "addresses", "service-fqdns"])
def test_healthy_cluster_is_green_and_the_launch_works(healthy_sim, tmp_path, naming):
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
    put_script(sim, list(names))
    r = run_suite(sim, *FAST, hostfile=hostfile, ssh_config=config)
    assert r.returncode == 0, r.describe()
    rehearsed = {f"test_launch_rehearsal[{v}]" for v in names.values()}
    assert rehearsed <= r.passed, r.describe()
    assert r.properties[f"test_launch_rehearsal[{names['node2']}]"]["launch_python"] == \
        str(VENV / "bin" / "python")
    out = real_launch(sim, list(names.values()))
    assert launch_ok(out, 3), out[-3000:]


def _fault_launch_dir(sim):
    # the script only where the directory exists (on node3 the ranks start in the home instead)
    for n in ("node1", "node2"):
        sim.exec(n, ["mkdir", "-p", "/root/proj"])
    put_script(sim, ["node1", "node2"], "/root/proj")
    return ("--launch-dir", "/root/proj"), "/root/proj"


def _fault_interpreter(sim):
    put_script(sim, NODES)
    sim.bind_private_dir("node3", VENV)  # the venv (deepspeed's interpreter) is not on node3
    return (), "/root"


def _fault_stray_package(sim):
    # an old copy of the package left in node3's home (the launch directory, first on sys.path)
    put_script(sim, NODES)
    sim.exec("node3", ["sh", "-c", "mkdir -p /root/deepspeed && "
                                   "echo '__version__ = \"0.14.0\"' > /root/deepspeed/__init__.py"])
    return (), "/root"


def _fault_pythonhome(sim):
    put_script(sim, NODES)
    sim.append_bashrc("node3", "export PYTHONHOME=/opt/python-removed\n")
    return (), "/root"


FAULTS = {
    # name: (inject, what the rehearsal says, what the real launch prints on node3)
    "launch dir missing on node3": (
        _fault_launch_dir, "`cd /root/proj` failed there", "can't open file '/root/train.py'"),
    "interpreter missing on node3": (
        _fault_interpreter, "which does not exist on node3", "No such file or directory"),
    "stray deepspeed package in node3's launch dir": (
        _fault_stray_package, "No module named 'deepspeed.launcher'",
        "No module named 'deepspeed.launcher'"),
    "PYTHONHOME set by node3's bashrc": (
        _fault_pythonhome, "PYTHONHOME is '/opt/python-removed' there", "Fatal Python error"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_node_the_launch_fails_on_is_red_alone_and_for_the_same_reason(healthy_sim, fault):
    sim = healthy_sim
    inject, said, launch_says = FAULTS[fault]
    try:
        args, launch_dir = inject(sim)
        r = run_suite(sim, *FAST, *args)
        assert "test_launch_rehearsal[node3]" in r.failed, r.describe()
        assert said in r.message("test_launch_rehearsal[node3]"), r.describe()
        assert "fix: on node3" in r.message("test_launch_rehearsal[node3]")
        assert names_only(r.failed, "node3") == [], r.describe()
        assert {"test_launch_rehearsal[node1]", "test_launch_rehearsal[node2]"} <= r.passed
        if fault.startswith("stray"):  # E3 names what the launch imports, and from where
            e3 = r.message("test_versions[node3]")
            assert "deepspeed imported from /root/deepspeed/__init__.py is 0.14.0" in e3, e3
            assert "remove or rename /root/deepspeed" in r.message("test_launch_rehearsal[node3]")
        out = real_launch(sim, ["node1", "node2", "node3"], launch_dir=launch_dir)
        assert not launch_ok(out, 3), out[-3000:]
        node3 = [ln for ln in out.splitlines() if ln.startswith("node3:")]
        assert any(launch_says in ln for ln in node3), out[-3000:]
    finally:
        for n in ("node1", "node2", "node3"):
            sim.exec(n, ["rm", "-rf", "/root/proj", "/root/deepspeed"])


def test_broken_deepspeed_env_on_rank0_is_red_on_rank0_only(healthy_sim):
    sim = healthy_sim
    put_script(sim, [nd.name for nd in sim.nodes])
    sim.set_env_file("node1", ".deepspeed_env", "NCCL_DEBUG=INFO\nNCCL_IB_DISABLE\n")
    r = run_suite(sim, *FAST)
    assert r.failed == {"test_deepspeed_env[node1]", "test_launch_rehearsal[node1]"}, r.describe()
    msg = r.message("test_launch_rehearsal[node1]")
    assert "would stop on node1 before starting any rank" in msg and ":2: 'NCCL_IB_DISABLE'" in msg
    assert ("blocked by test_launch_rehearsal[node1]: the launch cannot start on node1"
            in r.message("test_launch_rehearsal[node3]"))
    out = real_launch(sim, ["node1", "node2", "node3"])
    assert "ValueError: not enough values to unpack" in out and not launch_ok(out, 3), out[-3000:]


def test_pdsh_leg_to_a_dead_node_is_red_under_its_name_only(healthy_sim):
    sim = healthy_sim
    sim.stop_sshd("node3")
    r = run_suite(sim, "-m", "ssh or env", "--timeout-connect", "3")
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
    assert "test_socket_ifname[node1]" in r.failed, r.describe()
    msg = r.message("test_socket_ifname[node1]")
    assert "GLOO_SOCKET_IFNAME=ib0" in msg and "exported to every rank by deepspeed from node1" in msg
    assert "on node1: set GLOO_SOCKET_IFNAME=" in msg
    assert r.properties["test_socket_ifname[node2]"]["blocked_by"] == "test_socket_ifname[node1]"
    assert "test_allreduce" in r.failed, r.describe()
    assert "Unable to find address for: ib0" in r.message("test_allreduce"), r.describe()
    out = real_launch(sim, NODES)
    assert not launch_ok(out, 3) and "ib0" in out, out[-3000:]
