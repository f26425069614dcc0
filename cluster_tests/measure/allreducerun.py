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
from pathlib import Path

from cluster_tests.core import pairs as pairs_mod
from cluster_tests.core import testids as ids
from cluster_tests.core.cluster import Cluster, remote_script
from cluster_tests.core.transport import Feed, quote_argv
from cluster_tests.judge.collective import collopts as copts
from cluster_tests.judge.collective import collverdict as C
from cluster_tests.judge.collective import confirmation, nccllog
from cluster_tests.judge.collective import pairbw as pb
from cluster_tests.judge.collective import rankplan as rk
from cluster_tests.judge.collective.collverdict import Event, RemoteRun
from cluster_tests.judge.common import stacks as S
from cluster_tests.judge.common.basefacts import BASE
from cluster_tests.judge.common.probes import integer, number, text
from cluster_tests.judge.ssh import sshnames
from cluster_tests.measure import ports
from cluster_tests.measure.ports import PORT_MATRIX

Pair = tuple[str, str]
#: C2's runs, keyed in hostfile order: a run, or why it was not run (NodeDown, PortsBlocked...)
PairRuns = dict[Pair, "RemoteRun | BaseException"]


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

#: What a node's channel puts in the run's inbox: (node, an event; None when the channel ended)
Inbox = queue.Queue[tuple[str, Event | None]]


class _NodeChannel:
    """The supervisor on one node: its channel, its events, its stderr tail."""

    def __init__(self, cluster: Cluster, node: str, spec: Mapping[str, object], exports: str,
                 timeout_s: int, inbox: Inbox) -> None:
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
        pids = event.get("pids")
        if event.get("event") == "workers" and isinstance(pids, dict):
            self.pids = {int(r): integer(p) for r, p in pids.items() if str(r).isdigit()}
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

    exports = rehearsal.exports(cluster)
    return launchlegs.exports_word(exports) if exports else ""


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


