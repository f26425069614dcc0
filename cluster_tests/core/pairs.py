"""Which ordered node pairs the pair checks (S4, N1, F1, F3, F5, D2) run over: `--pairs`.

All N*N ordered pairs is the complete answer, and the default up to `AUTO_ALL_MAX` nodes.  Beyond
that the pair items outgrow what they tell (1024 nodes are 1M pairs per pair check, each a
pytest item with its own report), so the default becomes ``matrix``: the ring, except for the
connectivity checks, which still measure every pair:

* ``all``: every ordered pair, self pairs included (a -> a: pdsh from a node to itself).
* ``ring``: every node to its successor AND to its predecessor in hostfile order (2N pairs; a
  single node: itself).  Why both directions: NCCL's ring sends a -> succ(a), but its channels
  also run the reversed ring, its trees pair nodes the other way round, and a firewall that
  drops only inbound connections (PITFALLS 9) shows only when every node both connects and
  accepts.  Every node is a source twice and a target twice.  Not in the ring, because other
  checks already cover them in O(N): rank 0 -> every node, itself included (what
  `deepspeed --hostfile` does through pdsh: S5 runs that very pdsh from rank 0 and from the
  launcher), every node -> rank 0's rendezvous port (F2), and self pairs (a node's loopback
  ssh matters only where pdsh starts, which S5 covers).  A star from rank 0 would also give
  rank 0 N targets to probe (1024 ssh logins on one node) and C2 N-1 rounds.
* ``sample:K[:SEED]``: the ring plus K other ordered pairs drawn at random with SEED (default 0),
  so the same command tests the same pairs again; change the seed to look elsewhere.
* ``matrix``: the ring for every pair check, except the connectivity checks marked
  :func:`per_node` (F1, F3: what NCCL's rings and trees need between every two ranks).  Those
  measure every ordered pair (each node connects to all its peers in its one port-matrix
  probe) and report per node, two items each: ``node3->*`` (node3's connections to every
  peer) and ``*->node3`` (every peer's into node3).  A failing pair is red on the item of the
  node whose side is at fault and blocked (naming that red) on the other, so it is named under
  both nodes, once.  2N items instead of N*N, and ``-k node3`` still selects every pair that
  involves node3.  What ``auto`` becomes beyond ``AUTO_ALL_MAX`` nodes.

Pure functions, tested in tests/unit/test_pairs.py; the plugin parametrizes `pair` with
`select(names, spec)` and the probes ask `targets_of(cluster, a)`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from cluster_tests.core.memokey import MemoKey

AUTO_ALL_MAX = 32  # "auto": all pairs up to this many nodes (32*32 = 1024 pairs), matrix beyond
ANY = "*"  # the other end of a per-node item of a per_node check: node3->* and *->node3
F = TypeVar("F")
MEMO_KEY: MemoKey[Selection] = MemoKey("pairs", "selection")
# {test function name: sources of its collected pairs}
SOURCES_KEY: MemoKey[dict[str, list[str]]] = MemoKey("pairs", "collected_sources")


class NodeList(Protocol):
    """What the pair functions read of a cluster: its node names (core.cluster.Cluster, or a
    stand-in in tests and bench); the run's selection comes from its ``cached`` memo when it
    has one."""

    @property
    def names(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class PairSpec:
    mode: str  # auto | all | ring | sample | matrix
    k: int = 0
    seed: int = 0

    def resolved(self, n_nodes: int) -> PairSpec:
        """"auto" made concrete for a cluster of n_nodes."""
        if self.mode != "auto":
            return self
        return PairSpec("all" if n_nodes <= AUTO_ALL_MAX else "matrix")

    def describe(self) -> str:
        if self.mode == "sample":
            return f"sample:{self.k}:{self.seed}"
        return self.mode


def parse_spec(value: str) -> PairSpec:
    """`--pairs` value: auto, all, ring, matrix or sample:K[:SEED]; ValueError otherwise."""
    v = str(value).strip().lower()
    if v in ("auto", "all", "ring", "matrix"):
        return PairSpec(v)
    if v.startswith("sample:"):
        parts = v.split(":")
        if len(parts) not in (2, 3):
            raise ValueError("sample takes sample:K or sample:K:SEED")
        try:
            k = int(parts[1])
            seed = int(parts[2]) if len(parts) == 3 else 0
        except ValueError:
            raise ValueError("sample:K[:SEED] wants whole numbers") from None
        if k < 0:
            raise ValueError("sample:K wants K >= 0")
        return PairSpec("sample", k, seed)
    raise ValueError("must be auto, all, ring, matrix or sample:K[:SEED]")


def ring_pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    """a -> succ(a) and succ(a) -> a for every a; in all-pairs order, no duplicates."""
    n = len(names)
    if n == 0:
        return []
    if n == 1:
        return [(names[0], names[0])]
    wanted: set[tuple[int, int]] = set()
    for i in range(n):
        j = (i + 1) % n
        wanted.add((i, j))
        wanted.add((j, i))
    return [(names[i], names[j]) for i, j in sorted(wanted)]


def select(names: Sequence[str], spec: PairSpec) -> list[tuple[str, str]]:
    """The ordered pairs to check, in a stable order (source-major, hostfile order)."""
    names = list(names)
    n = len(names)
    spec = spec.resolved(n)
    if spec.mode == "all":
        return [(a, b) for a in names for b in names]
    ring = ring_pairs(names)
    if spec.mode in ("ring", "matrix"):
        return ring
    index = {name: i for i, name in enumerate(names)}
    chosen = {index[a] * n + index[b] for a, b in ring}
    extra = min(spec.k, n * n - len(chosen))
    if extra > 0:
        rng = random.Random(spec.seed)
        # draw without materializing the N*N pairs: distinct indices, ring members skipped
        draw = rng.sample(range(n * n), min(n * n, extra + len(chosen)))
        added = 0
        for idx in draw:
            if idx not in chosen:
                chosen.add(idx)
                added += 1
                if added == extra:
                    break
    return [(names[idx // n], names[idx % n]) for idx in sorted(chosen)]


def unordered(names: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The distinct unordered pairs of two different nodes among `pairs`, as (a, b) with a
    before b in `names`, in all-pairs order (C2's pairs: one all-reduce covers both directions)."""
    index = {name: i for i, name in enumerate(names)}
    keys = sorted({(min(index[a], index[b]), max(index[a], index[b])) for a, b in pairs if a != b})
    return [(names[i], names[j]) for i, j in keys]


