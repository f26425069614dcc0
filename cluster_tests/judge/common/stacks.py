"""Where every rank was when a deadline passed: faulthandler dumps, parsed and grouped (pure).

The workers (node/allreduce.py) register ``faulthandler`` on SIGUSR1 (all threads) and dump
their stacks at their own stage deadline; the supervisor relays each dump as a ``stack`` event.
This module reads that text::

    Thread 0x00007f579fa246c0 (most recent call first):
      File ".../threading.py", line 331 in wait
      ...
    Current thread 0x00007f57a0895b80 (most recent call first):
      File ".../torch/distributed/distributed_c10d.py", line 3252 in all_reduce
      File "allreduce.py", line 619 in timed_loop
      ...

picks each rank's main thread (the one whose outermost frame is ``<module>``), says where it was
("in all_reduce (allreduce.py timed_loop)"), groups the ranks by that place and names the
node(s) whose ranks are not where the most ranks are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

_HEAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):"
                   r"|^Stack \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>\S+)')

#: Worker scripts: the innermost of their frames says which step of ours was running.
WORKER_FILES = ("allreduce.py", "train_smoke.py")
#: Calls worth naming, innermost first wins (torch.distributed and the store).
KNOWN_CALLS = ("all_reduce", "barrier", "broadcast", "all_gather", "reduce_scatter",
               "init_process_group", "new_group", "destroy_process_group", "initialize",
               "init_distributed", "backward", "step", "wait", "get", "connect", "rendezvous")


#: Our own dump machinery (a rank that dumps itself before it ends): not where it was.
DUMP_FUNCS = ("dump_own_stack",)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    @property
    def short(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} {self.func}"


@dataclass
class Thread:
    ident: str
    current: bool
    frames: list[Frame] = field(default_factory=list)  # most recent call first


def parse(text: str) -> list[Thread]:
    """The threads of one faulthandler dump (several dumps in a row: every thread of each)."""
    threads: list[Thread] = []
    for line in text.splitlines():
        head = _HEAD.match(line)
        if head:
            threads.append(Thread(head.group(1) or "", line.startswith(("Current", "Stack"))))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            if frame["func"] in DUMP_FUNCS and not threads[-1].frames:
                continue
            threads[-1].frames.append(Frame(frame["file"], int(frame["line"]), frame["func"]))
    return [t for t in threads if t.frames]


def main_thread(threads: Sequence[Thread]) -> Thread | None:
    """The thread running the script: its outermost frame is a ``<module>``; else the current
    one; else the first. When one text holds several dumps, the last one's."""
    mains = [t for t in threads if t.frames[-1].func == "<module>"]
    if mains:
        return mains[-1]
    current = [t for t in threads if t.current]
    return current[-1] if current else (threads[-1] if threads else None)


def where(thread: Thread | None) -> str:
    """'in all_reduce (allreduce.py timed_loop)': the innermost known call, and the
    innermost frame of our worker script (the step of ours that made it)."""
    if thread is None:
        return "no stack"
    module = next((f for f in thread.frames if f.func == "<module>"), None)
    if module is not None and module is not thread.frames[-1] and \
            module.file.rsplit("/", 1)[-1] not in WORKER_FILES and module.file != "<string>":
        # still importing (torch, torch_npu, a driver binding): the module's own frame
        name = module.file.rsplit("/", 1)[-1].removesuffix(".py")
        if name == "__init__":
            name = module.file.rsplit("/", 2)[-2]
        return f"importing {name}"
    ours = next((f for f in thread.frames
                 if f.file.rsplit("/", 1)[-1] in WORKER_FILES and f.func != "<module>"), None)
    call = next((f for f in thread.frames if f.func in KNOWN_CALLS and f is not ours), None)
    if call is None and ours is not None and ours.func in KNOWN_CALLS:
        call = ours
    if call is None:
        call = thread.frames[0]
    # no line numbers: a rank polling in a loop is at one line or the next
    if ours is None or ours is call:
        return f"in {call.func} ({call.file.rsplit('/', 1)[-1]})"
    return f"in {call.func} ({ours.file.rsplit('/', 1)[-1]} {ours.func})"


@dataclass
class Group:
    where: str
    ranks: list[int]
    nodes: list[str]
    text: str  # one rank's dump, as an example of the group
    texts: dict[int, str] = field(default_factory=dict)  # every rank's dump


@dataclass
class Grouped:
    groups: list[Group]
    missing: list[int]  # ranks with no stack (their node did not answer, or they had ended)
    differ: list[str]  # nodes none of whose ranks are where most ranks are

    def lines(self, hosts: Mapping[int, str]) -> list[str]:
        out = [f"{describe(g.ranks, hosts)} {g.where}" for g in self.groups]
        if len(self.groups) == 1 and len(self.groups[0].ranks) > 1:
            out.append("every rank was in the same place: the stacks single out no node")
        if self.missing:
            out.append(f"{describe(self.missing, hosts)}: no stack (ended before, or the node did "
                       f"not answer)")
        return out


def describe(ranks: Sequence[int], hosts: Mapping[int, str]) -> str:
    """'ranks 0,1 (node1), rank 2 (node3)'."""
    by_node: dict[str, list[int]] = {}
    for r in sorted(ranks):
        by_node.setdefault(hosts.get(r, "?"), []).append(r)
    parts = [f"{'rank' if len(rs) == 1 else 'ranks'} {','.join(map(str, rs))} ({node})"
             for node, rs in by_node.items()]
    return ", ".join(parts)


