"""Typed facts at the node boundary (judge/common/facts.py): a probe's JSON is read once into
values, from what the node scripts really print; the port statuses are node/netprobe.py's own
words."""

from __future__ import annotations

import ast
import errno
import json
import socket
import subprocess
import sys
import threading
from typing import Any

import pytest
from paths import PACKAGE

from cluster_tests import node
from cluster_tests.judge.common import facts
from cluster_tests.judge.network.portjudge import PortMatrix
from cluster_tests.judge.ssh import sshfail

PRELUDE = PACKAGE / "node" / "prelude.py"


def _run_on_node(argv: list[str]) -> dict:
    """node/prelude.py's run_command, run for real in a fresh interpreter as on a node; its JSON."""
    code = (f"exec(open({str(PRELUDE)!r}).read())\nimport json, sys\n"
            f"print(json.dumps(run_command({argv!r}, 10, 4000, 4000)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def test_command_reads_what_run_command_prints() -> None:
    ok = facts.Command.from_json(_run_on_node(["sh", "-c", "echo out; echo err >&2"]))
    assert ok.ok and (ok.rc, ok.out, ok.err) == (0, "out\n", "err\n")
    assert ok.seconds is not None and ok.seconds >= 0
    missing = facts.Command.from_json(_run_on_node(["/nonexistent/tool"]))
    assert not missing.ok and missing.rc == 127 and "command not found" in missing.err


def test_ssh_leg_names_the_cause_from_openssh_own_words() -> None:
    """A real OpenSSH client failing to resolve its target, as S4's probe runs it."""
    raw = _run_on_node(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2",
                        "-T", "ct-no-such-host.invalid", "true"])
    legs = facts.ssh_legs({"ct-no-such-host.invalid": raw})
    leg = legs["ct-no-such-host.invalid"]
    assert not leg.ok and leg.cause is sshfail.Cause.DNS
    assert "Could not resolve hostname" in leg.evidence
    fine = facts.ssh_legs({"b": {"rc": 0, "out": "", "err": ""}})["b"]
    assert fine.ok and fine.cause is None and fine.evidence == "exit 0"


# -- the port matrix: node/netprobe.py `connect`, run for real against this machine's sockets ---


def _netprobe() -> dict:
    """node/netprobe.py as sent (with its parts), its functions defined, its main not run."""
    ns: dict = {"__name__": "ct_netprobe"}
    exec(compile(node.source("netprobe.py"), "netprobe.py", "exec"), ns)  # noqa: S102
    return ns


def _greeter(sock: socket.socket, greeting: bytes) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            conn.sendall(greeting + b"\n")


def test_port_statuses_are_netprobes_own_words() -> None:
    """Every way netprobe.py's `connect` ends an attempt, produced by its own code (ours, a
    stranger's listener, a closed port, a master address that does not resolve; the errors it
    classifies), reads as a PortStatus of those very words, and every PortStatus is one of them."""
    probe = _netprobe()
    ours, stranger, closed = (socket.socket() for _ in range(3))
    for s in (ours, stranger, closed):
        s.bind(("127.0.0.1", 0))
    ours.listen(16)
    stranger.listen(16)
    port = {name: s.getsockname()[1] for name, s in
            (("ours", ours), ("stranger", stranger), ("closed", closed))}
    closed.close()
    threading.Thread(target=_greeter, args=(ours, probe["GREETING"] + b"tok"), daemon=True).start()
    try:
        raw = probe["section_connect"]({
            "token": "tok", "port_timeout": 1, "samples": 1,
            "targets": [{"name": "localhost", "ports": list(port.values()),
                         "master_port": port["ours"], "master_host": "ct-no-such.invalid"}]})
    finally:
        ours.close()
        stranger.close()
    reach = facts.reach_row(json.loads(json.dumps(raw)))["localhost"]
    got = {t.port: t.status for t in reach.ports}
    assert got == {port["ours"]: facts.PortStatus.OK,
                   port["stranger"]: facts.PortStatus.OTHER_LISTENER,
                   port["closed"]: facts.PortStatus.REFUSED}
    assert reach.master is not None and reach.master.status is facts.PortStatus.UNRESOLVED
    assert [t.port for t in reach.failed] == sorted([port["stranger"], port["closed"]])
    assert reach.rtt_ms and not reach.blocked
    classified = {probe["_classify"](exc) for exc in (
        TimeoutError(), OSError(errno.ETIMEDOUT, "t"), OSError(errno.EHOSTUNREACH, "h"),
        OSError(errno.ENETUNREACH, "n"), OSError(errno.ECONNREFUSED, "r"),
        OSError(errno.EACCES, "Permission denied"))}
    words = {t.words for t in (*reach.ports, reach.master)} | classified
    assert "error: [Errno 13] Permission denied" in words
    assert {facts.PortStatus.of(w) for w in words} == set(facts.PortStatus)
    # and no other word in its source: what _classify returns, every "status" it writes
    assert _status_words(PACKAGE / "node" / "netprobe.py") == {s.value for s in facts.PortStatus}


