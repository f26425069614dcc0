"""End to end on a simulated cluster with several faults at once: one red and one fixes.sh block
per cause, the checks each cause breaks blocked naming its red; the script, run unchanged, heals
everything it can reach, and `pytest --lf` (the reds and what they blocked) is then red only
where a person is needed, with hostfile.healthy excluding exactly that node; once the person has
acted, `--lf` is green, and a second run of the script changes nothing. The one fault no ssh
command can fix (the login itself refused) is a comment that a person acts on, as they would at
the node's console."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from suite import FAST, PYTEST, REPO, SuiteResult, parse_junit, verdict_of

from fixtures.sim import SimCluster


@pytest.fixture(scope="module")
def sim4(tmp_path_factory):
    with SimCluster(tmp_path_factory.mktemp("sim4fix"), nodes=4, slots=1) as cluster:
        yield cluster


def run(sim, workdir: Path, *args: str) -> SuiteResult:
    """The suite as a user runs it, with pytest's cache (for --lf) kept in `workdir`."""
    junit = workdir / "reports" / "junit.xml"
    argv = [*PYTEST, "--hostfile", str(sim.hostfile), "--ssh-config",
            str(sim.ssh_config), "-o", f"cache_dir={workdir / 'cache'}", f"--junitxml={junit}",
            "-rA", *args]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          errors="replace", timeout=600, check=False)
    r = SuiteResult(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start,
                    junit=junit)
    if junit.exists():
        r.outcomes, r.messages, r.properties, r.classnames = parse_junit(junit)
    return r


def state(sim) -> dict:
    """What the fixes touch on every node: contents, modes and change times of the ssh files and
    /etc/hosts, and the hostname."""
    out = {}
    for nd in sim.nodes:
        for key in ("authorized_keys", "id_ed25519", "hosts", "ssh_dir"):
            p = nd.paths[key]
            st = p.stat()
            out[(nd.name, key)] = (p.read_bytes() if p.is_file() else b"", st.st_mode,
                                   st.st_ctime_ns)
        out[(nd.name, "hostname")] = sim.exec(nd.name, ["hostname"]).stdout.strip()
    return out


def block(script: str, head: str) -> str:
    """The block whose first line starts with `head`."""
    parts = script.split("\n\n")
    return next(p for p in parts if p.startswith(head))


def test_faults_fixed_by_the_script_then_lf_is_green_and_a_rerun_changes_nothing(sim4):
    sim = sim4
    sim.remove_authorized_key("node2", from_node="node1")  # a missing key on one pair
    sim.chmod("node3", "id_ed25519", 0o644)  # ssh ignores an unprotected key: node3 -> * fails
    sim.set_hosts_entry("node3", "node1", sim.node("node2").address)  # a wrong /etc/hosts line
    sim.set_hostname("node2", "node2-old")  # a hostname mismatch, and on node2 itself
    sim.set_hosts_entry("node2", "node2", "127.0.2.1")  # its name leads elsewhere
    sim.chmod("node4", "authorized_keys", 0o666)  # world-writable: even the launcher is refused
    work = Path(tempfile.mkdtemp(prefix="ct-fixes-", dir=os.environ.get("CT_SUITE_TMP")))
    try:
        first = run(sim, work, *FAST)
        assert first.returncode == 1, first.describe()
        summary = verdict_of(first.output)
        assert any(re.fullmatch(r"review and run \S*/fixes\.sh \(1 of its 5 blocks need a "
                                r"person\), then pytest --lf", ln) for ln in summary), summary[-8:]
        # one red per cause, the checks each cause breaks blocked naming it
        assert first.failed == {"test_hostname_matches[node2]", "test_login[node4]",
                                "test_ssh_modes[node3]", "test_ssh_trust[node1->node2]",
                                "test_resolves[node3->node1]"}, first.describe()
        by = {t: p["blocked_by"] for t, p in first.properties.items() if "blocked_by" in p}
        assert by["test_ssh_trust[node3->node2]"] == "test_ssh_modes[node3]"
        assert by["test_ssh_trust[node2->node4]"] == "test_login[node4]"
        # node3's ports to node1 are dialed where node3's ranks dial them, node1's own address
        # (not its name, which node3 resolves to node2): they answer (issue 41)
        assert first.outcomes["test_high_ports[node3->node1]"] == "passed", first.describe()
        assert summary[0] == "Causes (5; one red each, the checks they block skipped):", summary[:3]
        path = first.junit.parent / "fixes.sh"
        script = path.read_text()
        assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
        # one block per cause, in checklist order (H, S, N), each naming its node and ids
        heads = [ln for ln in script.splitlines() if ln.startswith("# --- [")]
        assert [h.split(":")[0] for h in heads] == [
            "# --- [H2] on node2", "# --- [S1] needs a person on node4 (not run by this script)",
            "# --- [S2] on node3", "# --- [S4] on node2", "# --- [N2] on node3"], heads
        s4 = block(script, "# --- [S4] on node2")
        assert "# answers: test_ssh_trust[node1->node2]" in s4
        assert f"ssh -F {sim.ssh_config} -o BatchMode=yes" in s4 and " node2 '" in s4
        n2 = block(script, "# --- [N2] on node3")
        assert "test_resolves[node3->node1]" in n2
        s2 = block(script, "# --- [S2] on node3")
        assert "test_ssh_modes[node3]" in s2
        manual = block(script, "# --- [S1] needs a person on node4")
        assert all(ln.startswith("#") for ln in manual.splitlines())
        assert "chmod 600 ~/.ssh/authorized_keys" in manual and "test_login[node4]" in manual
        shutil.copy(path, work / "fixes.sh")

        ran = subprocess.run(["bash", str(work / "fixes.sh")], capture_output=True, text=True,
                             timeout=120, check=False)
        assert ran.returncode == 0, ran.stderr
        # the script heals what it can reach: the rerun is red only where a person is needed,
        # and the healthy file excludes exactly that node
        healed = run(sim, work, *FAST, "--lf")
        assert healed.failed == {"test_login[node4]"}, healed.describe()
        assert {"test_hostname_matches[node2]", "test_ssh_modes[node3]",
                "test_ssh_trust[node1->node2]", "test_ssh_trust[node3->node1]",
                "test_resolves[node3->node1]", "test_ssh_trust[node3->node2]"} <= healed.passed, \
            healed.describe()
        assert (healed.junit.parent / "hostfile.healthy").read_text() == (
            "node1 slots=1\nnode2 slots=1\nnode3 slots=1\n")
        # the manual block, done by a person at node4's console
        os.chmod(sim.node("node4").paths["authorized_keys"], 0o600)
        before = state(sim)
        again = subprocess.run(["bash", str(work / "fixes.sh")], capture_output=True, text=True,
                               timeout=120, check=False)
        assert again.returncode == 0, again.stderr
        assert state(sim) == before  # the second run changed nothing, not even a ctime

        rerun = run(sim, work, *FAST, "--lf")
        assert rerun.returncode == 0, rerun.describe()
        assert not rerun.failed
        # the root and what it blocked (and only those: the rest passed in the healed run)
        assert {"test_login[node4]", "test_ssh_trust[node2->node4]",
                "test_versions[node4]"} <= rerun.passed, rerun.describe()
        assert "test_ssh_trust[node1->node2]" not in rerun.outcomes
        assert "nothing to fix" in (rerun.junit.parent / "fixes.sh").read_text()
        print(f"faulty run {first.seconds:.1f} s, --lf after fixes.sh {rerun.seconds:.1f} s "
              f"({len(rerun.passed)} passed)")
    finally:
        sim.restore()


