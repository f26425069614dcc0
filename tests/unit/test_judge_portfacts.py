"""judge/network/portfacts.py: node/netprobe.py's sections (`listen`, `connect`, `stop`,
`firewall`) run for real on this machine's sockets and read once into frozen values, as the
launcher reads them; the port statuses are netprobe.py's own words; a malformed answer is a
FactsError, never a misread."""

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
from cluster_tests.judge.common.probes import FactsError
from cluster_tests.judge.network.portfacts import (
    Compact,
    Connected,
    FirewallDump,
    Listening,
    PortStatus,
    Stopped,
)
from cluster_tests.judge.network.portjudge import PortMatrix


def _netprobe() -> dict:
    """node/netprobe.py as sent (with its parts), its functions defined, its main not run."""
    ns: dict = {"__name__": "ct_netprobe"}
    exec(compile(node.source("netprobe.py"), "netprobe.py", "exec"), ns)  # noqa: S102
    return ns


def _on_node(section: str, params: dict[str, Any]) -> Any:
    """One netprobe.py section run in a fresh interpreter, as on a node (`listen` forks its
    listener there, not in pytest's process); its JSON."""
    code = (f"import json\nns = {{'__name__': 'ct_netprobe'}}\n"
            f"exec(compile({node.source('netprobe.py')!r}, 'netprobe.py', 'exec'), ns)\n"
            f"print(json.dumps(ns['section_{section}'](json.loads({json.dumps(params)!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return json.loads(out.strip().splitlines()[-1])


def _greeter(sock: socket.socket, greeting: bytes) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            conn.sendall(greeting + b"\n")


def test_listen_connect_stop_read_as_netprobe_prints_them() -> None:
    """A real round: listeners held by netprobe's detached child (with this machine's own
    address as gloo takes it), a connect to them with the session's token, then stop."""
    listen = Listening.read(_on_node("listen", {"token": "tok", "ports": 2, "hold": 30,
                                                "own_address": True}))
    try:
        assert listen.pid > 0 and len(listen.ports) == 2 and listen.hold == 30.0
        assert listen.master is None and listen.own is not None
        assert listen.own.hostname == socket.gethostname() and listen.own.how in (
            "hostname", "loopback fallback")
        assert listen.own.usable and listen.own.addr is not None
        got = Connected.read(_on_node("connect", {
            "token": "tok", "port_timeout": 2, "samples": 2,
            "targets": [{"name": "localhost", "ports": list(listen.ports),
                         "own": {"addr": listen.own.addr, "port": listen.own.port}}]}))
        assert got.compact is None
        reach = got.reached["localhost"]
        assert [t.port for t in reach.ports] == sorted(listen.ports)
        assert all(t.ok for t in reach.ports) and not reach.failed and not reach.timed_out
        assert reach.own is not None and reach.own.ok and len(reach.rtt_ms) == 2
    finally:
        stop = Stopped.read(_on_node("stop", {"token": "tok", "pid": listen.pid}))
    assert stop.was_running and stop.gone
    again = Stopped.read(_on_node("stop", {"token": "tok", "pid": listen.pid}))
    assert not again.was_running and again.gone


def test_firewall_dump_reads_what_the_tools_said() -> None:
    dump = FirewallDump.read(_on_node("firewall", {}))
    assert dump.uid is not None
    for name, cmd in dump.tools:  # as installed here: run, maybe refused without root
        assert name in ("iptables", "nft") and (cmd.ok or cmd.rc != 0)


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
    reach = Connected.read(json.loads(json.dumps(raw))).reached["localhost"]
    got = {t.port: t.status for t in reach.ports}
    assert got == {port["ours"]: PortStatus.OK,
                   port["stranger"]: PortStatus.OTHER_LISTENER,
                   port["closed"]: PortStatus.REFUSED}
    assert reach.master is not None and reach.master.status is PortStatus.UNRESOLVED
    assert [t.port for t in reach.failed] == sorted([port["stranger"], port["closed"]])
    assert reach.rtt_ms and not reach.blocked
    classified = {probe["_classify"](exc) for exc in (
        TimeoutError(), OSError(errno.ETIMEDOUT, "t"), OSError(errno.EHOSTUNREACH, "h"),
        OSError(errno.ENETUNREACH, "n"), OSError(errno.ECONNREFUSED, "r"),
        OSError(errno.EACCES, "Permission denied"))}
    words = {t.words for t in (*reach.ports, reach.master)} | classified
    assert "error: [Errno 13] Permission denied" in words
    assert {PortStatus.of(w) for w in words} == set(PortStatus)
    # and no other word in its source: what _classify returns, every "status" it writes
    assert _status_words(PACKAGE / "node" / "netprobe.py") == {s.value for s in PortStatus}
    with pytest.raises(ValueError):
        PortStatus.of("maybe")


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

    got = Connected.read(raw)
    assert got.compact is not None and list(got.reached) == ["127.0.0.1"]
    m = PortMatrix(token="tok", listeners={
        t["name"]: Listening.read({"pid": 1, "ports": t["ports"]}) for t in targets})
    names: list[str] = [t["name"] for t in targets]
    m.add_compact("me", names, {n: i for i, n in enumerate(names)}, got.compact)
    m.results["me"] = dict(got.reached)
    fine, half = m.reach("me", "localhost"), m.reach("me", "127.0.0.1")
    assert fine is not None and half is not None
    assert fine.addr == "127.0.0.1" and [t.port for t in fine.ports] == [good]
    assert all(t.ok for t in fine.ports) and not fine.failed and not fine.blocked
    assert fine.rtt_ms == (m.compact_of("me", "localhost") or ("", 0.0))[1:]
    assert abs(fine.rtt_ms[0] - float(rtt)) < 1e-3 and fine.master is None and fine.ssh is None
    assert [(t.port, t.status) for t in half.failed] == [(shut, PortStatus.REFUSED)]
    assert m.compact_of("me", "127.0.0.1") is None and m.reach("me", "nobody") is None
    assert m.compact_rtt_counts() == {fine.rtt_ms[0]: 1}  # localhost's; 127.0.0.1 not compact
    # a compact answer that does not match the targets asked is refused, not misread
    with pytest.raises(ValueError):
        m.add_compact("me", names, {}, Compact.read({"addr": "127.0.0.1", "rtt_ms": "0.1"}))
    with pytest.raises(FactsError):
        Compact.read({"addr": "127.0.0.1 -", "rtt_ms": "0.1"})


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
    read = Connected.read(got)
    a = read.reached["a"]
    assert a.own is not None and a.own.status is PortStatus.TIMED_OUT and a.timed_out
    assert a.own.addr == "10.9.0.2" and not a.failed and not a.elsewhere_ok


def test_a_malformed_answer_is_refused() -> None:
    bad: object
    for bad in ([], {"t": {"ports": {"1": {"ms": 1}}}}, {"t": "x"}):
        with pytest.raises((FactsError, ValueError)):
            Connected.read(bad)
    with pytest.raises(FactsError):
        Listening.read("listening")
    # a listen answer without a pid holds no listener to stop (measure/ports.py skips it)
    assert Listening.read({"ports": [1]}).pid == 0


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
