"""C1-C3 over the remote layer: start the all-reduce workers on the nodes, collect, clean up.

One SSH channel per node (on the node's shared paramiko connection) runs
``timeout -k 5 T <remote python> -u -c BOOTSTRAP --supervise SPEC``; the channel's stdin carries
``node/allreduce.py`` (length-prefixed), so nothing depends on a shared filesystem and
nothing is written to the node's disk. That process is the node's *supervisor*: it starts one
worker per rank of the node (handing each the same source on its stdin), relays their JSON event
lines on stdout, and kills them all as soon as its stdin closes, which happens when we close the
channel, or when this pytest dies (sshd then closes the channel). The remote ``timeout`` kills
the supervisor's whole process group, workers included, if everything else fails.

Environment: the workers see the node's own environment, as a non-interactive ssh shell sets it
up (the same shell pdsh gets), plus what :func:`worker_env` takes from the launcher's (the one
place that decides it). ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``/``HCCL_SOCKET_IFNAME``
are set only when the user set them in the launcher's environment (as DeepSpeed's launcher would
forward them); we never pick an interface ourselves. The master address is ``--master-addr`` if
given, else the rank-0 node's address as the other nodes resolve its hostfile name.

Rank layout: as DeepSpeed's launch: the hosts and slot ids left by --launch-include/
--launch-exclude, ranks node by node, local rank L on the L-th of the node's slot ids, which the
worker puts in ``CUDA_VISIBLE_DEVICES``/``ASCEND_RT_VISIBLE_DEVICES`` before importing torch, as
``launch.py`` does (``--include node1:4,5,6,7`` -> ``4,5,6,7``, local ranks 0-3). C2 runs every
slot of both nodes, so that every rail (each GPU's own NIC) carries a share of the pair's traffic.

Ports: C1 uses ``--master-port``; the pairs of one C2 round run at the same time on
``--master-port + 1 + i`` (i = the pair's index in its round), so no two concurrent runs share a
port.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from cluster_tests.core import outcome
from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, remote_script
from cluster_tests.core.transport import Feed, quote_argv
from cluster_tests.judge.collective import collopts as copts
from cluster_tests.judge.collective import colltable as ctab
from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.collective import confirmation
from cluster_tests.judge.collective import pairbw as pb
from cluster_tests.judge.collective import rankplan as rk
from cluster_tests.judge.common import stacks as S
from cluster_tests.judge.common.basefacts import BASE
from cluster_tests.judge.network import portjudge as nc
from cluster_tests.judge.ssh import sshnames
from cluster_tests.measure import ports
from cluster_tests.measure.ports import PORT_MATRIX, firewall_root

#: Where the collective results live for the terminal summary (see cluster_tests/plugin.py).
RESULTS_KEY = pytest.StashKey[dict[str, Any]]()

#: Must equal node/allreduce.py's BOOTSTRAP (tests check it).
BOOTSTRAP = ("import sys;n=int(sys.stdin.buffer.readline());s=sys.stdin.buffer.read(n);"
             "exec(compile(s,'allreduce.py','exec'),{'__name__':'__main__','CT_SOURCE':s})")

#: Launcher variables forwarded to the workers when set (and only then).
FORWARD_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")

#: Seconds a node gets to start Python and import torch before the stage deadlines begin.
STARTUP_S = 30.0
#: Seconds the other ranks get to report, once one rank has failed or a node's channel ended.
GRACE_S = 3.0
#: Seconds to wait for a supervisor's confirmation that its workers are dead.
REAP_S = 5.0
#: Seconds the run may go on, once the stacks were asked for, to wait for those of the ranks
#: still running, py-spy's native frames included where it runs (a loaded node relays them
#: late: a fixed wait lost them; the supervisor gives py-spy 12 s)
STACKS_WAIT_S = 15.0
#: On HCCL the worker's init deadline is at least HCCL_CONNECT_TIMEOUT (120 s unless set) + 15 s;
#: the remote ``timeout`` must outlast that too when the backend may be hccl.
HCCL_INIT_FLOOR_S = 135.0


# --- one node's channel ----------------------------------------------------------------------


class _NodeChannel:
    """The supervisor on one node: its channel, its events, its stderr tail."""

    def __init__(self, cluster: Cluster, node: str, spec: dict[str, Any], timeout_s: int,
                 inbox: queue.Queue) -> None:
        self.node = node
        self.stderr: collections.deque[str] = collections.deque(maxlen=30)
        self.text: collections.deque[str] = collections.deque(maxlen=30)  # non-JSON stdout
        self.pids: dict[int, int] = {}
        self.reaped = threading.Event()
        self.ended = threading.Event()
        self.exit_status: int | None = None
        python = cluster.settings.remote_python
        conn = cluster.pool.connection(node)
        # the session's run tag (if the remote layer has one) marks the supervisor as ours
        exports = str(spec.pop("exports_word", "") or "")
        spec = {**spec, "tag": getattr(conn, "tag", None)}
        # the launch's own exports first, as the node's shell runs them in the real launch;
        # the transport adds `timeout -k 5 T` around it
        self.command = exports + quote_argv([python, "-u", "-c", BOOTSTRAP, "--supervise",
                                             json.dumps(spec)])
        cluster.login(node)
        source = remote_script("allreduce.py")
        # stdin stays open: closing it is how we tell the supervisor to kill its workers
        self.stdin = Feed(str(len(source)).encode() + b"\n" + source)
        self._abandon = threading.Event()
        self._lines = {False: bytearray(), True: bytearray()}
        self._inbox = inbox
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._reader = threading.Thread(target=self._read, args=(cluster, timeout_s), daemon=True,
                                        name=f"allreduce-{node}")
        self._reader.start()
        while not self._started.wait(0.2):  # short waits: Ctrl-C (see transport.wait_result)
            continue
        if self._start_error is not None:
            raise self._start_error

    def _read(self, cluster: Cluster, timeout_s: int) -> None:
        def opened() -> bool:
            self._started.set()  # the command is on its way: the constructor may return
            return self._abandon.is_set()

        try:
            s = cluster.pool.stream(self.node, self.command, stdin=self.stdin,
                                    on_chunk=self._chunk, should_stop=opened,
                                    timeout=timeout_s, kill_after=5, wait=timeout_s + 10)
            self.exit_status = s.exit_status
        except BaseException as exc:  # noqa: BLE001 - the constructor raises it
            if not self._started.is_set():
                self._start_error = exc
        finally:
            for is_stderr, rest in self._lines.items():
                if rest:
                    self._line(bytes(rest), is_stderr)
            self._started.set()
            self.ended.set()
            if self._start_error is None:  # a channel that never started is not counted
                self._inbox.put((self.node, None))

    def _chunk(self, data: bytes, is_stderr: bool) -> None:
        buf = self._lines[is_stderr]
        buf += data
        *lines, rest = bytes(buf).split(b"\n")
        buf[:] = rest
        for raw in lines:
            self._line(raw, is_stderr)

    def _line(self, raw: bytes, is_stderr: bool) -> None:
        if is_stderr:
            self.stderr.append(raw.decode(errors="replace").rstrip())
            return
        line = raw.decode(errors="replace").strip()
        try:
            event = json.loads(line)
        except ValueError:
            if line:
                self.text.append(line)
            return
        if not isinstance(event, dict):
            return
        if event.get("event") == "workers":
            self.pids = {int(r): int(p) for r, p in event.get("pids", {}).items()}
        elif event.get("event") == "reaped":
            self.reaped.set()
        self._inbox.put((self.node, event))

    def dump(self) -> None:
        """Ask the supervisor for every live worker's stacks (``stack`` events follow)."""
        if not self.ended.is_set() and not self.stdin.closed:
            self.stdin.send(b"D")

    def stop(self) -> bool:
        """Close the supervisor's stdin (it kills its workers), wait for its word, close.
        True when the node confirmed that every worker is gone."""
        if not self.ended.is_set():
            self.stdin.close()
            self.reaped.wait(REAP_S)
            self.ended.wait(1.0)
        self._abandon.set()
        self._reader.join(1.0)
        # A supervisor that ended on its own said "reaped" first; one that never started a
        # worker has nothing to reap; one that `timeout` killed took its process group along.
        return (self.reaped.is_set() or (self.ended.is_set() and not self.pids)
                or self.exit_status in (124, 137))


