"""Where an ssh leg's failure comes from, when it is a cause another red of the run holds (pure).

`ssh b` from node a (S4, pdsh's legs, DeepSpeed's own `ssh <first host> hostname -I`) fails for
a cause that is b's alone (down, refusing every key, a changed host key: S1's red), a's or b's
own firewall (F4), a resolving b to another machine or not at all (N1), a's unusable key or
b's file modes (S2), b's sshd taking no keys (S3). :func:`roots` names those reds, in the order
the checks try them, from the facts measure/sshroot.py gathers (:class:`LegFacts`); the check
blocks on the first one that runs in the session (``core.outcome.block``), and fails with its
own red when none does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.network import pairjudge
from cluster_tests.judge.network.portjudge import PortMatrix
from cluster_tests.judge.problem import Root
from cluster_tests.judge.ssh import sshfail, sshmodes, sshnames


@dataclass(frozen=True)
class LegFacts:
    """What this run knows of `ssh b` on a failing for `cause`; each part only where the cause
    can come from it (:func:`firewall_may_explain`, :func:`keys_may_explain`)."""

    a: str
    b: str
    cause: sshfail.Cause
    #: the cause the launcher's own login to b failed with (None: it logged in)
    login: sshfail.Cause | None = None
    #: the port matrix, where a node's own firewall may explain the leg and a took part in it
    matrix: PortMatrix | None = None
    #: the DROP/REJECT rules of a and b in INPUT (those logged in to; None: unreadable)
    rules: Mapping[str, list[str] | None] = field(default_factory=dict)
    #: a's and b's base facts as the run has them already (where a's ssh sends b; b's addresses)
    names_a: BaseFacts | None = None
    names_b: BaseFacts | None = None
    #: a's and b's base facts and sshd settings, where the cause is a refused key
    keys_a: tuple[BaseFacts, sshmodes.SshdFacts] | None = None
    keys_b: tuple[BaseFacts, sshmodes.SshdFacts] | None = None


def firewall_may_explain(cause: sshfail.Cause, login: sshfail.Cause | None) -> bool:
    """b answers the launcher but not a: a node's own firewall may be why (the port matrix
    says)."""
    return login is None and cause in sshfail.NODE_DOWN


def keys_may_explain(cause: sshfail.Cause) -> bool:
    """A key refused: a's key file modes, b's sshd or b's file modes may be why."""
    return cause in sshfail.NODE_REFUSES_KEYS


def login_roots(b: str, cause: sshfail.Cause, login: sshfail.Cause | None) -> list[Root]:
    """S1's red on b, where the launcher's login to b failed for the leg's reason (b is down,
    refuses every key, has a changed host key for everyone)."""
    if login is None or not sshfail.same_node_cause(login, cause):
        return []
    return [Root(ids.LOGIN.of(b), sshfail.node_state(b, login))]


def roots(f: LegFacts) -> list[Root]:
    """The reds that may hold the leg's cause, in the order the checks try them (none: the
    leg's own red)."""
    a, b, cause = f.a, f.b, f.cause
    out = login_roots(b, cause, f.login)
    if firewall_may_explain(cause, f.login):
        out += pairjudge.firewall_roots(f.matrix, f.rules, a, b)
    if cause == sshfail.Cause.DNS:
        out.append(Root(ids.RESOLVES.of(a, b), f"{a} cannot resolve {b}"))
    elif (wrong := sshnames.misplaced(f.names_a, f.names_b, b)) is not None:
        # where a's ssh sends b (its ssh config's HostName, else its resolver): elsewhere
        out.append(Root(ids.RESOLVES.of(a, b), f"{a} resolves {b} to {', '.join(wrong[0])}, "
                                               f"which is not one of {b}'s addresses"))
    if not keys_may_explain(cause):
        return out
    if f.keys_a is not None and any(e.startswith("private key")
                                    for e in sshmodes.node_modes(*f.keys_a).errors):
        out.append(Root(ids.SSH_MODES.of(a), f"{a} cannot use its own key (file modes)"))
    if f.keys_b is None:
        return out
    if f.keys_b[1].get("pubkeyauthentication") == "no":
        out.append(Root(ids.SSHD_CONFIG.of(b), f"sshd on {b} has PubkeyAuthentication no"))
    if any(sshmodes.refuses_all_keys(e) for e in sshmodes.node_modes(*f.keys_b).errors):
        out.append(Root(ids.SSH_MODES.of(b), f"sshd on {b} refuses every key because of file "
                                             f"modes"))
    return out


def trust_root(a: str, b: str, cause: sshfail.Cause) -> Root:
    """S4's own red on a -> b (pdsh's leg a -> b, the rehearsal's, DeepSpeed's own `ssh <first
    host>` are that leg)."""
    return Root(ids.SSH_TRUST.of(a, b), f"{a} -> {b}: {cause}")
