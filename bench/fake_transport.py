"""A fake transport for big-cluster benchmarks: a pytest plugin, loaded with `-p fake_transport`
(bench/ on PYTHONPATH), that gives the run's Cluster an in-process `Transport` (the protocol in
cluster_tests.core.transport) in place of the SSH Pool, answering every probe at once with
synthetic facts of a healthy cluster.

What is left to measure is what pytest and the suite cost by themselves: collection,
parametrization, fixtures, the memo, the thread pool, reports (terminal, JUnit, JSON summary)
per node and per pair, with no network and no remote Python.  Not for tests of the product: a
benchmark tool only (bench/collection.py drives it).

    PYTHONPATH=bench .venv/bin/pytest -p fake_transport --hostfile big.hostfile \\
        -m "not collective and not training" --pairs ring

The facts are those of a real simulated node (bench/fake_facts.json, recorded from
fixtures/sim/ with `python bench/fake_transport.py --record STATE_DIR`), with the node's name
and address substituted, and the N-sized parts (name resolution, ssh pairs, port matrix,
routes) generated for the targets each probe is asked about.  Node i has the address
10.(100 + i // 65536).(i // 256 % 256).(i % 256).

FAKE_DEAD=K (environment) makes every K-th node of the hostfile (node K, 2K, ...; 10: 10 % of
the nodes) dead the way a powered-off host is: its login times out, every peer's ssh, TCP
connect and pdsh leg to it time out (OpenSSH's and pdsh's own words).

FAKE_BLOCK=SRC>DST[,SRC>DST...] drops SRC's connections to DST's high ports (and its master
port) the way a firewall in between does: they time out, while DST's sshd answers SRC.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cluster_tests.core import cluster as cluster_mod
from cluster_tests.core.cluster import CLUSTER_KEY
from cluster_tests.core.transport import (
    CommandResult,
    ConnectError,
    Feed,
    NodeSession,
    SSHTarget,
    Streamed,
    Sweep,
    Transport,
    fan_out,
)
from cluster_tests.judge.hostfile import masteraddr as ma
from cluster_tests.judge.ssh.sshfail import Cause
from cluster_tests.node import netprobe

T = TypeVar("T")
R = TypeVar("R")

FACTS_PATH = Path(__file__).with_name("fake_facts.json")
PROBE_MARK = cluster_mod.PROBE_MARK
SCRIPTS = ("probe.py", "netprobe.py", "envprobe.py", "storeprobe.py", "healthprobe.py")

_facts: dict[str, Any] | None = None
_addresses: dict[str, str] = {}
_lock = threading.Lock()
STATS = {"commands": 0, "probes": 0}


def facts() -> dict[str, Any]:
    global _facts
    if _facts is None:
        repo = str(Path(__file__).resolve().parent.parent)
        _facts = json.loads(FACTS_PATH.read_text().replace("{REPO}", repo))
    return _facts


def address(name: str) -> str:
    """A stable fake address per node name (hostfile order when known)."""
    got = _addresses.get(name)
    if got is not None:
        return got
    with _lock:
        if name not in _addresses:
            i = len(_addresses) + 1
            _addresses[name] = f"10.{100 + i // 65536}.{i // 256 % 256}.{i % 256}"
        return _addresses[name]


DEAD_EVERY = int(os.environ.get("FAKE_DEAD", "0") or 0)
_dead: set[str] = set()


BLOCKED = frozenset(tuple(pair.split(">", 1)) for pair in
                   os.environ.get("FAKE_BLOCK", "").replace(" ", "").split(",") if ">" in pair)
#: pairs whose high ports and ssh time out on the first try only (a SYN lost once)
FLAKY = frozenset(tuple(pair.split(">", 1)) for pair in
                  os.environ.get("FAKE_FLAKY", "").replace(" ", "").split(",") if ">" in pair)


#: sources whose connect answers differ from their peers' (FAKE_BLOCK, FAKE_FLAKY)
_SPECIAL_SOURCES = frozenset(src for src, _ in BLOCKED | FLAKY)
_LOCK = threading.Lock()
#: (target list, samples, attempt) -> the compact connect answer of an ordinary source
_CONNECT_ANSWERS: dict[tuple[Any, ...], dict[str, Any]] = {}
#: a long parameter line (the port matrix's target list) and its decoded parameters, by the
#: line's length (hashing 475 KB for each node cost more than comparing it); the ids of their
#: target lists (kept alive here, so that an id names one list)
_PARAMS: dict[int, list[tuple[bytes, dict[str, Any]]]] = {}
_KEPT: set[int] = set()
#: id of a kept connect answer -> its JSON (the probe's output line)
_TEXT: dict[int, str] = {}


def _decoded(line: bytes) -> dict[str, Any]:
    """A probe's parameter line decoded; a long one (the port matrix's target list, the same for
    every node: 475 KB at 4096 nodes) once, as each node decodes its own copy."""
    if len(line) < 65536:
        return json.loads(line)
    with _LOCK:
        same = _PARAMS.setdefault(len(line), [])
        got = next((p for text, p in same if text == line), None)
    if got is None:
        got = json.loads(line)
        with _LOCK:
            if sum(map(len, _PARAMS.values())) < 8:
                same.append((line, got))
                _KEPT.add(id(got.get("targets")))
    return got


def dead(name: str) -> bool:
    return name in _dead


def mark_dead(names: Sequence[str]) -> None:
    if DEAD_EVERY > 0:
        _dead.update(n for i, n in enumerate(names, 1) if i % DEAD_EVERY == 0)


def _ssh_timeout(name: str) -> str:
    return f"ssh: connect to host {address(name)} port 22: Connection timed out"


def _template_identity() -> tuple[str, str]:
    base = facts()["probe.py/base"]
    return base["hostname"], base["resolve"][base["hostname"]]["addrs"][0]


def _substitute(obj: Any, node: str) -> Any:
    """The template with the recorded node's name and address replaced by node's."""
    name, addr = _template_identity()
    text = json.dumps(obj)
    text = re.sub(re.escape(addr) + r"(?![0-9])", address(node), text)
    text = re.sub(r"\b" + re.escape(name) + r"\b", node, text)
    return json.loads(text)


_SCRIPT_BY_BYTES: dict[bytes, str] = {}


def _script_name(stdin: bytes | None) -> str:
    global _SCRIPT_BY_BYTES
    if not _SCRIPT_BY_BYTES:
        with _lock:  # built whole, then published: probes run from many threads at once
            if not _SCRIPT_BY_BYTES:
                table = {}
                for name in SCRIPTS:
                    try:
                        table[cluster_mod.remote_script(name)] = name
                    except (OSError, FileNotFoundError):
                        pass
                _SCRIPT_BY_BYTES = table
    return _SCRIPT_BY_BYTES.get(stdin or b"", "?")


def answer(node: str, script: str, section: str, params: dict[str, Any]) -> Any:
    f = facts()
    if script == "probe.py" and section == "base":
        base = _substitute(f["probe.py/base"], node)
        names = list(params.get("names", [])) + [node]
        base["resolve"] = {n: {"addrs": [address(n)], "seconds": 0.0004, "error": None}
                           for n in names}
        return base
    if script == "probe.py" and section == "ssh_pairs":
        return {t: ({"rc": 255, "out": "", "err": _ssh_timeout(t)}
                    if dead(t) or ((node, t) in FLAKY and params.get("attempt") == 1) else
                    {"rc": 0, "out": "", "err": ""}) for t in params.get("targets", [])}
    if script == "probe.py" and section == "routes":
        tmpl = f["probe.py/routes"]
        out = next(iter(tmpl.values()))["out"]
        first = out.split()[0]
        return {a: {"rc": 0, "out": _substitute(out, node).replace(first, a, 1), "err": ""}
                for a in params.get("route_to", [])}
    if script == "netprobe.py" and section == "listen":
        lst = copy.deepcopy(f["netprobe.py/listen"])
        lst["ports"] = [40000 + i for i in range(int(params.get("ports", 2)))]
        if params.get("master_port"):
            lst["master"] = dict(f["netprobe.py/listen_master"]["master"],
                                 port=params["master_port"])
        return lst
    if script == "netprobe.py" and section == "connect":
        targets = params.get("targets")
        if params.get("compact") and node not in _SPECIAL_SOURCES and id(targets) in _KEPT:
            # every source the firewall rules leave alone gets the same answer for the same
            # target list: computed once (the nodes' own work, 5 ms a node at 4096 peers)
            memo = (id(targets), params.get("samples"), params.get("attempt"))
            with _LOCK:
                got = _CONNECT_ANSWERS.get(memo)
            if got is None:
                got = _connect(node, params)
                with _LOCK:
                    _CONNECT_ANSWERS[memo] = got
                    _TEXT[id(got)] = json.dumps(got)
            return got
        return _connect(node, params)
    if script == "envprobe.py" and section == "launchfiles":
        # every node has the launch directory; the fake cluster's launches name no file
        return {"launch_dir": params.get("launch_dir"), "dir_ok": True,
                "paths": {p: {"kind": "missing"} for p in params.get("paths", [])}}
    key = f"{script}/{section}"
    if key in f:
        return _substitute(f[key], node)
    return {"error": f"fake transport: no facts for {key}"}


def _connect(node: str, params: dict[str, Any]) -> dict[str, Any]:
    """netprobe.py connect's answer from `node` to `params`' targets."""
    samples = int(params.get("samples", 5))
    out: dict[str, Any] = {}
    compact = params.get("compact")
    median = "%.4f" % (0.1 + 0.001 * (samples // 2)) if samples else "nan"
    for t in params.get("targets", []):
        gone = (dead(t["name"]) or (node, t["name"]) in BLOCKED
                or ((node, t["name"]) in FLAKY and not params.get("attempt")))
        if compact and not gone and t.get("ports") and not t.get("master_port"):
            # netprobe's words for a target whose every port answered, without building
            # its entry first (the node's work, not the launcher's: a million at 1024 nodes)
            out[t["name"]] = (address(t["name"]), median)
            continue
        st = ({"status": "timed out", "ms": 3000.0} if gone else {"status": "ok", "ms": 0.12})
        entry: dict[str, Any] = {"addr": address(t["name"]), "resolve_error": None,
                                 "master": None, "ssh": None,
                 "ports": {str(p): dict(st, port=p) for p in t.get("ports", [])},
                 "rtt_ms": ([0.1 + 0.001 * i for i in range(samples)]
                            if t.get("ports") and not gone else [])}
        if t.get("master_port"):
            entry["master"] = dict(st, port=t["master_port"])
        if not t.get("ports"):
            entry["ssh"] = dict(st)
        elif (node, t["name"]) in BLOCKED and not dead(t["name"]):  # no port: try sshd
            entry["ssh"] = {"status": "ok", "ms": 0.12}
        out[t["name"]] = entry
    if not compact:
        return out
    # node/netprobe.py's compact form (--pairs matrix): its own rule for every other target
    addrs: list[str] = []
    rtts: list[str] = []
    detail: dict[str, Any] = {}
    for t in params.get("targets", []):
        e = out[t["name"]]
        if isinstance(e, tuple):
            addrs.append(e[0])
            rtts.append(e[1])
            continue
        one = netprobe._compact([t], {t["name"]: e})
        addrs.append(one["*compact"]["addr"])
        rtts.append(one["*compact"]["rtt_ms"])
        detail.update(one["*detail"])
    return {"*detail": detail, "*compact": {"addr": " ".join(addrs), "rtt_ms": " ".join(rtts)}}


def _pdsh_output(command: str) -> str:
    """pdsh's output on a healthy cluster: each host's recorded lines, `host: ` prefixed."""
    m = re.search(r" -w (\S+)", command)
    hosts = [h for h in (m.group(1).strip("'\"").split(",") if m else []) if h]
    key = "raw/rehearsal" if "base64" in command else "raw/pdsh"
    lines = facts()[key]
    out = []
    for h in hosts:
        if dead(h):  # pdsh's words for a host whose ssh timed out
            out.append(f"{h}: {_ssh_timeout(h)}\npdsh@site: {h}: ssh exited with exit code 255\n")
        else:
            out.extend(f"{h}: {ln}\n" for ln in _substitute(lines, h))
    return "".join(out)


class FakeSession:
    """One node's `NodeSession`: logs in at once, answers at once, never touches the network."""

    def __init__(self, target: SSHTarget, tag: str) -> None:
        self.target = target
        self.tag = tag
        self.login_seconds: float | None = None
        self._connected = False

    def connect(self) -> object:
        if dead(self.target.alias):
            raise ConnectError(self.target, Cause.TIMEOUT, "timed out after 10 s (fake: dead node)",
                               f"check that {self.target.alias} is powered on and on the network")
        if not self._connected:
            self.login_seconds = 0.001
            self._connected = True
        return self

    @property
    def connected(self) -> bool:
        return self._connected

    def run(self, argv: Sequence[str] | str, *, timeout: float = 30.0, stdin: bytes | None = None,
            max_output: int = 8 * 1024 * 1024) -> CommandResult:
        self.connect()
        start = time.monotonic()
        STATS["commands"] += 1
        node = self.target.alias
        command = argv if isinstance(argv, str) else " ".join(map(str, argv))
        stdout = ""
        words = [] if isinstance(argv, str) else [w for w in argv[1:] if w != "-S"]
        if words[:2] == ["-c", cluster_mod.BOOTSTRAP]:
            STATS["probes"] += 1
            if len(words) >= 3:
                params = json.loads(words[2])
            else:  # long parameters come first on standard input (cluster.probe_command)
                line, _, stdin = (stdin or b"").partition(b"\n")
                params = _decoded(line)
            if "bundle" in params:  # Cluster.prefetch's probes in one command (node/bundle.py)
                stdout = "".join(
                    f"{cluster_mod.BUNDLE_MARK}{json.dumps([i, answer(node, sc, se, pa)])}\n"
                    for i, (sc, se, pa) in enumerate(params["bundle"]))
            else:
                script = _script_name(stdin)
                result = {s: answer(node, script, s, params)
                          for s in params.get("sections", ["base"])}
                stdout = PROBE_MARK + "{" + ", ".join(
                    f"{json.dumps(s)}: {_TEXT.get(id(a)) or json.dumps(a)}"
                    for s, a in result.items()) + "}\n"
        elif "pdsh" in command and " -w " in command:  # S5's and the rehearsal's pdsh runs
            stdout = _pdsh_output(command)
        elif ma.BEGIN in command:  # H3: DeepSpeed's `ssh <first host> hostname -I`, a route
            m = re.search(r" (\S+) hostname -I", command)
            said = (f"{address(m.group(1))} " if m else
                    f"{command.split('route get ')[-1].split()[0]} dev eth0 src {address(node)}")
            stdout = f"{ma.BEGIN}\n{said}\n\n{ma.END} 0\n"
        return CommandResult(node=node, command=command, exit_status=0, stdout=stdout, stderr="",
                             duration=time.monotonic() - start)

    def stream(self, argv: Sequence[str] | str, *, stdin: bytes | Feed | None = None,
               on_chunk: Callable[[bytes, bool], None] = lambda data, is_stderr: None,
               should_stop: Callable[[], bool] = lambda: False, timeout: float = 30.0,
               kill_after: int = 2, wait: float | None = None,
               combine_stderr: bool = False) -> Streamed:
        data = stdin.data if isinstance(stdin, Feed) else stdin
        res = self.run(argv, timeout=timeout, stdin=data)
        if res.stdout:
            on_chunk(res.stdout.encode(), False)
        return Streamed(res.command, res.exit_status, res.duration)

    def end_leftovers(self, timeout: float = 5.0) -> Sweep:
        return Sweep(self.target.alias)

    def close(self) -> None:
        self._connected = False


