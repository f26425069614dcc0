"""End to end on the simulated cluster: node lists from a Slurm allocation and from an Open MPI
hostfile, checked and written out as the DeepSpeed hostfile that the real launch accepts."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from suite import PYTEST, REPO, SuiteResult, parse_junit

from fixtures.sim.slurm import SimSlurm, missing_tools


def run_without_hostfile(sim, *args: str, env: dict[str, str] | None = None,
                         timeout: float = 600, prefix: tuple[str, ...] = ()) -> SuiteResult:
    """`pytest --ssh-config <sim> ARGS` with no --hostfile (the node list comes from elsewhere),
    under `prefix` (`salloc -N 3`: inside a real allocation).  Where Slurm's clients are
    installed (make setup), they read the sim's slurm.conf: `scontrol show hostnames` then
    expands the allocation's list for real."""
    tmp = tempfile.mkdtemp(prefix="ct-suite-", dir=os.environ.get("CT_SUITE_TMP"))
    junit = Path(tmp) / "junit.xml"
    argv = [*prefix, *PYTEST, "--ssh-config", str(sim.ssh_config),
            "-p", "no:cacheprovider", f"--junitxml={junit}", "-rA", *args]
    run_env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "SKYPILOT_", "CLUSTER_TESTS_", "PYTEST_ADDOPTS"))}
    if shutil.which("scontrol"):
        run_env["SLURM_CONF"] = str(SimSlurm(sim).write_conf())
    run_env.update(env or {})
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=run_env, capture_output=True, text=True,
                          errors="replace", timeout=timeout, check=False)
    result = SuiteResult(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start,
                         junit=junit)
    if junit.exists():
        result.outcomes, result.messages, result.properties, result.classnames = parse_junit(junit)
    return result


def test_slurm_nodelist_alone_checks_the_right_nodes_in_order(healthy_sim, tmp_path):
    written = tmp_path / "checked-hostfile"
    env = {"SLURM_JOB_NODELIST": "node[3,1-2]", "SLURM_TASKS_PER_NODE": "1(x3)"}
    r = run_without_hostfile(healthy_sim, "-m", "hostfile or ssh", "--write-hostfile",
                             str(written), env=env)
    assert r.returncode == 0, r.describe()
    header = next(ln for ln in r.output.splitlines() if ln.startswith("cluster: 3 nodes"))
    assert "from Slurm allocation SLURM_JOB_NODELIST=node[3,1-2]" in header, header
    assert "slots from SLURM_TASKS_PER_NODE=1(x3)" in header and header.endswith("rank 0: node3")
    # rank 0 first, in Slurm's order, as `deepspeed --hostfile` will read it
    assert written.read_text() == "node3 slots=1\nnode1 slots=1\nnode2 slots=1\n"
    assert {"test_login[node1]", "test_login[node2]", "test_login[node3]",
            "test_ssh_trust[node3->node1]", "test_pdsh[node3->node1]"} <= r.passed, r.describe()
    assert "test_pdsh_installed[node1]" not in r.outcomes  # the launch starts on rank 0: node3


def test_slurm_and_hostfile_and_bad_hostlist_are_usage_errors(healthy_sim):
    env = {"SLURM_JOB_NODELIST": "node[1-2]", "SKYPILOT_NODE_IPS": "10.0.0.1"}
    r = run_without_hostfile(healthy_sim, "-m", "hostfile", env=env)
    assert r.returncode == 4 and "SLURM_JOB_NODELIST=node[1-2] and SKYPILOT_NODE_IPS" in r.output
    r = run_without_hostfile(healthy_sim, "-m", "hostfile", "--hostfile", str(healthy_sim.hostfile),
                             "--mpi-hostfile", str(healthy_sim.hostfile))
    assert r.returncode == 4 and "two node lists given: --hostfile" in r.output, r.output[-800:]
    r = run_without_hostfile(healthy_sim, "-m", "hostfile",
                             env={"SLURM_JOB_NODELIST": "node[1-2]-ib",
                                  "SLURM_TASKS_PER_NODE": "1"})
    assert r.returncode == 4 and "Invalid hostlist: node[1-2]-ib" in r.output


def test_slurm_allocation_whose_scontrol_has_no_configuration_runs_on_the_builtin_expander(
        healthy_sim, tmp_path):
    """Inside a real `salloc -N 3` (Debian's Slurm on the sim), the suite's own `scontrol` has no
    usable configuration: its SLURM_CONF names an empty file, as on a login node whose client
    was installed but never configured. The real `scontrol show hostnames` fails; the built-in
    expander gives Slurm's list, the run is green, and the header and the summary say so in
    scontrol's own words."""
    assert not missing_tools(), f"make setup installs Slurm; missing: {missing_tools()}"
    unconfigured = tmp_path / "slurm.conf"
    unconfigured.write_text("")
    real = healthy_sim.start_slurm()
    try:
        r = run_without_hostfile(healthy_sim, "-m", "hostfile", env=real.env(),
                                 prefix=("salloc", "-N", "3", "--quiet",
                                         "env", f"SLURM_CONF={unconfigured}"))
    finally:
        real.stop()
    assert r.returncode == 0, r.describe()
    said = (f'scontrol: s_p_parse_file: file "{unconfigured}" is empty ... '
            "scontrol: fatal: Unable to process configuration file")
    header = next(ln for ln in r.output.splitlines() if ln.startswith("cluster: 3 nodes"))
    assert ("from Slurm allocation SLURM_JOB_NODELIST=node[1-3] (built-in Slurm hostlist "
            f"expander: `scontrol show hostnames` failed: {said}; slots from "
            "SLURM_TASKS_PER_NODE=1(x3))") in header, header
    summary = r.output[r.output.index("= cluster summary ="):]
    assert ("warning: SLURM_JOB_NODELIST=node[1-3] was expanded by the built-in Slurm hostlist "
            f"expander (3 nodes), because `{shutil.which('scontrol')} show hostnames` failed: "
            f"{said}") in summary, summary
    assert {"test_hostfile_syntax", "test_hostname_matches[node1]",
            "test_hostname_matches[node3]"} <= r.passed, r.describe()
    print(f"suite inside salloc: {r.seconds:.1f} s")