class _Run:
    """The launcher's side of one run: a channel per node, the events they relay into one
    inbox, and the run's deadline (shortened to a grace once a rank or a channel fails; the
    stacks of the ranks still running asked for before anything is stopped)."""

    def __init__(self, cluster: Cluster, run: RemoteRun, ranks: Sequence[rk.Rank],
                 startup_s: float, grace_s: float) -> None:
        self.cluster, self.run, self.ranks = cluster, run, list(ranks)
        o = run.options
        self.start = time.monotonic()
        self.startup_s, self.grace_s = startup_s, grace_s
        self.stages = o.connect_timeout + o.init_timeout + o.op_timeout
        self.deadline = self.start + startup_s + self.stages + 5.0
        self.shortened = False  # a rank failed: the others only get the grace
        self.asked_at: float | None = None  # when the stacks were asked for
        self.inbox: Inbox = queue.Queue()
        self.channels: dict[str, _NodeChannel] = {}
        self.open_channels = 0
        self.events: dict[int, list[Event]] = {r.rank: [] for r in ranks}
        self.exit_codes: dict[int, int | None] = {}

    def remote_timeout(self) -> int:
        """The node's own `timeout` around its supervisor: every stage and the start-up, and on
        HCCL the init deadline's floor."""
        o = self.run.options
        hccl_extra = (max(0.0, HCCL_INIT_FLOOR_S - o.init_timeout)
                      if o.backend in ("auto", "hccl") else 0.0)
        return int(self.startup_s + self.stages + hccl_extra + 15.0)

    def _grace(self, shorten: bool = True) -> None:
        self.deadline = min(self.deadline, time.monotonic() + self.grace_s)
        self.shortened = self.shortened or shorten

    def open(self, specs: Mapping[str, Mapping[str, object]], exports: str) -> None:
        """A supervisor per node (a node that cannot start one is a start error)."""
        for node, spec in specs.items():
            try:
                self.channels[node] = _NodeChannel(self.cluster, node, spec, exports,
                                                   self.remote_timeout(), self.inbox)
            except Exception as exc:  # noqa: BLE001 - ConnectError, paramiko, socket errors
                self.run.start_errors[node] = f"{type(exc).__name__}: {exc}"
                self._grace(shorten=False)
        self.open_channels = len(self.channels)

    def _ask_stacks(self) -> None:
        for ch in self.channels.values():
            ch.dump()
        self.asked_at = time.monotonic()

    def _waiting_for_stacks(self) -> bool:
        """The stacks asked for, of ranks still running, are not all in yet (nor the native
        frames a supervisor said would follow)."""
        run = self.run
        return (self.asked_at is not None and time.monotonic() < self.asked_at + STACKS_WAIT_S
                and any((r.rank not in run.stacks and r.rank not in self.exit_codes
                         or r.rank in run.natives_due)
                        and r.host in self.channels and not self.channels[r.host].ended.is_set()
                        for r in self.ranks))

    def _rank_event(self, event: Event) -> None:
        """An event of one of the run's ranks."""
        rank = integer(event.get("rank"))
        self.events[rank].append(event)
        kind = event.get("event")
        if kind == "error":
            if event.get("timeout") and self.asked_at is None:
                # a stage deadline passed: every rank still running says where it is before
                # the grace ends and the others are killed
                self._ask_stacks()
            self._grace()
        elif kind == "start" and not self.shortened and isinstance(
                event.get("init_timeout_s"), (int, float)):
            # HCCL: the worker's init deadline outlasts HCCL_CONNECT_TIMEOUT
            longer = number(event.get("init_timeout_s")) - self.run.options.init_timeout
            self.deadline = max(self.deadline,
                                self.start + self.startup_s + self.stages + longer + 5.0)

    def _on(self, node: str, event: Event | None) -> None:
        """One item of the inbox."""
        if event is None:  # a channel ended
            self.open_channels -= 1
            self._grace()
            return
        kind = event.get("event")
        rank = event.get("rank")
        if kind == "exit":
            code = event.get("code")
            self.exit_codes[integer(event.get("exit_rank"))] = code if isinstance(code, int) \
                else None
            if code != C.EXIT_OK:
                self._grace()
        elif kind == "stack":
            _keep_stack(self.run, event)
        elif kind in ("workers", "reaped"):
            return
        elif isinstance(rank, int) and rank in self.events:
            self._rank_event(event)
        elif kind == "error":  # the supervisor itself
            self.run.start_errors[node] = str(event.get("message"))
            self._grace(shorten=False)

    def pump(self) -> None:
        """Until every channel has ended, or the deadline has passed and the stacks asked for
        are in; then, with ranks still running, their stacks first."""
        while self.open_channels and (time.monotonic() < self.deadline
                                      or self._waiting_for_stacks()):
            try:
                self._on(*self.inbox.get(timeout=0.2))
            except queue.Empty:
                continue
        if self.open_channels and self.asked_at is None and self.channels:
            # our own deadline passed with ranks still running: their stacks first
            self._ask_stacks()
            while self._waiting_for_stacks():
                try:
                    self._stack_only(*self.inbox.get(timeout=0.2))
                except queue.Empty:
                    continue

    def _stack_only(self, node: str, event: Event | None) -> None:
        if event is not None and event.get("event") == "stack":
            _keep_stack(self.run, event)

    def stop(self) -> None:
        """Every supervisor told to stop, and whether it confirmed that its workers are gone;
        then the stacks relayed while the channels closed."""
        run = self.run
        stopped = self.cluster.pool.map(lambda ch: ch.stop(), self.channels.values())
        confirmed = dict(zip(self.channels, stopped, strict=False))
        for node, ch in self.channels.items():
            run.stderr[node] = list(ch.stderr) + list(ch.text)
            run.channel_exit[node] = ch.exit_status
            if confirmed.get(node) is not True:
                run.unconfirmed[node] = dict(ch.pids)
        while True:
            try:
                self._stack_only(*self.inbox.get_nowait())
            except queue.Empty:
                break

    def fold(self) -> None:
        """The report of the run, from every rank's events."""
        run = self.run
        run.report = C.collect(self.events, self.ranks, self.exit_codes)
        for rank, evs in self.events.items():  # a rank at its own watchdog says whom it waits on
            for ev in evs:
                if ev.get("event") == "error" and isinstance(ev.get("sockets"), dict):
                    run.sockets[rank] = S.Sockets.read(ev.get("sockets"))
        budget = run.options.budget_s
        if run.report.stopped is not None and budget is not None:
            said = run.report.stopped.describe()
            run.report.stopped = dataclasses.replace(run.report.stopped, budget_s=budget)
            run.report.message = run.report.message.replace(said, run.report.stopped.describe())
        for ch in self.channels.values():
            run.report.pids.update(ch.pids)
        run.seconds = time.monotonic() - self.start