# --- one run ---------------------------------------------------------------------------------


@dataclass
class RemoteRun:
    """One all-reduce run over some nodes: the report plus what the channels said."""

    report: C.CollectiveReport
    nodes: list[str]
    master: str
    master_addr: str
    port: int
    options: rk.WorkerOptions
    seconds: float = 0.0
    stderr: dict[str, list[str]] = field(default_factory=dict)
    channel_exit: dict[str, int | None] = field(default_factory=dict)
    unconfirmed: dict[str, dict[int, int]] = field(default_factory=dict)  # node -> rank -> pid
    start_errors: dict[str, str] = field(default_factory=dict)
    python: str = "python3"
    stacks: dict[int, str] = field(default_factory=dict)  # rank -> faulthandler dump(s)
    native: dict[int, str] = field(default_factory=dict)  # rank -> py-spy dump --native
    natives_due: set[int] = field(default_factory=set)  # ranks whose py-spy frames are to come
    # rank -> its TCP connections when its stack was taken: {"syn_sent": ['ip:port'],
    # "established": [[local port, 'ip:port']]} (node/allreduce.py tcp_peers)
    sockets: dict[int, dict[str, list[Any]]] = field(default_factory=dict)
    stacks_dir: str = ""  # where they were written (the report's output dir), if anywhere

    @property
    def where(self) -> str:
        return f"{self.master_addr}:{self.port}"


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: environ[k] for k in FORWARD_ENV if environ.get(k)}


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of the launcher's environment that the workers get on top of the node's
    own (only *_SOCKET_IFNAME and DS_ACCELERATOR, where the user set them for this run); the
    launch's own exports come first, see :func:`launch_exports_word`."""
    return forwarded_env(environ)


def launch_exports_word(cluster: Cluster) -> str:
    """`export K=V; ...; ` exactly as `deepspeed --hostfile` on the rank-0 node sends it to every
    node (DeepSpeed's rules: PYTHON*, the accelerator's NCCL_* / HCCL_*, ASCEND_*, PATH..., and
    `.deepspeed_env`; cluster_tests.judge.env.launchlegs), so that the all-reduce runs on the
    launch's fabric settings (NCCL_IB_HCA, NCCL_IB_GID_INDEX, HCCL_IF_IP, ...). Empty where the
    rehearsal could not compute them (E5 says why)."""
    from cluster_tests.judge.env import launchlegs
    from cluster_tests.measure import rehearsal

    r = rehearsal.rehearse(cluster)
    return launchlegs.exports_word(r.exports) if r.exports else ""


