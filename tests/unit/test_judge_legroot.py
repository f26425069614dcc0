"""judge/ssh/legroot.py: the reds that hold an ssh leg's cause, in the order a check blocks on
them; on real base facts of node/probe.py (a home of the test's own, as sshd's StrictModes
sees it)."""

from __future__ import annotations

import probenode
from test_judge_sshmodes import _home, probe

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.problem import Root
from cluster_tests.judge.ssh import legroot, sshmodes
from cluster_tests.judge.ssh.sshfail import Cause

#: sshd's settings where `sshd -T` could not be read (measure/sshroot.py's own value)
UNREAD = sshmodes.SshdFacts(-1, {})


def test_a_leg_to_a_node_that_is_down_for_everyone_is_its_logins():
    f = legroot.LegFacts("node1", "node3", Cause.TIMEOUT, login=Cause.REFUSED)
    assert legroot.roots(f) == [Root(ids.LOGIN.of("node3"),
                                     "node3 refuses connections (sshd not running)")]
    # the launcher's login failed for another reason: not the same cause
    assert legroot.roots(legroot.LegFacts("node1", "node3", Cause.AUTH, login=Cause.REFUSED)) \
        == []


def test_a_name_the_source_cannot_resolve_is_n1s_after_the_login():
    f = legroot.LegFacts("node1", "node3", Cause.DNS, login=Cause.DNS)
    assert [r.check for r in legroot.roots(f)] == [ids.LOGIN.of("node3"),
                                                   ids.RESOLVES.of("node1", "node3")]
    assert legroot.roots(legroot.LegFacts("node1", "node3", Cause.DNS))[0].why == \
        "node1 cannot resolve node3"


def test_a_name_the_source_places_on_another_machine_is_n1s():
    """node1's /etc/hosts sends node3 to node2's address: a changed host key there is N1's."""
    node1 = probenode.base_facts("node1", ("10.77.0.1/24",), hosts="10.77.0.2 node3",
                                 names=["node3"])
    node3 = probenode.base_facts("node3", ("10.77.0.3/24",))
    f = legroot.LegFacts("node1", "node3", Cause.HOSTKEY_CHANGED, names_a=node1, names_b=node3)
    assert legroot.roots(f) == [Root(ids.RESOLVES.of("node1", "node3"),
                                     "node1 resolves node3 to 10.77.0.2, which is not one of "
                                     "node3's addresses")]
    right = probenode.base_facts("node1", ("10.77.0.1/24",), hosts="10.77.0.3 node3",
                                 names=["node3"])
    assert legroot.roots(legroot.LegFacts("node1", "node3", Cause.HOSTKEY_CHANGED,
                                          names_a=right, names_b=node3)) == []


def test_a_key_refused_by_the_targets_file_modes_is_its_s2(tmp_path):
    facts = BaseFacts.read(probe("base", home=_home(tmp_path, 0o777)))
    f = legroot.LegFacts("node1", "node3", Cause.AUTH, keys_b=(facts, UNREAD))
    assert legroot.roots(f) == [Root(ids.SSH_MODES.of("node3"),
                                     "sshd on node3 refuses every key because of file modes")]
    # on the source, the same modes refuse nothing of its own key; nor on a timeout
    assert legroot.roots(legroot.LegFacts("node1", "node3", Cause.AUTH,
                                          keys_a=(facts, UNREAD))) == []
    assert legroot.roots(legroot.LegFacts("node1", "node3", Cause.TIMEOUT,
                                          keys_b=(facts, UNREAD))) == []


def test_what_each_cause_may_come_from():
    assert legroot.firewall_may_explain(Cause.TIMEOUT, None)
    assert not legroot.firewall_may_explain(Cause.TIMEOUT, Cause.TIMEOUT)
    assert not legroot.firewall_may_explain(Cause.AUTH, None)
    assert legroot.keys_may_explain(Cause.AUTH) and legroot.keys_may_explain(
        Cause.KEYS_NOT_ACCEPTED) and not legroot.keys_may_explain(Cause.HOSTKEY_CHANGED)
    assert legroot.trust_root("node1", "node3", Cause.AUTH) == Root(
        ids.SSH_TRUST.of("node1", "node3"), "node1 -> node3: public key refused")
