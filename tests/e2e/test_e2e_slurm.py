"""After the verdict, in the simulated cluster's real Slurm (Debian's slurmctld and slurmd 22.05,
fixtures/sim/slurm.py): `--slurm-drain` drains the node whose own check is red, with the suite's
reason, and leaves an administrator's drain alone; `--slurm-resume` resumes it once it is green;
without the flags nothing changes in Slurm and the summary prints the scontrol lines."""

from __future__ import annotations

import os
import subprocess

from suite import run_suite

from fixtures.sim.slurm import missing_tools

REASON = "cluster-tests: test_login[node3]: connection refused"
DRAIN = f'scontrol update NodeName=node3 State=DRAIN Reason="{REASON}"'
RESUME = "scontrol update NodeName=node3 State=RESUME"
ADMIN = "node2: drained in Slurm for another reason (maintenance): not the suite's, left as is"


def slurm(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(list(argv), env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60, check=True).stdout


def sinfo(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    """node -> (compact state, reason), as `sinfo -N -h -o "%N %t %E"` prints them."""
    out = {}
    for line in slurm(env, "sinfo", "-N", "-h", "-o", "%N %t %E").splitlines():
        name, state, reason = line.split(" ", 2)
        out[name] = (state, reason)
    return out


def test_drain_and_resume_in_a_real_slurm(healthy_sim):
    assert not missing_tools(), f"make setup installs Slurm; missing: {missing_tools()}"
    real = healthy_sim.start_slurm()
    env = real.env()
    ssh = ("-m", "ssh", "-k", "test_login and not time", "--no-history")
    try:
        slurm(env, "scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=maintenance")
        healthy_sim.stop_sshd("node3")
        before = sinfo(env)
        assert before == {"node1": ("idle", "none"), "node2": ("drain", "maintenance"),
                          "node3": ("idle", "none")}, before

        # red on node3, no flag: the lines, and Slurm as it was
        r = run_suite(healthy_sim, *ssh, env=env)
        assert r.failed == {"test_login[node3]"}, r.describe()
        assert f"  {DRAIN}" in r.output.splitlines(), r.output[-3000:]
        assert "Slurm: nothing changed (no --slurm-drain / --slurm-resume); they would run:" \
            in r.output
        assert sinfo(env) == before

        # --slurm-drain: node3 drained with the suite's reason, node2's own drain untouched
        r = run_suite(healthy_sim, *ssh, "--slurm-drain", env=env)
        assert r.failed == {"test_login[node3]"}, r.describe()
        assert f"  drained node3: {DRAIN}" in r.output.splitlines(), r.output[-3000:]
        assert f"  {ADMIN}" in r.output.splitlines()
        assert sinfo(env) == {"node1": ("idle", "none"), "node2": ("drain", "maintenance"),
                              "node3": ("drain", REASON)}

        # sshd back; green, no flag: the resume line, Slurm unchanged
        healthy_sim.start_sshd("node3")
        r = run_suite(healthy_sim, *ssh, env=env)
        assert r.returncode == 0, r.describe()
        assert f"  {RESUME}" in r.output.splitlines(), r.output[-3000:]
        assert sinfo(env)["node3"] == ("drain", REASON)

        # --slurm-resume: node3 back, node2 still the administrator's
        r = run_suite(healthy_sim, *ssh, "--slurm-resume", env=env)
        assert r.returncode == 0, r.describe()
        assert f"  resumed node3: {RESUME}" in r.output.splitlines(), r.output[-3000:]
        assert f"  {ADMIN}" in r.output.splitlines()
        after = sinfo(env)
        # right after a RESUME, Slurm 22.05 shows the node not responding ("idle*") until its
        # slurmd answers the ping the resume sends (tests/data/samples/scontrol-show-node-*)
        assert after["node3"][0].rstrip("*") == "idle" and after["node3"][1] == "none", after
        assert after["node1"] == ("idle", "none") and after["node2"] == ("drain", "maintenance")
    finally:
        for node in ("node2", "node3"):  # the next Slurm of this sim starts from its saved state
            subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                           env={**os.environ, **env}, capture_output=True, timeout=60,
                           check=False)
        real.stop()
