"""judge/hostfile/masteraddr.py: the --master_addr DeepSpeed derives from `ssh <first host> hostname
-I`, and why it cannot be the rendezvous address."""

from __future__ import annotations

import subprocess

from cluster_tests.judge.hostfile import masteraddr as ma
from cluster_tests.judge.hostfile.hostmodel import HostfileCause
from cluster_tests.judge.problem import Problem

RANK0 = {"10.0.0.1": "eth0", "172.17.0.1": "docker0", "10.99.0.1": "eth0", "127.0.0.1": "lo"}


def texts(problems: list[Problem]) -> list[str]:
    """Each red as it reads (its message, then its fix)."""
    assert all(p.item == "H3" and p.nodes == ("node1",) for p in problems), problems
    return [p.text() for p in problems]


def _derived(stdout, rc=0, stderr="", noise_at=None):
    d = ma.derive("node1", "node1", "ssh node1 hostname -I", stdout, stderr, rc)
    d.printed_at = noise_at
    return d


def test_the_command_is_deepspeeds_own() -> None:
    assert ma.hostname_i_argv("node1") == ["ssh", "node1", "hostname", "-I"]
    assert ma.hostname_i_argv("node1", 2222) == ["ssh", "-p", "2222", "node1", "hostname", "-I"]


def test_marked_command_runs_in_a_shell_and_reads_back() -> None:
    # the marked command itself, run by sh with `ssh` replaced by a printer: noise before the
    # markers (the outer shell's startup) and the inner command's stdout between them
    cmd = ma.marked_command(["printf", "%s\\n", "hello", "10.0.0.1 "], 5).replace(
        "printf -o BatchMode=yes -o ConnectTimeout=5", "printf")
    out = subprocess.run(["sh", "-c", "echo outer noise; " + cmd], capture_output=True, text=True,
                         check=True).stdout
    body, rc = ma.read_marked(out)
    assert rc == 0 and body == "hello\n10.0.0.1 \n"
    assert ma.read_marked("no markers") == (None, None)
    assert ma.read_marked(f"{ma.BEGIN}\n\n{ma.END} 127\n") == ("", 127)


def test_first_word_of_stdout_as_the_runner_takes_it() -> None:
    d = _derived("10.0.0.1 172.17.0.1 \n")
    assert d.value == "10.0.0.1" and d.noise == []
    assert ma.problems(d, RANK0, {"node2": ma.Route(True, "10.0.0.1 dev eth0 src 10.0.0.2")}) == []
    d = _derived("Welcome to node1\n10.0.0.1 \n", noise_at=("/root/.bashrc", 8))
    assert d.value == "Welcome" and d.noise == ["Welcome to node1"]
    (msg,) = texts(ma.problems(d, RANK0, {}))
    assert "DeepSpeed will use 'Welcome' as --master_addr" in msg
    assert "prints 'Welcome to node1' before `hostname -I` (/root/.bashrc:8 prints it)" in msg
    assert "fix: on node1: remove that output from /root/.bashrc line 8" in msg
    assert "or pass --master_addr node1" in msg


def test_hostname_failing_or_unsupported_or_silent_stops_the_launch() -> None:
    (msg,) = texts(ma.problems(_derived("", rc=1, stderr="hostname: invalid option -- 'I'\n"),
                               RANK0, {}))
    assert "this `hostname` has no -I option" in msg and "fix: pass --master_addr node1" in msg
    (msg,) = texts(ma.problems(_derived("", rc=255,
                                        stderr="ssh: connect to host node1: refused\n"),
                               RANK0, {}))
    assert "it exited 255" in msg
    (msg,) = texts(ma.problems(_derived("\n"), RANK0, {}))
    assert "prints nothing on stdout" in msg
    (msg,) = texts(ma.problems(_derived(None, rc=None, stderr="session lost"), RANK0, {}))
    assert "did not run on node1 (session lost)" in msg


def test_a_refused_option_is_found_above_the_help_line() -> None:
    """GNU tools print the refused option first and "Try '... --help'" last (coreutils' uname
    here, captured on this machine: `uname -n -I`)."""
    said = "uname: invalid option -- 'I'\nTry 'uname --help' for more information.\n"
    (msg,) = texts(ma.problems(_derived("", rc=1, stderr=said), RANK0, {}))
    assert "(this `hostname` has no -I option: uname: invalid option -- 'I')" in msg, msg


def test_addresses_the_peers_cannot_use() -> None:
    (msg,) = texts(ma.problems(_derived("172.17.0.1 10.0.0.1\n"), RANK0, {}))
    assert "172.17.0.1, an address of docker0 on node1" in msg
    (msg,) = texts(ma.problems(_derived("192.168.5.5\n"), RANK0, {}))
    assert "not an address of node1" in msg
    routes = {"node2": ma.read_route(2, "", "RTNETLINK answers: Network is unreachable\n"),
              "node3": ma.read_route(0, "10.99.0.1 via 10.0.0.254 dev eth0 src 10.0.0.3\n", "")}
    (msg,) = texts(ma.problems(_derived("10.99.0.1 10.0.0.1\n"), RANK0, routes))
    assert "node2 has no route to it (RTNETLINK answers: Network is unreachable)" in msg
    assert "node3" not in msg
    local = {"node2": ma.read_route(0, "local 10.99.0.1 dev lo table local src 10.99.0.1\n", "")}
    (msg,) = texts(ma.problems(_derived("10.99.0.1\n"), RANK0, local))
    assert "node2 has that address too" in msg


