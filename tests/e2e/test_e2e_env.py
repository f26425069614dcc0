"""E checks end to end on the simulated cluster: the environment pdsh's shell really gets."""

from __future__ import annotations

from suite import run_suite

EARLY_RETURN = "case $- in\n    *i*) ;;\n      *) return;;\nesac\n"


def test_healthy_env_is_green(healthy_sim, healthy_fast_run):
    """Cost: one run of E3 alone (a few CPU s); the green of every E check is read from the
    shared healthy fast-checklist run (conftest.py), which holds them."""
    result = healthy_fast_run
    assert result.returncode == 0, result.describe()
    assert "test_versions[node2]" in result.passed
    assert result.properties["test_versions[node2]"]["torch"].startswith("2.")
    assert "not an Ascend node" in result.message("test_ascend_env[node1]")
    # E3 alone (-k): its versions come from the rehearsal's one import per node all the same
    alone = run_suite(healthy_sim, "-m", "env", "-k", "test_versions")
    assert alone.passed == {f"test_versions[{nd.name}]" for nd in healthy_sim.nodes}, \
        alone.describe()
    assert alone.properties["test_versions[node2]"] == result.properties["test_versions[node2]"]


def test_bashrc_early_return_hides_required_variable(healthy_sim):
    for nd in healthy_sim.nodes:
        healthy_sim.append_bashrc(nd.name, "export CT_DATA_ROOT=/data\n")
    healthy_sim.prepend_bashrc("node3", EARLY_RETURN)
    result = run_suite(healthy_sim, "-m", "env", "--required-env", "CT_DATA_ROOT")
    # the stock early return hides the venv's PATH too (no deepspeed there), but the launch runs
    # its own interpreter by absolute path, and E3 judges that one: only the variable is red
    assert result.failed == {"test_required_env[node3]"}, result.describe()
    msg = result.message("test_required_env[node3]")
    assert "not set: CT_DATA_ROOT" in msg and "`deepspeed` is not on PATH" in msg
    assert "below the early return for non-interactive shells on line 3" in msg
    assert "move the exports above line 3" in msg
    assert result.properties["test_versions[node3]"]["torch"].startswith("2.")


def test_deepspeed_env_lint_and_differences_masked(healthy_sim):
    healthy_sim.set_env_file("node1", ".deepspeed_env",
                             "NCCL_DEBUG=INFO\nHF_TOKEN=hf_secret123\n\nNCCL_IB_DISABLE\n")
    for nd in healthy_sim.nodes:
        value = "eth" if nd.name != "node2" else "ens"
        healthy_sim.append_bashrc(nd.name,
                                  f"export GLOO_SOCKET_IFNAME={value}\nexport "
                                  f"NCCL_API_KEY=k{nd.name}\n")
    result = run_suite(healthy_sim, "-m", "env")
    # .deepspeed_env is read on node1 only (it is exported to every rank from there), so it
    # differs from nothing; the variables set by each node's own shell do differ (on the CPU
    # accelerator deepspeed forwards no NCCL_*), and node1's file stops the launch: E2's red,
    # the rehearsal (E5) on every node blocked by it (one cause, one red)
    assert result.failed == {"test_deepspeed_env[node1]", "test_env_agrees[node2]",
                             "test_env_agrees[node3]"}, result.describe()
    for n in ("node1", "node2", "node3"):
        assert result.properties[f"test_launch_rehearsal[{n}]"]["blocked_by"] == \
            "test_deepspeed_env[node1]", result.describe()
    lint = result.message("test_deepspeed_env[node1]")
    assert ".deepspeed_env:3: an empty line" in lint and (".deepspeed_env:4: 'NCCL_IB_DISABLE' has "
                                                          "no '='") in lint
    agree = result.message("test_env_agrees[node2]")
    assert "GLOO_SOCKET_IFNAME" in agree and "ens" in agree and "eth" in agree
    assert "NCCL_API_KEY" in agree and "****" in agree
    assert "test_env_agrees[node1]" in result.passed
    everything = result.output + "".join(result.messages.values())
    assert "hf_secret123" not in everything and "knode2" not in everything


def test_tmpdir_red_only_where_the_tools_really_fail(healthy_sim):
    """E6: TMPDIR naming no directory (node2) is a warning, because the tools fall back, which
    is measured here; a temporary directory with 64 MiB free (node3) is red."""
    healthy_sim.append_bashrc("node2", "export TMPDIR=/nonexistent/ct-tmp\n")
    gcc = healthy_sim.ssh("node2", "echo 'int main(void){return 0;}' | gcc -x c - -o /dev/null")
    assert gcc.returncode == 0, gcc.stderr  # gcc (DeepSpeed's op builds) falls back to /tmp
    py = healthy_sim.ssh("node2", "python3 -c 'import tempfile; print(tempfile.gettempdir())'")
    assert py.stdout.strip() == "/tmp"
    healthy_sim.resize_shm("node3", "64m")
    healthy_sim.append_bashrc("node3", "export TMPDIR=/dev/shm\n")
    fill = healthy_sim.ssh("node3", "python3 -c 'import tempfile; f = tempfile.TemporaryFile(); "
                                    "f.write(bytes(100 << 20)); f.flush()'")
    assert fill.returncode != 0 and "No space left on device" in fill.stderr, fill.stderr
    result = run_suite(healthy_sim, "-k", "test_tmpdir")
    assert result.failed == {"test_tmpdir[node3]"}, result.describe()
    assert {"test_tmpdir[node1]", "test_tmpdir[node2]"} <= result.passed
    assert "node2: TMPDIR=/nonexistent/ct-tmp (from ~/.bashrc line" in result.output
    assert "does not exist: Python, gcc and bash fall back to /tmp" in result.output
    msg = result.message("test_tmpdir[node3]")
    assert "node3: /dev/shm, the temporary directory here, has" in msg
    assert "MiB free, below 1024 MiB" in msg
    assert result.properties["test_tmpdir[node1]"]["tmpdir"].startswith("/tmp (")


def test_tmpdir_exported_by_the_launch_is_judged_on_every_node(healthy_sim):
    """E6: .deepspeed_env on the rank-0 node exports TMPDIR to every rank; node2's /dev/shm is
    small, so there the launch's TMPDIR is red, elsewhere green."""
    healthy_sim.set_env_file("node1", ".deepspeed_env", "TMPDIR=/dev/shm\n")
    healthy_sim.resize_shm("node2", "64m")
    result = run_suite(healthy_sim, "-k", "test_tmpdir")
    assert result.failed == {"test_tmpdir[node2]"}, result.describe()
    assert ("node2: /dev/shm, the temporary directory here, has"
            in result.message("test_tmpdir[node2]"))
    assert result.properties["test_tmpdir[node3]"]["tmpdir"].startswith("/dev/shm (")