def test_compact_connect_keeps_every_failure_whole() -> None:
    """--pairs matrix asks netprobe's `connect` for its compact form: the targets whose every
    port answered come back as two strings (addresses, median RTTs) in the order asked, held
    by the launcher as flat arrays, and read as the same Reach (ports OK, not failed, an RTT);
    a target with a closed port comes back whole in `*detail`."""
    probe = _netprobe()
    ours, closed = socket.socket(), socket.socket()
    for s in (ours, closed):
        s.bind(("127.0.0.1", 0))
    ours.listen(16)
    good, shut = ours.getsockname()[1], closed.getsockname()[1]
    closed.close()
    threading.Thread(target=_greeter, args=(ours, probe["GREETING"] + b"tok"), daemon=True).start()
    targets: list[dict[str, Any]] = [{"name": "localhost", "ports": [good]},
                                     {"name": "127.0.0.1", "ports": [good, shut]}]
    try:
        raw = probe["section_connect"]({"token": "tok", "port_timeout": 1, "samples": 3,
                                        "compact": True, "targets": targets})
    finally:
        ours.close()
    raw = json.loads(json.dumps(raw))
    assert set(raw) == {"*detail", "*compact"}
    assert raw["*compact"]["addr"].split() == ["127.0.0.1", "-"]
    rtt, gap = raw["*compact"]["rtt_ms"].split()
    assert float(rtt) > 0 and gap == "-"
    assert list(raw["*detail"]) == ["127.0.0.1"] and "ports" in raw["*detail"]["127.0.0.1"]

    m = PortMatrix(token="tok", listeners={t["name"]: {"ports": t["ports"]} for t in targets})
    names: list[str] = [t["name"] for t in targets]
    m.add_compact("me", names, {n: i for i, n in enumerate(names)}, raw["*compact"])
    m.results["me"] = raw["*detail"]
    m.reached["me"] = facts.reach_row(raw["*detail"])
    fine, half = m.reach("me", "localhost"), m.reach("me", "127.0.0.1")
    assert fine is not None and half is not None
    assert fine.addr == "127.0.0.1" and [t.port for t in fine.ports] == [good]
    assert all(t.ok for t in fine.ports) and not fine.failed and not fine.blocked
    assert fine.rtt_ms == (m.compact_of("me", "localhost") or ("", 0.0))[1:]
    assert abs(fine.rtt_ms[0] - float(rtt)) < 1e-3 and fine.master is None and fine.ssh is None
    assert [(t.port, t.status) for t in half.failed] == [(shut, facts.PortStatus.REFUSED)]
    assert m.compact_of("me", "127.0.0.1") is None and m.entry("me", "nobody") is None
    assert m.compact_rtt_counts() == {fine.rtt_ms[0]: 1}  # localhost's; 127.0.0.1 not compact
    # a compact answer that does not match the targets asked is refused, not misread
    with pytest.raises(ValueError):
        m.add_compact("me", names, {}, {"addr": "127.0.0.1", "rtt_ms": "0.1"})