def _specs(ranks: Sequence[rk.Rank], run: RemoteRun, env: Mapping[str, str],
           visible: Mapping[str, str] | None) -> dict[str, dict[str, object]]:
    """Each node's supervisor spec: the environment, and each of its ranks' worker argv."""
    by_node: dict[str, list[rk.Rank]] = {}
    for r in ranks:
        by_node.setdefault(r.host, []).append(r)
    return {node: {"env": dict(env), "workers": [
        {"rank": r.rank,
         "argv": rk.worker_argv("", "", r, len(ranks), run.master_addr, run.port, run.options,
                                visible_devices=(visible or {}).get(node, ""),
                                local_size=len(node_ranks) if visible else 0)[2:]}
        for r in node_ranks]} for node, node_ranks in by_node.items()}


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
    run = RemoteRun(report=C.CollectiveReport(len(ranks), list(ranks)),
                    nodes=list(dict.fromkeys(r.host for r in ranks)), master=ranks[0].host,
                    master_addr=master_addr, port=port, options=options,
                    python=cluster.settings.remote_python)
    one = _Run(cluster, run, ranks, startup_s, grace_s)
    try:
        one.open(_specs(ranks, run, env or {}, visible), exports_word)
        one.pump()
    finally:
        one.stop()
    one.fold()
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


def _keep_stack(run: RemoteRun, event: Event) -> None:
    rank = event.get("stack_rank")
    if not isinstance(rank, int):
        return
    if event.get("text"):
        run.stacks[rank] = run.stacks.get(rank, "") + text(event.get("text"))
    if event.get("native"):
        run.native[rank] = run.native.get(rank, "") + text(event.get("native"))
    if event.get("native_pending"):
        run.natives_due.add(rank)
    if event.get("native_done"):
        run.natives_due.discard(rank)
    if isinstance(event.get("sockets"), dict) and event.get("sockets"):
        run.sockets[rank] = S.Sockets.read(event.get("sockets"))


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
    """C1: one rank per slot on every node, rendezvous on the rank-0 node (PortsBlocked: not
    run, the network checks found ports between them blocked)."""
    for node in cluster.names:
        cluster.require(node)
    blocked = f3_blocked(cluster, cluster.names)
    if blocked:
        raise PortsBlocked(blocked)
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


def run_pairs(cluster: Cluster) -> PairRuns:
    """C2: every unordered pair of nodes (or those of --pairs), every launch slot of both nodes
    (:func:`launch_layout`: one rail per GPU on multi-rail nodes), at the largest size only;
    pairs are scheduled in circle rounds of disjoint pairs, each round's pairs at once, with the
    rendezvous on alternating sides (:func:`pair_master`)."""
    # all pairs, or those of --pairs
    return _run_rounds(cluster, pairs_mod.node_pair_rounds(cluster))


def _run_rounds(cluster: Cluster, rounds: Sequence[Sequence[Pair]]) -> PairRuns:
    """Each round's pairs at once (a round's pairs are disjoint), the rounds one after the
    other; results keyed in hostfile order, as C2's tests are (a round may name b first)."""
    backend = cluster.settings.collective.backend
    options = worker_options(cluster, backend, pb.pair_sizes(chosen_sizes(cluster)),
                             shares(cluster)[1])
    env = worker_env(_launcher_env())
    exports_word = launch_exports_word(cluster)
    slots = dict(launch_layout(cluster))
    results: PairRuns = {}
    order = {name: i for i, name in enumerate(cluster.names)}
    for round_pairs in rounds:
        def one(item: tuple[int, Pair]) -> RemoteRun:
            i, (a, b) = item
            for node in (a, b):
                if cluster.login_error(node) is not None:
                    raise NodeDown(node)
            blocked = f3_blocked(cluster, [a, b])
            if blocked:
                raise PortsBlocked(blocked)
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
            ) -> tuple[dict[Pair, confirmation.Retry], PairRuns]:
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

    def __init__(self, blocked: Sequence[C.BlockedPair]) -> None:
        super().__init__("; ".join(f"{b.target} takes no connection from {b.source}"
                                   for b in blocked))
        self.blocked = list(blocked)


def f3_blocked(cluster: Cluster, nodes: Sequence[str]) -> list[C.BlockedPair]:
    """The ordered pairs of `nodes` that this session's port matrix (if F3 ran) shows blocked
    on every tested port, in hostfile order (only a pair some port failed can be: the
    matrix keeps those apart)."""
    matrix = cluster.cached(PORT_MATRIX)
    if matrix is None:
        return []
    found = [(a, b, r) for a in nodes for b in nodes
             if a != b and (r := matrix.reach(a, b)) is not None and r.blocked]
    return [C.BlockedPair(a, b, tuple((t.port or 0, t.words) for t in r.failed),
                          ports.pair_item(cluster, ids.HIGH_PORTS, a, b)) for a, b, r in found]