class FakeTransport:
    """The `Transport` of a fake cluster: node i of `names` at address(i), logged in as root."""

    def __init__(self, names: Iterable[str], fanout: int = 32, tag: str = "ct-run-fake") -> None:
        # an IP address as HostName: the launcher's own lookups (N2) never wait for a DNS server
        self.targets: Mapping[str, SSHTarget] = {
            n: SSHTarget(alias=n, hostname=address(n), user="root") for n in names}
        self.fanout = fanout
        self.tag = tag
        self._sessions: dict[str, FakeSession] = {}
        self._lock = threading.Lock()

    def connection(self, node: str) -> NodeSession:
        with self._lock:
            if node not in self._sessions:
                self._sessions[node] = FakeSession(self.targets[node], self.tag)
            return self._sessions[node]

    def run(self, node: str, argv: Sequence[str] | str, **kw: Any) -> CommandResult:
        return self.connection(node).run(argv, **kw)

    def stream(self, node: str, argv: Sequence[str] | str, **kw: Any) -> Streamed:
        return self.connection(node).stream(argv, **kw)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R | BaseException]:
        return fan_out(fn, items, self.fanout)

    def end_leftovers(self) -> list[Sweep]:
        return []

    def close(self) -> None:
        with self._lock:
            for s in self._sessions.values():
                s.close()