def test_compact_needs_own_address_to_answer_too() -> None:
    """A target whose high ports answered but whose own gloo address (F7) did not is not
    compact: it comes back whole, with that failure."""
    probe = _netprobe()
    entry = {"addr": "10.0.0.2", "resolve_error": None, "master": None, "ssh": None,
             "ports": {"40000": {"status": "ok", "ms": 0.1, "port": 40000}}, "rtt_ms": [0.2, 0.1],
             "own": {"status": "timed out", "ms": 1000.0, "port": 41000, "addr": "10.9.0.2"}}
    ok = dict(entry, own={"status": "ok", "ms": 0.1, "port": 41000, "addr": "10.0.0.2"})
    got = probe["_compact"]([{"name": "a"}, {"name": "b"}], {"a": entry, "b": ok})
    assert got["*compact"] == {"addr": "- 10.0.0.2", "rtt_ms": "- 0.2000"}
    assert got["*detail"] == {"a": entry}


def _status_words(path) -> set[str]:
    """The status words a node script can write: the string constants _classify returns and
    those put as a "status" (a "... %s" format counts by its word before the colon)."""
    exprs: list[ast.expr] = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if isinstance(fn, ast.FunctionDef) and fn.name == "_classify":
            exprs += [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value]
        if isinstance(fn, ast.Dict):
            exprs += [v for k, v in zip(fn.keys, fn.values, strict=True)
                      if isinstance(k, ast.Constant) and k.value == "status"]
    out = set()
    for e in exprs:
        for c in ast.walk(e):
            if isinstance(c, ast.Constant) and isinstance(c.value, str):
                out.add(c.value.split(":")[0])
    return out


def test_f3_red_from_what_netprobe_reached() -> None:
    """F3's red (judge.network.high_ports_problem), from a Reach as netprobe.py reports it: the
    failed ports grouped by the node's words, every source failing into b, b's rules, the fix."""
    from cluster_tests.judge.network import portjudge as nc

    reach = facts.Reach.from_json("n3", {
        "addr": "10.0.0.3", "resolve_error": None, "master": None, "rtt_ms": [], "ssh": None,
        "ports": {"40001": {"status": "timed out", "ms": 3000.1, "port": 40001},
                  "40002": {"status": "timed out", "ms": 3000.2, "port": 40002},
                  "40003": {"status": "ok", "ms": 0.2, "port": 40003}}})
    p = nc.high_ports_problem(reach, "n1", timeout=3.0, into_b=["n1", "n2"], source_fault=False,
                              rules=["iptables: -A INPUT -p tcp -j DROP"], source_addr="10.0.0.1")
    assert p.nodes == ("n1", "n3") and p.text() == p.message
    assert p.message.splitlines() == [
        "n1 -> n3 (10.0.0.3): n3 drops new TCP connections on high ports from n1; NCCL/gloo/"
        "HCCL open such ports, and the launch would hang at initialization.",
        "  port 40001, 40002: timed out: no answer within 3 s: packets are dropped (a DROP rule "
        "in n3's INPUT chain, or a security group / firewall in between)",
        "  every node that tried fails into n3 (n1, n2): n3's INPUT is the filter",
        "  DROP/REJECT rules in n3's INPUT:",
        "    iptables: -A INPUT -p tcp -j DROP",
        "  fix, on n3: iptables -I INPUT -p tcp -s 10.0.0.1 -j ACCEPT (or open 1024-65535/tcp "
        "between the cluster's nodes in the firewall in between)"]
    assert p.fix.startswith("on n3: iptables -I INPUT -p tcp -s 10.0.0.1")
    mine = nc.high_ports_problem(reach, "n1", timeout=3.0, into_b=["n1"], source_fault=True,
                                 rules=None, source_addr="10.0.0.1")
    assert mine.message.startswith("n1 -> n3 (10.0.0.3): no answer from n3's high ports "
                                   "40001, 40002; n1 reaches none of the nodes' ports")
    assert "could not read n1's firewall rules" in mine.message