def launch_layout(cluster: Cluster, nodes: Sequence[str] | None = None
                  ) -> list[tuple[str, list[int]]]:
    """(host, slot ids) as the launch will use them: --launch-include/--launch-exclude applied
    (DeepSpeed's resource filter; every slot when the filter is bad: T2 reports that), in
    hostfile order, optionally only ``nodes``."""
    from cluster_tests.judge.hostfile import resourcefilter as rf

    nodes_ = getattr(cluster, "nodes", None)
    hosts = ({n.name: n.slots for n in nodes_} if nodes_ is not None
             else dict.fromkeys(cluster.names, 1))
    settings = cluster.settings
    try:
        active = rf.parse_resource_filter(hosts, getattr(settings, "include", "") or "",
                                          getattr(settings, "exclude", "") or "")
        layout = [(h, list(ids)) for h, ids in active.items()]
    except Exception:  # noqa: BLE001 - rf.ResourceFilterError: T2 names it
        layout = [(h, list(range(n))) for h, n in hosts.items()]
    wanted = set(nodes) if nodes is not None else None
    return [(h, ids) for h, ids in layout if wanted is None or h in wanted]


def run_allreduce(cluster: Cluster, ranks: Sequence[rk.Rank], *, master_addr: str, port: int,
                  options: rk.WorkerOptions, env: Mapping[str, str] | None = None,
                  exports_word: str = "",
                  startup_s: float = STARTUP_S, grace_s: float = GRACE_S,
                  visible: Mapping[str, str] | None = None) -> RemoteRun:
    """Run the worker for ``ranks`` (hosts = node names) and fold everything into a report.

    Every supervisor is told to stop on every path out of here (the channel's stdin is
    closed in ``finally``), and each one confirms that its workers are dead; nodes that do not
    confirm within a few seconds are listed in ``unconfirmed`` with the worker pids.
    """
    start = time.monotonic()
    by_node: dict[str, list[rk.Rank]] = {}
    for r in ranks:
        by_node.setdefault(r.host, []).append(r)
    world = len(ranks)
    stages = options.connect_timeout + options.init_timeout + options.op_timeout
    deadline = start + startup_s + stages + 5.0
    shortened = False  # a rank failed: the others only get the grace
    dumped = False  # the supervisors were asked for their workers' stacks
    hccl_extra = (max(0.0, HCCL_INIT_FLOOR_S - options.init_timeout)
                  if options.backend in ("auto", "hccl") else 0.0)
    remote_timeout = int(startup_s + stages + hccl_extra + 15.0)
    inbox: queue.Queue = queue.Queue()
    channels: dict[str, _NodeChannel] = {}
    events: dict[int, list[dict]] = {r.rank: [] for r in ranks}
    exit_codes: dict[int, int | None] = {}
    run = RemoteRun(report=C.CollectiveReport(world, list(ranks)), nodes=list(by_node),
                    master=ranks[0].host, master_addr=master_addr, port=port, options=options,
                    python=cluster.settings.remote_python)
    try:
        for node, node_ranks in by_node.items():
            spec = {"env": dict(env or {}), "exports_word": exports_word, "workers": [
                {"rank": r.rank,
                 "argv": rk.worker_argv("", "", r, world, master_addr, port, options,
                                       visible_devices=(visible or {}).get(node, ""),
                                       local_size=len(node_ranks) if visible else 0)[2:]}
                for r in node_ranks]}
            try:
                channels[node] = _NodeChannel(cluster, node, spec, remote_timeout, inbox)
            except Exception as exc:  # noqa: BLE001 - ConnectError, paramiko, socket errors
                run.start_errors[node] = f"{type(exc).__name__}: {exc}"
                deadline = min(deadline, time.monotonic() + grace_s)
        open_channels = len(channels)
        asked_at: float | None = None  # when the stacks were asked for

        def waiting_for_stacks() -> bool:
            """The stacks asked for, of ranks still running, are not all in yet (nor the
            native frames a supervisor said would follow)."""
            return (asked_at is not None and time.monotonic() < asked_at + STACKS_WAIT_S
                    and any((r.rank not in run.stacks and r.rank not in exit_codes
                             or r.rank in run.natives_due)
                            and r.host in channels and not channels[r.host].ended.is_set()
                            for r in ranks))

        while open_channels and (time.monotonic() < deadline or waiting_for_stacks()):
            try:
                node, event = inbox.get(timeout=0.2)
            except queue.Empty:
                continue
            if event is None:
                open_channels -= 1
                deadline = min(deadline, time.monotonic() + grace_s)
                shortened = True
                continue
            kind = event.get("event")
            if kind == "exit":
                code = event.get("code")
                exit_codes[int(event["exit_rank"])] = code
                if code != C.EXIT_OK:
                    deadline = min(deadline, time.monotonic() + grace_s)
                    shortened = True
            elif kind in ("workers", "reaped"):
                continue
            elif kind == "stack":
                _keep_stack(run, event)
                continue
            elif isinstance(event.get("rank"), int) and event["rank"] in events:
                events[event["rank"]].append(event)
                if kind == "error":
                    if event.get("timeout") and not dumped:
                        # a stage deadline passed: every rank still running says where it is
                        # before the grace ends and the others are killed
                        dumped = _ask_stacks(channels)
                        asked_at = time.monotonic()
                    deadline = min(deadline, time.monotonic() + grace_s)
                    shortened = True
                elif (kind == "start" and not shortened
                      and isinstance(event.get("init_timeout_s"), (int, float))):
                    # HCCL: the worker's init deadline outlasts HCCL_CONNECT_TIMEOUT
                    longer = float(event["init_timeout_s"]) - options.init_timeout
                    deadline = max(deadline, start + startup_s + stages + longer + 5.0)
            elif kind == "error":  # the supervisor itself
                run.start_errors[node] = str(event.get("message"))
                deadline = min(deadline, time.monotonic() + grace_s)
        if open_channels and not dumped and channels:
            # our own deadline passed with ranks still running: their stacks first
            dumped = _ask_stacks(channels)
            asked_at = time.monotonic()
            while waiting_for_stacks():
                try:
                    node, event = inbox.get(timeout=0.2)
                except queue.Empty:
                    continue
                if event is not None and event.get("event") == "stack":
                    _keep_stack(run, event)
    finally:
        stopped = cluster.pool.map(lambda ch: ch.stop(), channels.values())
        confirmed = dict(zip(channels, stopped, strict=False))
        for node, ch in channels.items():
            run.stderr[node] = list(ch.stderr) + list(ch.text)
            run.channel_exit[node] = ch.exit_status
            if confirmed.get(node) is not True:
                run.unconfirmed[node] = dict(ch.pids)
    while True:  # stacks relayed while the channels closed
        try:
            node, event = inbox.get_nowait()
        except queue.Empty:
            break
        if event is not None and event.get("event") == "stack":
            _keep_stack(run, event)
    run.report = C.collect(events, ranks, exit_codes)
    for rank, evs in events.items():  # a rank at its own watchdog says whom it still waits on
        for ev in evs:
            if ev.get("event") == "error" and isinstance(ev.get("sockets"), dict):
                run.sockets[rank] = _sockets(ev["sockets"])
    if run.report.stopped is not None and options.budget_s is not None:
        said = run.report.stopped.describe()
        run.report.stopped = dataclasses.replace(run.report.stopped, budget_s=options.budget_s)
        run.report.message = run.report.message.replace(said, run.report.stopped.describe())
    for ch in channels.values():
        run.report.pids.update(ch.pids)
    run.seconds = time.monotonic() - start
    return run