def pytest_configure(config: pytest.Config) -> None:
    """After the suite's own pytest_configure (tryfirst) made the Cluster, before collection
    (and so before any login or probe): swap its transport for the fake."""
    cluster = config.stash.get(CLUSTER_KEY, None)
    if cluster is not None:
        mark_dead(cluster.names)
        transport: Transport = FakeTransport(cluster.names, cluster.settings.fanout)
        cluster.pool = transport


# Checks that run a real tool on the launcher against the nodes (pdsh to fake hosts) cannot
# run here: deselected, and counted in the terminal summary.
LAUNCHER_ONLY = ("test_pdsh_installed[launcher]", "test_pdsh[launcher->")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    drop = [i for i in items if i.name.startswith(LAUNCHER_ONLY)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        gone = {id(i) for i in drop}
        items[:] = [i for i in items if id(i) not in gone]


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    terminalreporter.line(f"fake transport: {STATS['commands']} remote commands answered, "
                          f"{STATS['probes']} of them probes")


def _record(state_dir: str) -> None:
    """Record the templates from node2 of a running sim (`python -m fixtures.sim up --nodes 3`),
    node2 taking rank 0 (first in the hostfile order) so that the rank-0 sections (the launch
    plan, pdsh runs, the rehearsal) are its own too.  Paths under this checkout are stored as
    {REPO} and filled in with the checkout that runs the bench."""
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from cluster_tests.core.cluster import Cluster, Node
    from cluster_tests.core.settings import Settings
    from cluster_tests.measure import rehearsal, sshpairs
    names = ["node2", "node1", "node3"]
    s = Settings(hostfile=None, hostfile_source="-", ssh_config=f"{state_dir}/ssh_config")
    c = Cluster.create(s, [Node(n, 1, i) for i, n in enumerate(names, 1)])
    n, out = "node2", {}
    raw: list[tuple[str, str]] = []
    real_run = c.pool.run

    def keep_run(node: str, argv: Sequence[str] | str, **kw: Any) -> CommandResult:
        res = real_run(node, argv, **kw)
        raw.append((argv if isinstance(argv, str) else " ".join(map(str, argv)),
                    res.stdout + res.stderr))
        return res
    c.pool.run = keep_run  # type: ignore[method-assign]
    try:
        for sec in ("base", "sshd", "accelerators"):
            out[f"probe.py/{sec}"] = c.probe(n, sec)
        a1 = out["probe.py/base"]["resolve"]["node1"]["addrs"][0]
        out["probe.py/routes"] = c.probe(n, "routes", route_to=[a1])
        out["probe.py/ssh_pairs"] = c.probe(n, "ssh_pairs", targets=["node1"], connect_timeout=5,
                                            fanout=4)
        out["netprobe.py/firewall"] = c.probe(n, "firewall", script="netprobe.py")
        kw: dict[str, Any] = dict(script="netprobe.py", token="rec", ports=2, hold=20, timeout=30)
        out["netprobe.py/listen"] = lst = c.probe(n, "listen", master_port=None, **kw)
        out["netprobe.py/listen_master"] = lst1 = c.probe("node1", "listen", master_port=29500,
                                                          **kw)
        out["netprobe.py/connect"] = c.probe(
            n, "connect", script="netprobe.py", token="rec", port_timeout=3, fanout=4, samples=5,
            timeout=30,
            targets=[{"name": "node1", "ports": lst1["ports"], "master_port": 29500}])
        out["netprobe.py/stop"] = c.probe(n, "stop", script="netprobe.py", token="rec",
                                          pid=lst["pid"], timeout=20)
        c.probe("node1", "stop", script="netprobe.py", token="rec", pid=lst1["pid"], timeout=20)
        out["envprobe.py/envfiles"] = c.probe(n, "envfiles", script="envprobe.py", launch_dir=None)
        out["envprobe.py/versions"] = c.probe(n, "versions", script="envprobe.py", timeout=120)
        out["envprobe.py/tmpdir"] = c.probe(n, "tmpdir", script="envprobe.py")
        out["envprobe.py/launch"] = c.probe(c.rank0.name, "launch", script="envprobe.py",
                                            **rehearsal.launch_params(c))
        for sec in ("fabric", "accel", "diag"):
            out[f"healthprobe.py/{sec}"] = c.probe(n, sec, script="healthprobe.py")
        raw.clear()
        sshpairs._pdsh(c, n)
        out["raw/pdsh"] = _own_lines(raw[-1][1], n)
        raw.clear()
        rehearsal.rehearse(c)
        out["raw/rehearsal"] = _own_lines(raw[-1][1], n)
    finally:
        c.close()
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    FACTS_PATH.write_text(text.replace(str(repo), "{REPO}"))
    print(f"recorded {len(out)} sections into {FACTS_PATH}")


def _own_lines(output: str, node: str) -> list[str]:
    """The lines pdsh prefixed with `node: ` (pdsh's own output format), prefix removed."""
    return [ln[len(node) + 2:] for ln in output.splitlines() if ln.startswith(f"{node}: ")]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--record":
        _record(sys.argv[2])
    else:
        print(__doc__)