def test_the_127_0_1_1_line_is_healed_by_the_script_with_a_backup_once(healthy_sim):
    """node2's /etc/hosts gets Debian's `127.0.1.1 node2` line (after localhost, above its own
    line): N3 is red on node2 alone; fixes.sh, run from the launcher through the run's ssh,
    keeps the file as it was in node2's /etc/hosts.cluster-tests.bak, takes the line out, and a
    second run changes nothing (the backup not overwritten with the fixed file); `--lf` is
    green."""
    sim = healthy_sim
    node2 = sim.node("node2")
    healthy = node2.paths["hosts"].read_text()
    sim.add_hosts_line("node2", "127.0.1.1 node2")
    faulty = node2.paths["hosts"].read_text()
    backup = node2.paths["etc_upper"] / "hosts.cluster-tests.bak"  # node2's /etc, seen from here
    work = Path(tempfile.mkdtemp(prefix="ct-fixes-", dir=os.environ.get("CT_SUITE_TMP")))
    try:
        first = run(sim, work, "-m", "names")
        assert first.failed == {"test_hostname_not_loopback[node2]"}, first.describe()
        assert "resolves to 127.0.1.1" in first.message("test_hostname_not_loopback[node2]")
        script = (first.junit.parent / "fixes.sh").read_text()
        heads = [ln for ln in script.splitlines() if ln.startswith("# --- [")]
        assert [h.split(":")[0] for h in heads] == ["# --- [N3] on node2"], heads
        shutil.copy(first.junit.parent / "fixes.sh", work / "fixes.sh")

        ran = subprocess.run(["bash", str(work / "fixes.sh")], capture_output=True, text=True,
                             timeout=60, check=False)
        assert ran.returncode == 0, ran.stderr
        assert node2.paths["hosts"].read_text() == healthy  # the line out, its own line kept
        assert sim.exec("node2", ["cat", "/etc/hosts.cluster-tests.bak"]).stdout == faulty
        assert not Path("/etc/hosts.cluster-tests.bak").exists()  # not the machine's /etc
        files = [(p.read_bytes(), p.stat().st_ctime_ns) for p in (node2.paths["hosts"], backup)]
        again = subprocess.run(["bash", str(work / "fixes.sh")], capture_output=True, text=True,
                               timeout=60, check=False)
        assert again.returncode == 0, again.stderr
        assert [(p.read_bytes(), p.stat().st_ctime_ns)
                for p in (node2.paths["hosts"], backup)] == files  # nothing changed

        rerun = run(sim, work, "-m", "names", "--lf")
        assert rerun.returncode == 0, rerun.describe()
        assert rerun.passed == {"test_hostname_not_loopback[node2]"}, rerun.describe()
        print(f"-m names {first.seconds:.1f} s, --lf {rerun.seconds:.1f} s")
    finally:
        backup.unlink(missing_ok=True)
