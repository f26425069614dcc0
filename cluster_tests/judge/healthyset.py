"""The nodes the user can launch on right now: the largest set on which every check the launch
depends on passes, from the run's Problems (``hostfile.healthy``).

What leaving nodes out can do about a cause is its scope (core/testids.py's ``Scope``: each
check's own, or the Problem's where it differs; docs/CHECKLIST.md, "What the launch needs"): a
cause on the launcher or in what it exports to every rank (``Scope.no_subset``) leaves no set
of nodes that launches, and no file is offered until it is fixed; a node check the launch
depends on drops its node; a pair the launch depends on drops one of its two nodes (the
fewest nodes that break every bad pair: a minimum vertex cover, exact while small); rank 0's
own legs (pdsh's ssh from rank 0, S4 from rank 0) drop the target; a check about rank 0 as
rank 0 (the rendezvous port, the master address, pdsh and the rehearsal's launch site) makes
another node rank 0. Rank 0 stays when it is healthy; otherwise the first healthy node in
hostfile order becomes rank 0, and the checks that only rank 0 runs must be rerun with the new
file.

Pure: Problems and numbers in, a :class:`Healthy` out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.core.testids import Scope
from cluster_tests.judge.problem import Problem

#: The checks that run from or about rank 0 alone: with another rank 0 they must be rerun.
RANK0_ONLY = (ids.MASTER_ADDR, ids.MASTER_PORT, ids.PDSH_INSTALLED, ids.PDSH,
              ids.LAUNCH_REHEARSAL)


def scope(problem: Problem) -> Scope:
    """Where `problem`'s cause lives: its own scope, else its check's (core/testids.py), else
    what its nodes say (a site check's red: its node, or its pair)."""
    check = ids.BY_NAME.get(problem.check.split("[", 1)[0])
    got = problem.scope or (check.scope if check is not None else None)
    if got is None:
        got = Scope.PAIR if len(problem.nodes) == 2 else Scope.NODE if problem.nodes \
            else Scope.NOT_NEEDED
    if got == Scope.PAIR and len(problem.nodes) == 2 and problem.nodes[0] == problem.nodes[1]:
        return Scope.AS_RANK0 if check == ids.MASTER_PORT else Scope.NODE
    return got


@dataclass
class Healthy:
    """Rank 0 of the healthy file, the nodes kept (rank 0 first, then hostfile order), and each
    excluded node with why (the test ids and causes that exclude it)."""

    rank0: str | None
    kept: list[str]
    excluded: dict[str, list[str]] = field(default_factory=dict)
    rank0_moved_from: str | None = None
    #: nodes dropped only to keep the count a multiple of --world-multiple
    trimmed: list[str] = field(default_factory=list)
    #: the causes no set of nodes avoids (on the launcher, or in what it exports to every rank):
    #: while any holds, no node is launched on and no healthy file is offered
    waits_for: list[Problem] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether the launch must change: nodes left out, or another rank 0."""
        return bool(self.excluded) or self.rank0_moved_from is not None

    @property
    def launchable(self) -> bool:
        """Whether leaving nodes out gives a launch that works: some node is kept, and no cause
        holds that no set of nodes avoids."""
        return bool(self.kept) and not self.waits_for


def _cover(nodes: Sequence[str], edges: list[tuple[str, str]], pinned: str) -> set[str]:
    """The fewest nodes (never `pinned`) whose removal breaks every edge; ties go to the nodes
    later in the hostfile. Exact for up to 16 candidate nodes, greedy beyond."""
    forced = {b if a == pinned else a for a, b in edges if pinned in (a, b)}
    rest = [(a, b) for a, b in edges
            if a not in forced and b not in forced and pinned not in (a, b)]
    if not rest:
        return forced
    cand = [n for n in nodes if any(n in e for e in rest)]
    order = {n: i for i, n in enumerate(nodes)}
    if len(cand) <= 16:
        for k in range(1, len(cand) + 1):
            best = None
            # later nodes first, so that ties keep the nodes at the top of the hostfile
            for combo in itertools.combinations(sorted(cand, key=lambda n: -order[n]), k):
                s = set(combo)
                if all(a in s or b in s for a, b in rest):
                    best = s
                    break
            if best is not None:
                return forced | best
    chosen: set[str] = set()
    left = list(rest)
    while left:
        degree: dict[str, int] = {}
        for a, b in left:
            degree[a] = degree.get(a, 0) + 1
            degree[b] = degree.get(b, 0) + 1
        pick = max(degree, key=lambda n: (degree[n], order[n]))
        chosen.add(pick)
        left = [(a, b) for a, b in left if pick not in (a, b)]
    return forced | chosen


def healthy(nodes: Sequence[str], problems: Iterable[Problem], *, world_multiple: int = 1,
            slowness: Mapping[str, float] | None = None) -> Healthy:
    """The largest set of `nodes` the launch can use given the run's `problems` (see the module
    docstring). `slowness`: a number per node, larger is slower (the run's own measurements),
    for trimming the count to a multiple of `world_multiple`."""
    problems = list(problems)
    why: dict[str, list[str]] = {}

    def note(node: str, p: Problem) -> None:
        text = f"{p.check or p.item}: {p.cause}"
        if text not in why.setdefault(node, []):
            why[node].append(text)

    waits_for = [p for p in problems if scope(p).no_subset]
    if waits_for:
        return Healthy(None, [], waits_for=waits_for)
    dead: set[str] = set()
    not_rank0: set[str] = set()
    for p in problems:
        kind = scope(p)
        if p.pairs:
            continue  # its pairs are edges below
        if kind == Scope.NODE and p.nodes:
            for n in (*p.nodes, *p.breaks):
                if n != ids.LAUNCHER:
                    dead.add(n)
                    note(n, p)
        elif kind == Scope.AS_RANK0 and p.nodes:
            not_rank0.add(p.nodes[0])
            note(p.nodes[0], p)
        elif len(p.nodes) == 2 and p.nodes[0] == ids.LAUNCHER and kind != Scope.NOT_NEEDED:
            dead.add(p.nodes[1])  # pdsh from the launcher cannot reach the node
            note(p.nodes[1], p)
        elif len(p.nodes) == 2 and p.nodes[0] == p.nodes[1] and kind != Scope.NOT_NEEDED:
            if kind == Scope.PAIR:
                dead.add(p.nodes[0])
            else:  # a node that cannot reach itself as rank 0 would (ssh, pdsh, its own name)
                not_rank0.add(p.nodes[0])
            note(p.nodes[0], p)
    alive = [n for n in nodes if n not in dead]
    original = nodes[0] if nodes else None
    rank0 = next((n for n in alive if n not in not_rank0), None)
    if rank0 is None:
        return Healthy(None, [], {n: why.get(n, ["cannot be rank 0"]) for n in nodes},
                       original)
    edges: list[tuple[str, str]] = []
    edge_problems: dict[tuple[str, str], list[Problem]] = {}
    for p in problems:
        for a, b in p.pairs:  # a node's cause that breaks pairs (its firewall)
            if a != b and ids.LAUNCHER not in (a, b):
                edges.append((a, b))
                edge_problems.setdefault((a, b), []).append(p)
        if len(p.nodes) != 2 or p.nodes[0] == p.nodes[1] or ids.LAUNCHER in p.nodes:
            continue
        a, b = p.nodes
        kind = scope(p)
        if kind == Scope.PAIR or (kind == Scope.FROM_RANK0 and a == rank0) or (
                kind == Scope.RANK0_PAIR and rank0 in (a, b)):
            edges.append((a, b))
            edge_problems.setdefault((a, b), []).append(p)
    edges = [(a, b) for a, b in edges if a in alive and b in alive]
    cover = _cover(alive, edges, rank0)
    for (a, b), ps in edge_problems.items():
        for n in (a, b):
            if n in cover:
                for p in ps:
                    note(n, p)
    kept = [n for n in alive if n not in cover]
    trimmed: list[str] = []
    if world_multiple > 1 and len(kept) % world_multiple:
        slow = dict(slowness or {})
        order = {n: i for i, n in enumerate(nodes)}
        extra = len(kept) % world_multiple
        candidates = sorted((n for n in kept if n != rank0),
                            key=lambda n: (-slow.get(n, 0.0), -order[n]))
        trimmed = candidates[:extra]
        for n in trimmed:
            why.setdefault(n, []).append(
                f"dropped to keep {len(kept) - extra} nodes, a multiple of --world-multiple "
                f"{world_multiple}" + (f" (the slowest: {slow[n]:.3g})" if n in slow else ""))
        kept = [n for n in kept if n not in trimmed]
    kept = [rank0] + [n for n in kept if n != rank0]
    excluded = {n: why.get(n, []) for n in nodes if n not in kept}
    return Healthy(rank0, kept, excluded,
                   original if original != rank0 else None, trimmed)
