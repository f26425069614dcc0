"""F5/F6's verdicts: the interfaces the libraries are told to use (NCCL/GLOO/HCCL_SOCKET_IFNAME,
NCCL's list syntax), the route between two nodes against them, and the MTU of the launch's
interface across the nodes. Pure: the facts come from measure/ifaces.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.facts import Command
from cluster_tests.judge.common.netfacts import Interface, route_device
from cluster_tests.judge.network.portjudge import NetworkCause
from cluster_tests.judge.problem import Problem, Root

SOCKET_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class IfSpec:
    """NCCL_SOCKET_IFNAME syntax (also HCCL's): comma list of prefixes; a leading `^` excludes,
    a leading `=` (after `^` if both) matches whole names.  GLOO_SOCKET_IFNAME: exact names."""

    raw: str
    names: tuple[str, ...]
    exclude: bool = False
    exact: bool = False

    def matches(self, ifname: str) -> bool:
        if self.exact:
            hit = ifname in self.names
        else:
            hit = any(ifname.startswith(p) for p in self.names)
        return hit != self.exclude

    def describe(self) -> str:
        how = ("exact names" if self.exact else "name prefixes")
        return f"{'not ' if self.exclude else ''}{how} {', '.join(self.names) or '(none)'}"


def nccl_list_prefix(value: str) -> tuple[bool, bool, str]:
    """NCCL's list syntax (NCCL_SOCKET_IFNAME, NCCL_IB_HCA): (exclude `^`, exact `=`, the rest)."""
    text = value.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    exact = text.startswith("=")
    if exact:
        text = text[1:]
    return exclude, exact, text


def parse_ifspec(value: str, var: str = "NCCL_SOCKET_IFNAME") -> IfSpec:
    text = value.strip()
    if var.startswith("GLOO"):
        return IfSpec(value, tuple(n.strip() for n in text.split(",") if n.strip()), exact=True)
    exclude, exact, text = nccl_list_prefix(text)
    return IfSpec(value, tuple(n.strip() for n in text.split(",") if n.strip()), exclude, exact)


def usable(iface: Interface) -> bool:
    return iface.up and bool(iface.ips)


def matched_interfaces(spec: IfSpec, ifaces: Mapping[str, Interface]) -> list[Interface]:
    return [i for i in ifaces.values() if spec.matches(i.name)]


def selected(spec: IfSpec, ifaces: Mapping[str, Interface]) -> list[Interface]:
    """The usable interfaces (up, with an address, not lo) `spec` selects."""
    return [i for i in matched_interfaces(spec, ifaces) if usable(i) and i.name != "lo"]


def fits(spec: IfSpec, others: Mapping[str, Mapping[str, Interface]]) -> tuple[str, ...]:
    """The nodes of `others` (node -> its interfaces) where `spec` selects a usable one."""
    return tuple(n for n, found in others.items() if selected(spec, found))


def exported_root(var: str, value: str, fits: tuple[str, ...] | None, node: str, rank0: str
                  ) -> Root | None:
    """F5's red on the rank-0 node, where a value the launch exports from there (`fits`: the
    other nodes it fits; None: the node's own environment sets it) fits no node: the same
    value reaches every rank, and the cause is rank 0's."""
    if fits != () or node == rank0:
        return None
    return Root(ids.SOCKET_IFNAME.of(rank0), f"{var}={value}, exported by the launch from "
                                             f"{rank0}, fits no node")


@dataclass(frozen=True)
class Pick:
    """A *_SOCKET_IFNAME on one node: its value as the ranks get it there (None: unset), whether
    it selects a usable interface there, whether the launch exports it from the rank-0 node."""

    value: str | None
    usable: bool
    exported: bool

    @property
    def fine(self) -> bool:
        return self.value is None or self.usable


def ifname_roots(var: str, picks: Mapping[str, Pick], rank0: str) -> list[Root]:
    """F5's red that holds the cause of a run of `var`'s backend (C1, C2) that failed, where the
    ranks of a node get a `var` that selects no usable interface there (`picks`: by node): they
    cannot even create their device. One the launch exports from the rank-0 node and that fits
    no node is the rank-0 node's red (F5 names it there, the others cite it)."""
    for node, pick in picks.items():
        if pick.fine:
            continue
        where = rank0 if pick.exported and not any(p.fine for p in picks.values()) else node
        return [Root(ids.SOCKET_IFNAME.of(where), f"{var}={pick.value} selects no usable "
                                                  f"interface on {where}")]
    return []


def socket_ifname_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {v: env[v] for v in SOCKET_IFNAME_VARS if env.get(v, "").strip()}


def describe_interfaces(ifaces: Mapping[str, Interface]) -> str:
    return ", ".join(
        f"{i.name} ({'up' if i.up else i.state.lower()}, mtu {i.mtu}, "
        f"{' '.join(i.addrs) or 'no address'})" for i in ifaces.values()
    ) or "none"


# -- F5: a node's variables --------------------------------------------------------------------


@dataclass(frozen=True)
class Miss:
    """A *_SOCKET_IFNAME value the ranks on a node get that selects no usable interface there.
    `fits`: where the launch exports it from the rank-0 node, the other nodes it does fit
    (None: the node's own environment sets it)."""

    var: str
    value: str
    spec: IfSpec
    fits: tuple[str, ...] | None = None


def _miss_text(node: str, rank0: str, miss: Miss, here: Mapping[str, Interface]
               ) -> tuple[str, str]:
    """(what is wrong with one variable, its fix in words)."""
    var, value, spec, fits = miss.var, miss.value, miss.spec, miss.fits
    matched = matched_interfaces(spec, here)
    origin = "" if fits is None else (
        f" (exported to every rank by deepspeed from {rank0}'s environment or ~/.deepspeed_env"
        + ("; it fits no node" if not fits else f"; it fits {', '.join(fits)}") + ")")
    why = ("matches no interface" if not matched else
           "matches only "
           + ", ".join(f"{i.name} ({'up' if i.up else i.state.lower()}, "
                       f"{'address ' + ' '.join(i.ips) if i.ips else 'no address'})"
                       for i in matched)
           + ", none up with an address (lo does not count)")
    usable_now = [i.name for i in here.values() if usable(i) and i.name != "lo"]
    value_fix = ('=' + usable_now[0] if usable_now and not var.startswith('GLOO')
                 else (usable_now[0] if usable_now else '<interface>'))
    fix = (f"on {rank0}: set {var}={value_fix} in ~/.deepspeed_env (or unset it there)"
           if fits is not None else
           f"on {node}: export {var}={value_fix} in ~/.bashrc above any early return (or "
           f"unset it)")
    return (f"{var}={value} ({spec.describe()}){origin} {why}.\n"
            f"  interfaces on {node}: {describe_interfaces(here)}", fix)


def judge_socket_ifname(node: str, rank0: str, misses: Sequence[Miss],
                        here: Mapping[str, Interface]) -> Problem | None:
    """F5 on `node`: one red for the variables that select no usable interface there (`here`:
    its interfaces)."""
    if not misses:
        return None
    said = [_miss_text(node, rank0, m, here) for m in misses]
    return Problem((node,), NetworkCause.IFNAME_UNUSABLE,
                   f"{node}: " + f"\n{node}: ".join(text for text, _ in said),
                   fix="; ".join(dict.fromkeys(fix for _, fix in said)),
                   item=ids.SOCKET_IFNAME.item)


# -- F5: the route between two nodes -----------------------------------------------------------


def judge_route(a: str, b: str, addr: str, route: Command | None,
                matches: Mapping[str, Sequence[str]], env: Mapping[str, str]) -> Problem | None:
    """F5 on a -> b: the route from a to b's address (`ip -o route get`, None: not asked)
    leaves a by an interface every variable selects (`matches`: var -> the interfaces it
    selects on a; `env`: the variables' values)."""
    dev = route_device(route.out) if route is not None and route.ok else None
    if dev is None:
        said = (route.err or route.out).strip()[:200] if route is not None else ""
        return Problem((a, b), NetworkCause.NO_ROUTE,
                       f"{a} -> {b} ({addr}): no route (`ip -o route get {addr}` on {a}: {said})",
                       item=ids.SOCKET_IFNAME_ROUTE.item)
    wrong = {var: names for var, names in matches.items() if dev not in names}
    if not wrong:
        return None
    return Problem(
        (a, b), NetworkCause.WRONG_INTERFACE,
        f"{a} -> {b} ({addr}): the route leaves {a} by {dev}, but "
        + "; ".join(f"{var}={env[var]} selects {', '.join(n)}" for var, n in wrong.items())
        + ": the library binds one interface and the packets leave by another.",
        fix=f"select {dev} (export NCCL_SOCKET_IFNAME=={dev}), or route {b}'s subnet via the "
            f"selected interface on {a}", item=ids.SOCKET_IFNAME_ROUTE.item)


# -- F6 ----------------------------------------------------------------------------------------


def judge_mtu(node: str, mtus: Mapping[str, tuple[str, int | None]], rank0: str
              ) -> Problem | None:
    """F6 on `node`: its launch interface's MTU (`mtus`: node -> (interface, MTU) of every node
    where one was found) is the one most nodes use (or rank 0's, where no MTU is a majority)."""
    dev, mtu = mtus[node]
    counts = Counter(m for _, m in mtus.values())
    common, n_common = counts.most_common(1)[0]
    rank0_mtu = mtus.get(rank0, (None, None))[1]
    if mtu == common or n_common * 2 <= len(mtus) and mtu == rank0_mtu:
        return None
    table = "\n".join(f"    {n:16} {d:10} mtu {m}" for n, (d, m) in mtus.items())
    return Problem(
        (node,), NetworkCause.MTU_MISMATCH,
        f"{node}: {dev} has MTU {mtu}, most nodes use {common}; large packets between them are "
        f"dropped or fragmented (a hang or a slow all-reduce):\n{table}",
        fix=f"on {node}: ip link set dev {dev} mtu {common}  (and make it persistent)",
        item=ids.MTU.item)