def address_owners(cluster: Cluster, nodes: Sequence[str]) -> dict[str, str]:
    """Every address of the run's nodes (their interfaces, from the base probe) -> node."""
    from cluster_tests.judge.common.netfacts import all_ips, parse_interfaces

    out: dict[str, str] = {}
    for node in nodes:
        try:
            facts = cluster.base(node)
            for ip in all_ips(parse_interfaces(facts.ip_link, facts.ip_addr)):
                out.setdefault(ip, node)
        except Exception:  # noqa: BLE001, S112 - a node we cannot read just stays unnamed
            continue
    return out


def _ask_stacks(channels: Mapping[str, _NodeChannel]) -> bool:
    for ch in channels.values():
        ch.dump()
    return True


def _keep_stack(run: RemoteRun, event: Mapping[str, Any]) -> None:
    rank = event.get("stack_rank")
    if not isinstance(rank, int):
        return
    if event.get("text"):
        run.stacks[rank] = run.stacks.get(rank, "") + str(event["text"])
    if event.get("native"):
        run.native[rank] = run.native.get(rank, "") + str(event["native"])
    if event.get("native_pending"):
        run.natives_due.add(rank)
    if event.get("native_done"):
        run.natives_due.discard(rank)
    if isinstance(event.get("sockets"), dict) and event["sockets"]:
        run.sockets[rank] = _sockets(event["sockets"])


def _sockets(raw: Mapping[str, Any]) -> dict[str, list[Any]]:
    """A worker's tcp_peers: syn_sent ['ip:port'], established [[local port, 'ip:port']]."""
    est = [[int(e[0]), str(e[1])] for e in raw.get("established") or []
           if isinstance(e, (list, tuple)) and len(e) == 2 and str(e[0]).isdigit()]
    return {"syn_sent": [str(e) for e in raw.get("syn_sent") or []], "established": est}


# --- what to run -----------------------------------------------------------------------------


def worker_options(cluster: Cluster, backend: str, sizes: Sequence[int],
                   size_seconds: float | None = None) -> rk.WorkerOptions:
    """The workers' options; ``size_seconds``: the run's share of --collective-budget per size
    (:func:`pb.budget_shares`), where lower than --collective-size-seconds."""
    c = cluster.settings.collective
    budget = getattr(c, "budget", None)
    capped = size_seconds is not None and size_seconds < c.size_seconds
    return rk.WorkerOptions(
        sizes=list(sizes), backend=backend,
        warmup=c.warmup, iters=c.iters,
        connect_timeout=c.connect_timeout,
        init_timeout=c.init_timeout,
        op_timeout=c.op_timeout,
        size_seconds=size_seconds if capped and size_seconds is not None else c.size_seconds,
        budget_s=budget if capped else None)


def shares(cluster: Cluster) -> tuple[float, float]:
    """(C1's, C2's) seconds per size under --collective-budget."""
    c = cluster.settings.collective
    budget = getattr(c, "budget", None)
    if not budget:
        return c.size_seconds, c.size_seconds
    sizes = chosen_sizes(cluster)
    # C2's rounds, and the two a confirmation pass takes for a suspect
    # (judge/collective/confirmation.py)
    rounds = len(list(pairs_mod.node_pair_rounds(cluster))) + confirmation.SUSPECT_ROUNDS
    return pb.budget_shares(budget, c.size_seconds, len(sizes), rounds,
                           len(pb.pair_sizes(sizes)))