OPEN_MPI_HOSTFILE = """\
# written for mpirun --hostfile
node1 slots=1 max_slots=2
node2 slots=1   # second box
node3 count=1
"""


@pytest.mark.timeout(900)
def test_open_mpi_hostfile_becomes_a_deepspeed_hostfile_the_real_launch_accepts(healthy_sim,
                                                                                 tmp_path):
    pytest.importorskip("deepspeed")
    mpi = tmp_path / "ompi-hostfile"
    mpi.write_text(OPEN_MPI_HOSTFILE)
    written = tmp_path / "ds-hostfile"
    r = run_without_hostfile(
        healthy_sim, "--mpi-hostfile", str(mpi), "--write-hostfile", str(written),
        "-m", "hostfile or training", "-k", "syntax or multi_node",
        "--training-steps", "10", env={"DS_ACCELERATOR": "cpu"})
    assert written.read_text() == "node1 slots=1\nnode2 slots=1\nnode3 slots=1\n"
    assert r.outcomes.get("test_hostfile_syntax") == "passed", r.describe()
    # T2: `deepspeed --hostfile <the written file>` from node1, through pdsh, on all 3 nodes
    assert r.outcomes.get("test_train_multi_node") == "passed", r.describe()
    assert r.properties["test_train_multi_node"]["ranks"] == "3"
    assert f"nodes from MPI hostfile {mpi}" in r.output


def test_transport_srun_runs_the_node_probes_as_one_job_step(healthy_sim):
    """--transport srun in an allocation, through the stand-in srun (fixtures/sim/srun.py: each
    task in its node's own namespaces, with a step's environment; not Slurm). node3 drops every
    high port: F4's rule dump, read through the step on node3, is the one red; the rest of the
    checklist still goes through ssh, and the prefetch is one step on all three nodes."""
    bin_dir = healthy_sim.install_srun()
    before = len(healthy_sim.srun_log())
    healthy_sim.iptables("node3",
                         ["-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "DROP"])
    env = {"SLURM_JOB_NODELIST": "node[1-3]", "SLURM_TASKS_PER_NODE": "1(x3)",
           "SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    r = run_without_hostfile(healthy_sim, "-m", "network or ssh or accelerator or health",
                             "--transport", "srun", env=env)
    assert r.failed == {"test_firewall_rules[node3]"}, r.describe()
    msg = r.message("test_firewall_rules[node3]")
    assert "--dport 1024:65535 -j DROP" in msg and "fix: on node3" in msg, msg
    assert {"test_login[node3]", "test_ssh_trust[node1->node3]"} <= r.passed, r.describe()
    steps = healthy_sim.srun_log()[before:]
    assert [s["nodes"] for s in steps] == [["node1", "node2", "node3"]], steps
    assert steps[0]["command"] == ["python3", "-S"]  # (logged: 2 words) no probe imports torch


def test_transport_srun_outside_an_allocation_is_a_usage_error(healthy_sim):
    bin_dir = healthy_sim.install_srun()
    path = f"{bin_dir}:{os.environ['PATH']}"
    r = run_without_hostfile(healthy_sim, "-m", "network", "--transport", "srun",
                             env={"SLURM_JOB_NODELIST": "node[1-3]", "PATH": path,
                                  "SLURM_TASKS_PER_NODE": "1(x3)"})
    assert r.returncode == 4 and "not inside a Slurm allocation" in r.output, r.output[-800:]
    r = run_without_hostfile(healthy_sim, "-m", "network", "--transport", "srun",
                             "--hostfile", str(healthy_sim.hostfile),
                             env={"SLURM_JOB_ID": "4242", "PATH": path})
    assert r.returncode == 4 and "must come from the allocation" in r.output, r.output[-800:]


def test_transport_srun_under_a_real_slurm(healthy_sim):
    """--transport srun under a real Slurm (Debian's slurmctld, slurmd and munge, 22.05 here: one
    slurmd in each node's namespaces, fixtures/sim/slurm.py), the suite started inside
    `salloc -N 3` as a user starts it. node3 has one harmless DROP rule: F4 counts it on node3
    alone, read through the real step's task on node3; every node's slurmd launched the step."""
    assert not missing_tools(), f"make setup installs Slurm; missing: {missing_tools()}"
    real = healthy_sim.start_slurm()
    try:
        healthy_sim.iptables("node3", ["-A", "INPUT", "-p", "tcp", "--dport", "1000", "-j",
                                       "DROP"])
        r = run_without_hostfile(healthy_sim, "-m", "network or accelerator or health",
                                 "--transport", "srun", env=real.env(),
                                 prefix=("salloc", "-N", "3", "--quiet"))
        assert r.returncode == 0, r.describe()
        assert "from Slurm allocation SLURM_JOB_NODELIST=node[1-3]" in r.output
        rules = {n: r.properties[f"test_firewall_rules[{n}]"]["drop_rules"]
                 for n in ("node1", "node2", "node3")}
        assert rules == {"node1": "0", "node2": "0", "node3": "1"}, rules
        for n in ("node1", "node2", "node3"):
            assert "launch task StepId=" in real.log(n), n
    finally:
        real.stop()