class NodeDown(Exception):
    def __init__(self, node: str) -> None:
        self.node = node
        super().__init__(f"{node} unreachable: see {ids.LOGIN.of(node)}")


# --- what a failure is read against ----------------------------------------------------------


def ports_seen(cluster: Cluster, nodes: Sequence[str]) -> C.PortsSeen:
    """What the F checks found this session of the high ports into and out of ``nodes``."""
    matrix = cluster.cached(PORT_MATRIX)
    if matrix is None:
        return C.PortsSeen(False)
    wanted = set(nodes)
    return C.PortsSeen(True, tuple(
        C.ClosedPort(src, dst, t.port or 0, t.words)
        for src, row in matrix.results.items() for dst, r in row.items()
        if src != dst and {src, dst} & wanted for t in r.failed))


def transports(run: RemoteRun) -> dict[str, nccllog.Transports]:
    """The transports NCCL chose on each node of the run (its ranks' NCCL_DEBUG=INFO lines)."""
    return nccllog.by_node(run.report.transport_lines, run.report.ranks)


def socket_fallbacks(cluster: Cluster, run: RemoteRun) -> dict[str, str]:
    """Nodes with active RDMA ports (section R's probe) whose ranks ended on TCP sockets, with
    NCCL's reason (nccllog.socket_fallbacks); not where sockets were chosen on purpose
    (NCCL_IB_DISABLE, NCCL_NET=Socket in the node's or the launcher's environment)."""
    import os

    rdma_nodes = {}
    for host, t in transports(run).items():
        if not t.on_sockets:
            continue
        env = {**cluster.base(host).env, **{k: v for k, v in os.environ.items()
                                             if k.startswith("NCCL_")}}
        if env.get("NCCL_IB_DISABLE", "0").strip() not in ("", "0") or \
                env.get("NCCL_NET", "").strip().lower() == "socket":
            continue  # sockets on purpose
        up = rdma_ports_up(cluster, host)
        if up:
            rdma_nodes[host] = ", ".join(up)
    return nccllog.socket_fallbacks(transports(run), rdma_nodes)


def rdma_ports_up(cluster: Cluster, node: str) -> list[str]:
    """The node's active RDMA ports (section R's fabric probe; [] where it cannot be read)."""
    from cluster_tests.core.cluster import ProbeError
    from cluster_tests.judge.health import rdma

    try:
        ports = cluster.probe(node, rdma.FABRIC).rdma.ports
    except ProbeError:
        return []
    return [p.name for p in ports if p.up]


def accelerators(cluster: Cluster, run: RemoteRun) -> dict[str, tuple[str, str]]:
    """The run's nodes as A1 lists their accelerators: node -> (kind, description), for an
    automatic choice of backend only (an explicit --backend is the user's: {})."""
    if run.options.backend != "auto":
        return {}
    from cluster_tests.measure import accel

    kinds: dict[str, tuple[str, str]] = {}
    for node in run.nodes:
        try:
            inv = accel.inventory(cluster, node)
        except Exception:  # noqa: BLE001, S112 - A1 says why; the worker's own check still ran
            continue
        kinds[node] = (inv.kind, inv.describe())
    return kinds


# --- baselines and the summary ---------------------------------------------------------------


def record(run: RemoteRun) -> dict[str, object]:
    """This run as a baseline document (``--busbw-record``, read back by ``--busbw-baseline``)."""
    rep = run.report
    return {
        "kind": "cluster_tests.allreduce", "backend": rep.backend, "world_size": rep.world_size,
        "nodes": run.nodes, "versions": rep.versions, "timed": rep.timed,
        "rows": [{"size_bytes": r.size_bytes, "time_us": r.time_us, "algbw_GBps": r.algbw_GBps,
                  "busbw_GBps": r.busbw_GBps, "wrong": r.wrong} for r in rep.rows],
    }


def load_baseline(path: str) -> dict[str, object]:
    """A baseline document written by ``--busbw-record`` (OSError, ValueError: unreadable)."""
    got = json.loads(Path(path).expanduser().read_text())
    if not isinstance(got, dict):
        raise ValueError(f"expected a JSON object, got {type(got).__name__}")
    return got