def test_given_values() -> None:
    assert ma.problems(ma.given("node1", "node1", "node1"), RANK0, {}) == []
    assert ma.problems(ma.given("node1", "node1", "10.0.0.1"), RANK0, {}) == []
    (msg,) = texts(ma.problems(ma.given("node1", "node1", "node2"), RANK0, {}))
    assert "--master_addr node2 is not the first host" in msg


def test_the_trace_names_the_line_that_printed(tmp_path) -> None:
    rc = tmp_path / "rc"
    rc.write_text("export A=1\nif true; then\n  echo 'Welcome to node1'\nfi\nexport B=2\n")
    cmd = ma.trace_command((str(rc),))
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True).stdout
    body, _ = ma.read_marked(out)
    assert ma.printed_by(body or "", "Welcome to node1") == (str(rc), 3)
    assert ma.printed_by(body or "", "something else") is None


def test_ssh_check_is_deepspeeds_own_command() -> None:
    """runner.py: "ssh -o PasswordAuthentication=no " + (f"-p {ssh_port} ") + f"{first_host}
    hostname", split with shlex, run whether --master_addr is given or not."""
    assert ma.ssh_check_argv("node1") == ["ssh", "-o", "PasswordAuthentication=no", "node1",
                                          "hostname"]
    assert ma.ssh_check_argv("node1", 2222) == ["ssh", "-o", "PasswordAuthentication=no", "-p",
                                                "2222", "node1", "hostname"]


def test_ssh_check_failing_stops_the_launch_whatever_master_addr_says() -> None:
    ok = ma.SshCheck("node1", "node1", "ssh -o PasswordAuthentication=no node1 hostname", 0, "")
    assert ma.ssh_check_problem(ok) is None
    assert ma.ssh_check_problem(ma.SshCheck("node1", "node1", "x", None, "no session")) is None
    missing = ma.SshCheck("node1", "node1", "ssh -o PasswordAuthentication=no node1 hostname",
                          127, "bash: line 1: hostname: command not found\n")
    p = ma.ssh_check_problem(missing, "/etc/hosts.ds")
    assert p is not None and p.cause is HostfileCause.SSH_CHECK_FAILS and p.nodes == ("node1",)
    assert p.item == "H3"
    assert p.message.startswith("node1: deepspeed stops before starting any rank: its check `ssh "
                                "-o PasswordAuthentication=no node1 hostname` on node1 fails, "
                                "and it raises 'Using hostfile at /etc/hosts.ds but host=node1 "
                                "was not reachable via ssh', with or without --master_addr"), p
    assert "`hostname` there fails in a non-interactive shell (exit 127: bash: line 1: " \
           "hostname: command not found)" in p.message
    assert p.fix.startswith("on node1: install hostname")
    assert "launch with --no_ssh_check" in p.fix and "pass --master_addr" not in p.text()
    refused = ma.SshCheck("node1", "node2", "ssh -o PasswordAuthentication=no node2 hostname",
                          255, "node2: Permission denied (publickey).")
    p = ma.ssh_check_problem(refused)
    assert p is not None and "(ssh: node2: Permission denied (publickey).)" in p.message
    assert p.fix == "passwordless ssh from node1 to node2 (see test_ssh_trust[node1->node2])"
    assert p.text().endswith("\n  fix: " + p.fix)


def test_a_first_host_only_ssh_knows_is_no_master_addr_to_suggest() -> None:
    """The fixes pass --master_addr the first host's name where the nodes resolve it; where
    that name is an ssh alias (every rank resolves --master_addr with its resolver, not ssh),
    the address measure/masteraddr suggests instead."""
    d = _derived("Welcome to gpu-a\n10.0.0.1 \n")
    d.first_host = "gpu-a"
    assert "or pass --master_addr gpu-a" in ma.problems(d, RANK0, {})[0].fix
    d.suggest = "10.0.0.1"
    (msg,) = texts(ma.problems(d, RANK0, {}))
    assert "or pass --master_addr 10.0.0.1" in msg and "--master_addr gpu-a" not in msg


def test_each_reason_is_its_cause_and_judge_makes_one_red_of_several() -> None:
    """An address two peers cannot use for two reasons (one has no route, one owns it too): two
    Problems, one red on rank 0 naming both, each fix once."""
    assert ma.problems(_derived("Welcome\n"), RANK0, {})[0].cause is \
        HostfileCause.MASTER_ADDR_PRINTED
    assert ma.problems(_derived(""), RANK0, {})[0].cause is HostfileCause.MASTER_ADDR_NOT_DERIVED
    assert ma.problems(_derived("192.168.5.5\n"), RANK0, {})[0].cause is \
        HostfileCause.MASTER_ADDR_NOT_RANK0
    assert ma.problems(_derived("127.0.0.1\n"), RANK0, {})[0].cause is \
        HostfileCause.MASTER_ADDR_UNREACHABLE
    routes = {"node2": ma.read_route(2, "", "RTNETLINK answers: Network is unreachable\n"),
              "node3": ma.read_route(0, "local 10.99.0.1 dev lo table local src 10.99.0.1\n",
                                     "")}
    d = _derived("10.99.0.1\n")
    both = ma.problems(d, RANK0, routes)
    assert [p.cause for p in both] == [HostfileCause.MASTER_ADDR_UNREACHABLE,
                                       HostfileCause.MASTER_ADDR_SHARED]
    red = ma.judge(d, RANK0, routes)
    assert red is not None and red.nodes == ("node1",) and red.item == "H3"
    assert red.message == "\n".join(p.message for p in both)
    assert red.fix == "; ".join(p.fix for p in both)
    assert ma.judge(_derived("10.0.0.1\n"), RANK0, {}) is None
    assert ma.judge(d, RANK0, {"node3": routes["node3"]}) == ma.problems(
        d, RANK0, {"node3": routes["node3"]})[0]