def chosen_sizes(cluster: Cluster) -> list[int]:
    """--sizes, else nccl-tests-like defaults for the accelerator the rank-0 node seems to have
    (nvidia-smi/npu-smi on its PATH), else the shorter CPU (gloo) sweep."""
    sizes = cluster.settings.collective.sizes
    if sizes:
        return copts.parse_sizes(sizes) if isinstance(sizes, str) else list(sizes)
    backend = cluster.settings.collective.backend
    if backend == "auto":
        try:
            which: Mapping[str, str | None] = cluster.probe(cluster.rank0.name, BASE).which
        except Exception:  # noqa: BLE001 - the run itself will say what is wrong
            which = {}
        backend = "nccl" if which.get("nvidia-smi") or which.get("npu-smi") else "gloo"
    return copts.default_sizes(backend)


def master_address(cluster: Cluster, master: str, viewers: Sequence[str]) -> str:
    """``master``'s address as the first other viewer resolves its name (the name itself if
    nobody can: the workers then fail to connect, and say so)."""
    given = cluster.settings.master_addr
    if given and master == cluster.rank0.name:
        return str(given)
    for viewer in viewers:
        if viewer == master or cluster.login_error(viewer) is not None:
            continue
        try:
            # where the viewer's ssh (its config's HostName, else its resolver) sends the name
            addrs = sshnames.placement(cluster.probe(viewer, BASE), master).addrs
        except Exception:  # noqa: BLE001, S112 - try the next viewer
            continue
        if addrs:
            return str(addrs[0])
    return master


def run_cluster(cluster: Cluster) -> RemoteRun:
    """C1: one rank per slot on every node, rendezvous on the rank-0 node."""
    for node in cluster.names:
        cluster.require(node)
    why = blocked_by_f3(cluster, cluster.names)
    if why:
        outcome.block(*ports_root(cluster, f3_blocked_pairs(cluster, cluster.names)[0]))
        pytest.fail(f"all-reduce over every rank of {', '.join(cluster.names)}: {why}",
                    pytrace=False)
    layout = launch_layout(cluster)
    ranks = rk.assign_ranks([(host, len(ids)) for host, ids in layout])
    backend = cluster.settings.collective.backend
    options = worker_options(cluster, backend, chosen_sizes(cluster), shares(cluster)[0])
    master = layout[0][0] if layout else cluster.rank0.name
    return run_allreduce(cluster, ranks, master_addr=master_address(cluster, master, cluster.names),
                         port=cluster.settings.master_port, options=options,
                         env=worker_env(_launcher_env()),
                         exports_word=launch_exports_word(cluster),
                         visible={host: ",".join(map(str, ids)) for host, ids in layout})


def _launcher_env() -> Mapping[str, str]:
    import os

    return os.environ


def pair_master(names: Sequence[str], a: str, b: str) -> tuple[str, str]:
    """(rendezvous node, other node) of pair (a, b): alternating, so that every node serves a
    rendezvous at least once. A node that drops inbound high ports but lets the replies to its
    own connections back in passes every run in which it only connects out (PITFALLS 9)."""
    return (b, a) if (names.index(a) + names.index(b)) % 2 else (a, b)


def run_pairs(cluster: Cluster) -> dict[tuple[str, str], RemoteRun | BaseException]:
    """C2: every unordered pair of nodes (or those of --pairs), every launch slot of both nodes
    (:func:`launch_layout`: one rail per GPU on multi-rail nodes), at the largest size only;
    pairs are scheduled in circle rounds of disjoint pairs, each round's pairs at once, with the
    rendezvous on alternating sides (:func:`pair_master`)."""
    # all pairs, or those of --pairs
    return _run_rounds(cluster, pairs_mod.node_pair_rounds(cluster))


def _run_rounds(cluster: Cluster, rounds: Sequence[Sequence[tuple[str, str]]]
                ) -> dict[tuple[str, str], RemoteRun | BaseException]:
    """Each round's pairs at once (a round's pairs are disjoint), the rounds one after the
    other; results keyed in hostfile order, as C2's tests are (a round may name b first)."""
    backend = cluster.settings.collective.backend
    options = worker_options(cluster, backend, pb.pair_sizes(chosen_sizes(cluster)),
                             shares(cluster)[1])
    env = worker_env(_launcher_env())
    exports_word = launch_exports_word(cluster)
    slots = dict(launch_layout(cluster))
    results: dict[tuple[str, str], RemoteRun | BaseException] = {}
    order = {name: i for i, name in enumerate(cluster.names)}
    for round_pairs in rounds:
        def one(item: tuple[int, tuple[str, str]]) -> RemoteRun:
            i, (a, b) = item
            for node in (a, b):
                if cluster.login_error(node) is not None:
                    raise NodeDown(node)
            why = blocked_by_f3(cluster, [a, b])
            if why:
                raise PortsBlocked(why, f3_blocked_pairs(cluster, [a, b]))
            master, other = pair_master(cluster.names, a, b)
            ids = {n: slots.get(n) or [0] for n in (master, other)}
            ranks = rk.assign_ranks([(master, len(ids[master])), (other, len(ids[other]))])
            return run_allreduce(cluster, ranks,
                                 master_addr=master_address(cluster, master, [other]),
                                 port=cluster.settings.master_port + 1 + i, options=options,
                                 env=env, exports_word=exports_word,
                                 visible={n: ",".join(map(str, v)) for n, v in ids.items()})

        done = cluster.pool.map(one, list(enumerate(round_pairs)))
        for (a, b), res in zip(round_pairs, done, strict=False):
            results[(a, b) if order[a] < order[b] else (b, a)] = res
    return results