def group(stacks: Mapping[int, str], hosts: Mapping[int, str],
          ranks: Sequence[int] | None = None) -> Grouped:
    """Ranks grouped by where their main thread was, the biggest group first; ``differ``: the
    nodes with no rank in the biggest group (none when all are in one group, or no group is
    bigger than the others)."""
    by_where: dict[str, Group] = {}
    for rank in sorted(stacks):
        text = stacks[rank]
        place = where(main_thread(parse(text)))
        g = by_where.get(place)
        if g is None:
            g = by_where[place] = Group(place, [], [], text)
        g.ranks.append(rank)
        g.texts[rank] = text
        node = hosts.get(rank, "?")
        if node not in g.nodes:
            g.nodes.append(node)
    groups = sorted(by_where.values(), key=lambda g: (-len(g.ranks), g.ranks[0]))
    missing = [r for r in (ranks if ranks is not None else []) if r not in stacks]
    differ: list[str] = []
    if len(groups) > 1 and len(groups[0].ranks) > len(groups[1].ranks) or (
            len(groups) > 1 and len(groups[0].nodes) > len(groups[1].nodes)):
        main_nodes = set(groups[0].nodes)
        for g in groups[1:]:
            differ += [n for n in g.nodes if n not in main_nodes and n not in differ]
    return Grouped(groups, missing, differ)


# --- whom the ranks were still connecting to ---------------------------------------------------


@dataclass(frozen=True)
class Sockets:
    """A rank's TCP connections when its stack was taken (node/allreduce.py tcp_peers): the
    connects still in SYN_SENT ('ip:port'), and the established ones (local port, 'ip:port')."""

    syn_sent: tuple[str, ...] = ()
    established: tuple[tuple[int, str], ...] = ()

    @classmethod
    def read(cls, raw: object) -> Sockets:
        """The worker's JSON ({"syn_sent": [...], "established": [[port, 'ip:port']]}); what is
        not of that shape is left out."""
        d = raw if isinstance(raw, Mapping) else {}
        syn, est = d.get("syn_sent"), d.get("established")
        return cls(
            tuple(str(e) for e in syn) if isinstance(syn, list) else (),
            tuple((int(e[0]), str(e[1])) for e in est if isinstance(e, (list, tuple))
                  and len(e) == 2 and str(e[0]).isdigit()) if isinstance(est, list) else ())

    def as_json(self) -> dict[str, list[object]]:
        """The worker's own form (the dump's rank<R>-<node>.sockets.json)."""
        return {"syn_sent": list(self.syn_sent),
                "established": [[port, peer] for port, peer in self.established]}


@dataclass(frozen=True)
class StuckConnects:
    """The peers each rank had no connection with when its stack was taken (and the connects
    it still waited on: sockets in SYN_SENT): what the stacks of a full-mesh connect cannot
    say, since every rank of a gloo or NCCL mesh waits in the same frames whichever peer is
    missing."""

    lines: list[str]
    suspect: str | None  # the node in every missing (rank's node, peer node) pair, if one is


def stuck_connects(sockets: Mapping[int, Sockets],
                   hosts: Mapping[int, str], owners: Mapping[str, str], nodes: Sequence[str],
                   store_port: int | None = None) -> StuckConnects:
    """``sockets``: rank -> its connections (node/allreduce.py tcp_peers); ``owners``: address
    -> node; ``nodes``: the run's nodes. A rank misses every other node of the run it has no
    open connection with (the rendezvous store's port does not count: every rank has that
    one). The suspect is the node common to every (rank's node, missing node) pair, when there
    are two pairs or more: with one, either end may hold the cause."""
    lines: list[str] = []
    pairs: set[tuple[str, str]] = set()

    def owner(endpoint: str) -> tuple[str, int]:
        ip, _, port = endpoint.rpartition(":")
        return owners.get(ip.strip("[]"), ip.strip("[]")), int(port) if port.isdigit() else -1

    for rank in sorted(sockets):
        src = hosts.get(rank, "?")
        have = {src}
        for local, endpoint in sockets[rank].established:
            node, port = owner(endpoint)
            if store_port not in (port, local):  # the store's server side counts neither
                have.add(node)
        missing = [n for n in nodes if n not in have]
        waiting = [f"{owner(e)[0]} ({e})" for e in sockets[rank].syn_sent]
        if not missing and not waiting:
            continue
        pairs.update((src, n) for n in missing)
        said = []
        if waiting:
            said.append(f"still connecting to {', '.join(waiting)}, no answer")
        if missing:
            said.append(f"no connection with {', '.join(missing)}")
        lines.append(f"{describe([rank], hosts)}: {'; '.join(said)}")
    suspect = None
    if len(pairs) >= 2:
        common = set.intersection(*({a, b} for a, b in pairs))
        if len(common) == 1:
            suspect = next(iter(common))
    return StuckConnects(lines, suspect)


def where_lines(g: Grouped, stuck: StuckConnects, hosts: Mapping[int, str],
                by_stacks: Sequence[str], saved: str) -> list[str]:
    """A red's lines on where the ranks were when the deadline passed: the groups, the
    connections they missed, and the node to look at first. ``by_stacks``: the nodes the stacks
    alone single out (``g.differ`` before the connections were asked); ``saved``: where the
    dumps went (or why they could not)."""
    lines = [f"  where the ranks were when the deadline passed ({saved}):"]
    lines += [f"    {line}" for line in g.lines(hosts)]
    lines += [f"    {line}" for line in stuck.lines]
    if by_stacks:
        verb = "differs" if len(by_stacks) == 1 else "differ"
        lines.append(f"    {', '.join(by_stacks)} {verb}: its ranks are not where the others "
                     f"are: look there first")
    if stuck.suspect and (not by_stacks or list(by_stacks) == [stuck.suspect]):
        lines.append(f"    {stuck.suspect} is in every connection the ranks were missing: a "
                     f"firewall on it, or its link, drops them"
                     + ("" if by_stacks else ": look there first"))
    return lines