def rounds(pairs: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Pairs grouped into rounds of disjoint pairs (no node twice in a round), so that each
    round can run at once: greedy, first round that has room (a ring takes 2 or 3 rounds)."""
    out: list[list[tuple[str, str]]] = []
    busy: list[set[str]] = []
    for a, b in pairs:
        for r, used in enumerate(busy):
            if a not in used and b not in used:
                out[r].append((a, b))
                used.update((a, b))
                break
        else:
            out.append([(a, b)])
            busy.append({a, b})
    return out


def per_node(check: F) -> F:
    """Marks a pair check that measures every ordered pair in bulk (one probe per node): under
    ``--pairs matrix`` it is parametrized per node (``node->*``, ``*->node``), see the module
    docstring."""
    check.per_node_pairs = True  # type: ignore[attr-defined]
    return check


def is_per_node(check: object) -> bool:
    return bool(getattr(check, "per_node_pairs", False))


def node_items(names: Sequence[str]) -> list[tuple[str, str]]:
    """The items of a per_node check under ``--pairs matrix``: each node's own connections
    (``a->*``), then each node's incoming ones (``*->b``)."""
    return [(a, ANY) for a in names] + [(ANY, b) for b in names]


def expand(pair: tuple[str, str], names: Sequence[str]) -> list[tuple[str, str]]:
    """The ordered pairs a per-node item stands for (a pair stands for itself)."""
    a, b = pair
    if b == ANY:
        return [(a, x) for x in names]
    if a == ANY:
        return [(x, b) for x in names]
    return [pair]


def targets_by_source(pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for a, b in pairs:
        out.setdefault(a, []).append(b)
    return out


@dataclass(frozen=True)
class Selection:
    spec: PairSpec  # resolved (never "auto")
    requested: str  # as given ("auto" included)
    pairs: tuple[tuple[str, str], ...]
    targets: dict[str, list[str]]
    #: the sources whose selected pairs reach each node (the reverse of `targets`)
    sources: dict[str, list[str]]

    @property
    def per_node(self) -> bool:
        """The per_node checks measure every pair and report per node (``--pairs matrix``)."""
        return self.spec.mode == "matrix"

    @classmethod
    def make(cls, names: Sequence[str], spec: PairSpec) -> Selection:
        pairs = select(names, spec)
        return cls(spec.resolved(len(names)), spec.describe(), tuple(pairs),
                   targets_by_source(pairs), targets_by_source([(b, a) for a, b in pairs]))

    def describe(self, n_nodes: int) -> str:
        auto = " (auto)" if self.requested == "auto" else ""
        every = (f"; F1/F3: all {n_nodes * n_nodes}, reported per node (node->*, *->node)"
                 if self.per_node else "")
        return (f"pairs: {self.spec.describe()}{auto}, {len(self.pairs)} of {n_nodes * n_nodes} "
                f"ordered pairs{every}")

    def meta(self, n_nodes: int) -> dict[str, object]:
        return {"mode": self.spec.describe(), "requested": self.requested,
                "pairs": len(self.pairs), "all_pairs": n_nodes * n_nodes,
                **({"per_node": True} if self.per_node else {})}


def selection(cluster: NodeList) -> Selection | None:
    """The run's selection (set by the plugin at configure time), None outside a run (or for a
    stand-in cluster without a memo)."""
    cached = getattr(cluster, "cached", None)
    return cached(MEMO_KEY) if cached is not None else None


def targets_of(cluster: NodeList, source: str, per_node: bool = False) -> list[str]:
    """The nodes `source` must reach in the selected pairs (every node when none was set);
    `per_node`: for a per_node check's measurement (every node under ``--pairs matrix``)."""
    sel = selection(cluster)
    if sel is None or (per_node and sel.per_node):
        return list(cluster.names)
    return list(sel.targets.get(source, []))


def names_to_resolve(cluster: NodeList, node: str) -> list[str]:
    """The hostfile names `node` resolves in its base probe (N1, N2, F5's routes, H2), in
    hostfile order.  Every name where every pair is checked (``--pairs all``, and on rank 0,
    whose pdsh resolves every host); otherwise what the launch and the selected pairs ask of
    `node`: rank 0's name, its own, its pairs' targets and the sources whose pairs reach it.
    So a 4096-node ring makes about 5 lookups per node instead of 4096 (16 M in all: the
    launcher's memory, and a DNS server's queries on a real cluster)."""
    names = cluster.names
    sel = selection(cluster)
    if sel is None or sel.spec.mode == "all" or not names or node == names[0]:
        return list(names)
    want = {names[0], node, *sel.targets.get(node, ()), *sel.sources.get(node, ())}
    return [n for n in names if n in want]


def normalize(value: str) -> str:
    """The option's type: validates, and returns the canonical spelling."""
    spec = parse_spec(value)
    if spec.mode == "auto":
        return "auto"
    return spec.describe() if spec.mode == "sample" else spec.mode


def collected_sources(cluster: NodeList, test: str) -> list[str]:
    """The sources of the pairs that `test` will run over in this session (empty if unknown)."""
    cached = getattr(cluster, "cached", None)
    got = (cached(SOURCES_KEY) if cached is not None else None) or {}
    return list(got.get(test, []))


def node_pairs(cluster: NodeList) -> list[tuple[str, str]]:
    """C2's unordered pairs (a before b in the hostfile) under the run's --pairs: every pair when
    all pairs are selected (or no selection is known), else those of the selected pairs."""
    names = list(cluster.names)
    sel = selection(cluster)
    if sel is None or sel.spec.mode == "all":
        return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    return unordered(names, sel.pairs)


def node_pair_rounds(cluster: NodeList) -> list[list[tuple[str, str]]]:
    """C2's schedule: rounds of disjoint pairs.  All pairs: the circle method (N-1 rounds, the
    fewest); a ring or a sample: greedy rounds of just those pairs."""
    sel = selection(cluster)
    if sel is None or sel.spec.mode == "all":
        from cluster_tests.judge.collective.pairbw import circle_schedule

        return circle_schedule(list(cluster.names))
    return rounds(node_pairs(cluster))