def confirm(cluster: Cluster, plan: confirmation.Plan, threshold: float,
            announce: Callable[[str], None] | None = None
            ) -> tuple[dict[tuple[str, str], confirmation.Retry],
                       dict[tuple[str, str], RemoteRun | BaseException]]:
    """C2's confirmation pass (judge/collective/confirmation.py): after ``--confirm-pause``
    seconds, the plan's pairs measured again in rounds of disjoint pairs, each with C2's options
    and share of the budget; each run read as a :class:`confirmation.Retry` against C2's
    ``threshold``. Returns the retries and the runs (for the stacks and the leftovers)."""
    if plan.empty:
        return {}, {}
    pause = cluster.settings.collective.confirm_pause
    if announce is not None:
        announce(f"C2: confirming before blaming, in {pause:g} s: {plan.describe()}")
    if pause > 0:
        time.sleep(pause)
    runs = _run_rounds(cluster, pairs_mod.rounds(list(plan.pairs)))
    retries = {}
    for pair, run in runs.items():
        if isinstance(run, BaseException):
            retries[pair] = confirmation.Retry(pair, None, True, f"could not run: {run}")
            continue
        rep = run.report
        top = rep.rows[-1] if rep.rows else None
        retries[pair] = confirmation.retry_from(
            pair, rep.ok, top.busbw_GBps if top else None,
            (f"sweep stopped before {copts.format_size(rep.stopped.size_bytes)}B, about "
             f"{rep.stopped.op_seconds:.1f} s per call" if rep.stopped is not None else None),
            rep.message, threshold)
    return retries, runs


