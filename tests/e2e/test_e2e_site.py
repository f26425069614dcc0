"""End to end on the simulated cluster: the shipped site-check example (examples/site_checks,
pytest-testinfra through `cluster_host`) is red for the one node that breaks it, in the summary
and in JUnit; the testinfra host keeps the run's strict host keys and command deadlines."""

from __future__ import annotations

from suite import REPO, run_suite

EXAMPLE = REPO / "examples" / "site_checks" / "test_site.py"
# the example's defaults are a GPU site's; on the sim: the root mount, the sim's openssh-server
SIM_SITE = {"SITE_MOUNT": "/", "SITE_PACKAGE": "openssh-server", "SITE_PACKAGE_VERSION": "1:9"}
SITE_K = ("-k", "test_mount or test_package_version or test_sshd_max_startups")


def test_site_check_failing_on_one_node_is_red_for_that_node_only(healthy_sim):
    healthy_sim.set_sshd_option("node2", "MaxStartups", "10:30:100")
    r = run_suite(healthy_sim, "--site-checks", str(EXAMPLE), *SITE_K, env=SIM_SITE)
    assert r.failed == {"test_sshd_max_startups[node2]"}, r.describe()
    assert {f"{t}[{n}]" for t in ("test_mount", "test_package_version", "test_sshd_max_startups")
            for n in ("node1", "node2", "node3")} - r.passed == {"test_sshd_max_startups[node2]"}
    assert r.properties["test_sshd_max_startups[node2]"]["node"] == "node2"
    assert "MaxStartups 10:30:100" in r.message("test_sshd_max_startups[node2]")
    lines = r.output.splitlines()
    top = lines.index("Site checks (testinfra; . ok, X failed, s skipped):")
    assert "  test_sshd_max_startups: node1 .  node2 X  node3 ." in lines[top:top + 5]
    red = next(ln for ln in lines[top:] if ln.startswith("  test_sshd_max_startups[node2]: "))
    assert "MaxStartups 10:30:100" in red
    # -k node2 selects the node's site checks with the rest of its checks
    one = run_suite(healthy_sim, "--site-checks", str(EXAMPLE), "-k", "node2 and max_startups",
                    env=SIM_SITE)
    assert set(one.outcomes) == {"test_sshd_max_startups[node2]"}, one.describe()


def test_testinfra_host_keeps_strict_host_keys_and_deadlines(healthy_sim, tmp_path):
    healthy_sim.remove_known_host("launcher", "node3")  # testinfra's own backend would accept it
    hang = tmp_path / "test_hang_site.py"
    hang.write_text("def test_hangs(cluster_host):\n"
                    "    assert cluster_host.run('sleep 60').rc == 0\n")
    r = run_suite(healthy_sim, "--site-checks", f"{EXAMPLE},{hang}", "--timeout-command", "3",
                  "-k", "test_mount or test_hangs", env=SIM_SITE)
    assert "test_mount[node3]" in r.failed, r.describe()  # an error: the fixture refused it
    assert "unreachable (host key unknown): see test_login[node3]" in r.message("test_mount[node3]")
    assert r.outcomes["test_mount[node1]"] == "passed"
    msg = r.message("test_hangs[node1]")
    assert "`sleep 60` did not finish within 3 s" in msg, r.describe()