class PortsBlocked(Exception):
    """The F3 port matrix of this session already shows that one node takes no connection from
    another on any tested port: an all-reduce between them can only wait out its rendezvous
    deadline (once for C1, and once per C2 round: up to N-1 rounds for one firewalled node)."""

    def __init__(self, why: str, pairs: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(why)
        self.pairs = list(pairs)


def blocked_by_f3(cluster: Cluster, nodes: Sequence[str]) -> str | None:
    """Why an all-reduce over `nodes` is not worth running, when this session's port matrix (if
    F3 ran) shows an ordered pair of them blocked on every tested port; else None."""
    matrix = cluster.cached(PORT_MATRIX)
    blocked = f3_blocked_pairs(cluster, nodes)
    if matrix is None or not blocked:
        return None
    shown = "; ".join(
        f"{dst} takes no connection from {src} ("
        + ", ".join(f"{p} {s}" for p, s in nc.failed_ports(matrix.reach(src, dst)).items())
        + f"; see {ports.pair_item(cluster, ids.HIGH_PORTS, src, dst)})"
        for src, dst in blocked[:4])
    more = f" (+{len(blocked) - 4} more)" if len(blocked) > 4 else ""
    return (f"not run: the network checks found that {shown}{more}: an all-reduce could only "
            f"wait out its rendezvous deadline (--collective-connect-timeout).\n  fix: open the "
            f"ports (see those tests' fixes), then rerun `-m collective`")


def ports_root(cluster: Cluster, pair: tuple[str, str]) -> tuple[str, str]:
    """(the red that holds a blocked pair's cause, why): the F4 red of the node whose own
    firewall drops it, else the pair's F3 red."""
    src, dst = pair
    why = f"{dst} takes no connection from {src} on high ports: an all-reduce could only hang"
    node = firewall_root(cluster, src, dst)
    if node is not None and outcome.selected(ids.FIREWALL_RULES.of(node)):
        return ids.FIREWALL_RULES.of(node), f"{node}'s own firewall drops {src} -> {dst}: {why}"
    return ports.pair_item(cluster, ids.HIGH_PORTS, src, dst), why


def f3_blocked_pairs(cluster: Cluster, nodes: Sequence[str]) -> list[tuple[str, str]]:
    """The ordered pairs of `nodes` that this session's port matrix (if F3 ran) shows blocked
    on every tested port."""
    matrix = cluster.cached(PORT_MATRIX)
    if matrix is None:
        return []
    return [(a, b) for a in nodes for b in nodes if a != b and nc.blocked(matrix.reach(a, b))]


class NodeDown(Exception):
    def __init__(self, node: str) -> None:
        self.node = node
        super().__init__(f"{node} unreachable: see {ids.LOGIN.of(node)}")


# --- explaining a failure --------------------------------------------------------------------


def involved_nodes(run: RemoteRun) -> list[str]:
    """Nodes of the ranks that never joined, hung, failed or stayed silent, in hostfile order."""
    rep = run.report
    if rep.missing:
        bad = set(rep.missing) | {r for r, (stage, _) in rep.failed.items() if stage == "connect"}
    elif rep.verdict == "hang":
        bad = set(rep.stuck) | set(rep.silent) | set(rep.unfinished)
    else:
        bad = set(rep.failed) | set(rep.silent) | set(rep.unfinished)
    hosts = {r.host for r in rep.ranks if r.rank in bad} | set(run.start_errors)
    return [n for n in run.nodes if n in hosts]


def network_hint(cluster: Cluster, nodes: Sequence[str]) -> str:
    """What the F checks found about ``nodes`` this session, else how to find out."""
    matrix = cluster.cached(PORT_MATRIX)
    findings = nc.closed_ports(matrix, nodes) if matrix is not None else []
    if findings:
        more = f" (+{len(findings) - 4} more)" if len(findings) > 4 else ""
        return ("the network checks (F) of this session found closed ports: "
                + "; ".join(findings[:4]) + more)
    if matrix is not None:
        return ("the network checks (F) of this session found every probed port open for "
                f"{', '.join(nodes)}")
    return ("no network checks ran in this session: run `pytest -m network` to test every port "
            "between the nodes in each direction")


def _own_store_unreachable(run: RemoteRun) -> bool:
    """Rank 0 could not connect to the store it created on its own node: it said so, or, its
    own words not in before the others were stopped, its stack was still in our connect step
    once a peer's connect had failed.  Creating the store and connecting to it on the node's
    own address takes milliseconds, unless a firewall on that node drops the connection; so
    which of the two connect deadlines speaks first no longer decides the fix."""
    rep = run.report
    if rep.failed.get(0, ("", ""))[0] == "connect":
        return True
    if 0 in rep.failed or not any(stage == "connect" for stage, _ in rep.failed.values()):
        return False
    thread = S.main_thread(S.parse(run.stacks.get(0, "")))
    return thread is not None and any(
        f.func == "connect" and f.file.rsplit("/", 1)[-1] == "allreduce.py" for f in thread.frames)


def _fix(run: RemoteRun, nodes: Sequence[str]) -> str:
    rep = run.report
    who = ", ".join(n for n in nodes if n != run.master) or ", ".join(nodes) or "the nodes"
    if any(stage == "device" for stage, _ in rep.failed.values()):
        bad = {x.host for x in rep.ranks if rep.failed.get(x.rank, ("",))[0] == "device"}
        where = ", ".join(n for n in run.nodes if n in bad) or "the nodes"
        return (f"the accelerator did not come up on {where} (not a network problem): check "
                f"`nvidia-smi` / `npu-smi info` there for a device in error or held by another "
                f"process, and the driver's log (dmesg); see {ids.ACCELERATORS}")
    if any(stage == "setup" for stage, _ in rep.failed.values()):
        return (f"on {', '.join(nodes) or 'the nodes'}: make the accelerator usable from the "
                f"remote Python in a non-interactive shell (the rank errors above say what is "
                f"missing), or pass --backend explicitly")
    if _own_store_unreachable(run):
        return (f"{run.master} cannot reach its own rendezvous store at {run.where} (rank 0 "
                f"listens, then connects to it like every rank): a firewall on {run.master} "
                f"drops connections to port {run.port}: check `iptables -S INPUT` / "
                f"`nft list ruleset` on {run.master}")
    if rep.verdict == "missing" or any(s == "connect" for s, _ in rep.failed.values()):
        return (f"let {who} reach {run.master} at {run.where} over TCP, replies included (a DROP "
                f"of high ports in a node's INPUT chain also drops the replies to that node's own "
                f"connections): check `iptables -S INPUT` / `nft list ruleset` on {who} and "
                f"{run.master}")
    if rep.verdict == "hang" and rep.stuck_stage == "init" and rep.backend == "hccl":
        return (f"HCCL links the NPUs through their own RoCE NICs (not the host interface) and "
                f"listens on ports 60000-60015 of every node (HCCL_IF_BASE_PORT moves them): "
                f"open those ports between the NPU NICs of {who} and {run.master}, and check "
                f"each NIC with `hccn_tool -i <id> -net_health -g`, `hccn_tool -i <id> -link -g` "
                f"and `hccn_tool -i <id> -ip -g` (see {ids.ASCEND_ENV.module} "
                f"{ids.ASCEND_ENV.item}); HCCL_IF_IP / "
                f"HCCL_SOCKET_IFNAME choose the host interface of its rendezvous")
    if rep.verdict == "hang" and rep.stuck_stage == "init":
        return (f"communicator init opens its own connections between every pair of nodes on "
                f"ephemeral high ports, on the interface the hostname resolves to: open high "
                f"ports both ways on {who}, or set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the "
                f"cluster interface; `-k {ids.ALLREDUCE_PAIR}` names the node whose pairs hang")
    if any(run.channel_exit.get(n) == 127 for n in nodes):
        return (f"the remote Python '{run.python}' was not found on "
                f"{who} by a non-interactive ssh shell: pass --remote-python /path/to/python, or "
                f"put it on PATH in ~/.bashrc above any early 'return'")
    if rep.verdict == "hang":
        return (f"a rank on {who} stalled mid-transfer: run `-k {ids.ALLREDUCE_PAIR}` to find the "
                "slow node or link")
    return f"read the rank errors above; on {who}: {run.options.backend} backend, torch install"


def explain(cluster: Cluster, run: RemoteRun, what: str) -> str:
    """The failure message of a run: verdict, the ranks by host and local rank, evidence,
    deadlines, network findings and a fix."""
    rep = run.report
    nodes = involved_nodes(run)
    o = run.options
    if rep.verdict == "failed" and rep.failed:
        stages = sorted({stage for stage, _ in rep.failed.values()})
        head = (f"{rk.describe_ranks(rep.failed, rep.ranks)} failed in stage "
                f"{', '.join(stages)} (details below)")
    else:
        head = rep.message or rep.verdict
    lines = [f"{what}: {head}"]
    for r, (stage, msg) in sorted(rep.failed.items()):
        if rep.missing and stage == "rendezvous":
            continue  # the waiting side of "never joined": the first line says it
        rank = next(x for x in rep.ranks if x.rank == r)
        lines.append(f"  rank {r} ({rank.host} local {rank.local_rank}) [{stage}]: {msg}")
    if rep.unfinished and rep.verdict != "hang":
        lines.append(f"  never finished: {rk.describe_ranks(rep.unfinished, rep.ranks)}")
    for node, err in run.start_errors.items():
        lines.append(f"  {node}: could not start the workers: {err}")
    for node in nodes or run.nodes:
        said = fabric_lines(run.stderr.get(node, []))
        if said:
            lines.append(f"  {node} NCCL/HCCL said: " + " | ".join(said))
    for node in nodes:
        status = run.channel_exit.get(node)
        tail = [ln for ln in run.stderr.get(node, []) if ln][-4:]
        if tail and (status not in (0, None) or set(rep.silent) & {
                r.rank for r in rep.ranks if r.host == node}):
            lines.append(f"  {node} (exit {status}) said: " + " | ".join(tail))
    if rep.missing:
        lines.append(f"  rendezvous server: {run.master} ({run.where}); {', '.join(nodes)} could "
                     f"not join it: {run.master} drops connections to port {run.port}, or "
                     f"{', '.join(nodes)} cannot connect out or get the replies back")
    init = rep.init_timeout_s if rep.init_timeout_s else o.init_timeout
    lines.append(f"  deadlines: connect/rendezvous {o.connect_timeout:g} s, init "
                 f"{init:g} s, collective {o.op_timeout:g} s; master {run.where}")
    lines.append(f"  network: {network_hint(cluster, nodes or run.nodes)}")
    lines.append(f"  fix: {_fix(run, nodes)}")
    return "\n".join(lines)


_FABRIC_LINE = ("NCCL WARN", "NCCL ERROR", "HCCL", "EI00", "EJ00", "ProcessGroupNCCL")


def fabric_lines(stderr: Sequence[str], limit: int = 4) -> list[str]:
    """The communication library's own warnings and errors in a node's worker stderr (NCCL
    WARN lines, HCCL/CANN error codes), whatever the supervisor's exit status: the last
    ``limit`` distinct ones. (The NCCL_DEBUG=INFO log and its parser are separate.)"""
    seen: list[str] = []
    for line in stderr:
        text = line.strip()
        if text and any(mark in text for mark in _FABRIC_LINE) and text not in seen:
            if "NCCL INFO" in text:
                continue
            seen.append(text[:300])
    return seen[-limit:]


def accelerator_problems(cluster: Cluster, run: RemoteRun) -> list[str]:
    """Ranks whose backend does not match their node's accelerators as A1 lists them (nvidia ->
    nccl, ascend -> hccl, none -> gloo), and ranks that disagree on the backend. Only for an
    automatic choice: an explicit --backend is the user's."""
    if run.options.backend != "auto":
        return C.backend_problems(run.report, {})
    from cluster_tests.measure import accel

    kinds: dict[str, tuple[str, str]] = {}
    for node in run.nodes:
        try:
            inv = accel.inventory(cluster, node)
        except Exception:  # noqa: BLE001, S112 - A1 says why; the worker's own check still ran
            continue
        kinds[node] = (inv.kind, inv.describe())
    return C.backend_problems(run.report, kinds)


ACCELERATOR_FIX = ("  fix: on those nodes make the remote Python see the accelerators in a "
            "non-interactive shell (`ssh <node> python3 -c 'import torch; print(torch.cuda."
            "is_available())'`; on Ascend, CANN's set_env.sh sourced in ~/.bashrc above any early "
            "return, and torch_npu installed), or pass --backend explicitly")


def leftovers(run: RemoteRun) -> str:
    """'' when every node confirmed its workers are gone, else what to kill where."""
    return "; ".join(f"{node}: kill {' '.join(map(str, pids.values())) or '(pids unknown)'}"
                     for node, pids in run.unconfirmed.items())


# --- baselines and the summary ---------------------------------------------------------------


def record(run: RemoteRun) -> dict[str, Any]:
    """This run as a baseline document (``--busbw-record``, read back by ``--busbw-baseline``)."""
    rep = run.report
    return {
        "kind": "cluster_tests.allreduce", "backend": rep.backend, "world_size": rep.world_size,
        "nodes": run.nodes, "versions": rep.versions, "timed": rep.timed,
        "rows": [{"size_bytes": r.size_bytes, "time_us": r.time_us, "algbw_GBps": r.algbw_GBps,
                  "busbw_GBps": r.busbw_GBps, "wrong": r.wrong} for r in rep.rows],
    }


def stash(config: pytest.Config) -> dict[str, Any]:
    store = config.stash.get(RESULTS_KEY, None)
    if store is None:
        store = config.stash[RESULTS_KEY] = {}
    return store


def summary_lines(config: pytest.Config) -> list[str]:
    """The C tables for the terminal summary ([] when no collective check ran)."""
    store = config.stash.get(RESULTS_KEY, None) or {}
    lines: list[str] = []
    run = store.get("cluster")
    if isinstance(run, RemoteRun):
        lines += [f"C1: all-reduce over every rank ({', '.join(run.nodes)}), master {run.where}",
                  ctab.format_table(run.report)]
    pairs = store.get("pairs")
    if pairs:
        if lines:
            lines.append("")
        slow = store.get("slow")
        confirmed = store.get("confirm")
        if slow is not None and confirmed is not None and not confirmed.plan.empty:
            # the table names a suspect only once the confirmation pass has confirmed it
            slow = dataclasses.replace(slow, suspect=confirmed.confirmed)
        lines.append(ctab.format_pairs_table(
            {p: r.report for p, r in pairs.items() if isinstance(r, RemoteRun)},
            {p: str(r) for p, r in pairs.items() if not isinstance(r, RemoteRun)}, slow))
        if confirmed is not None and slow is not None:
            lines += confirmation.table_lines(confirmed, slow.threshold_GBps)
    return lines
