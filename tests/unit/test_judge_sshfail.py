"""judge/ssh/sshfail.py: one SSH-failure vocabulary (transport, S4/S5, the rehearsal E5 and T2
name causes the same way) and one fix table, keyed by cause, for every place a connection
starts; no fix trusts a host key on first use."""

import re

import pytest

from cluster_tests.core import transport
from cluster_tests.judge.env import launchlegs
from cluster_tests.judge.ssh import sshfail
from cluster_tests.judge.training import traindiag as tdiag

#: a fix that tells the user to run ssh-keyscan (saying "never ssh-keyscan," is not one)
KEYSCAN = re.compile(r"ssh-keyscan\s")


def test_one_cause_enum_and_one_fix_per_cause():
    assert transport.Cause is sshfail.Cause
    assert set(sshfail.FIX) == set(sshfail.Cause)
    assert not hasattr(sshfail, "WORDS")


def _every_fix() -> list[str]:
    target = transport.SSHTarget(alias="n2", hostname="10.0.0.2", port=22, user="u")
    out = []
    for cause in sshfail.Cause:
        out += [transport._hint(target, cause, "/cfg"), sshfail.pair_fix(cause, "n1", "n2"),
                sshfail.FIX[cause].generic()]
    return out + [w.fix for w in (*sshfail.PDSH_LEG, sshfail.RUNNER_CHECK)]


def test_no_fix_recommends_ssh_keyscan():
    fixes = _every_fix()
    assert not [f for f in fixes if KEYSCAN.search(f)]
    assert all("{" not in f for f in fixes), "a template left unformatted"


@pytest.mark.parametrize("cause", [sshfail.Cause.HOSTKEY_UNKNOWN, sshfail.Cause.HOSTKEY_CHANGED])
def test_an_unverified_host_key_is_compared_out_of_band(cause):
    """Without a key the launcher verified, the fix reads the fingerprint on the node itself
    before ssh writes the key to known_hosts."""
    pair = sshfail.pair_fix(cause, "node1", "node3")
    assert "on node3's console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub" in pair
    assert "on node1: ssh node3 true, and answer yes only if the fingerprint" in pair
    target = transport.SSHTarget(alias="n2", hostname="10.0.0.2", port=2222, user="u",
                                 known_hosts_files=("/kh",))
    hint = transport._hint(target, cause, None)
    assert "on n2's console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub" in hint
    assert "ssh -o StrictHostKeyChecking=ask -p 2222 10.0.0.2 true" in hint
    assert "writes the key to /kh" in hint
    if cause is sshfail.Cause.HOSTKEY_CHANGED:
        assert "ssh-keygen -R 10.0.0.2 -f /kh" in hint and "ssh-keygen -R node3" in pair


def test_classify_words():
    classify = sshfail.classify
    assert classify("Permission denied (publickey).", 255) is sshfail.Cause.AUTH
    assert classify("Permission denied (password).", 255).value == "public keys not accepted"
    assert sshfail.classify("ssh: Could not resolve hostname x", 255) is sshfail.Cause.DNS


def test_training_ssh_rules_mapped():
    for rule in tdiag._RULES:
        if rule.kind.startswith("ssh-"):
            assert isinstance(rule.ssh_cause, sshfail.Cause)


def test_training_ssh_rules_are_the_vocabulary():
    """T2's ssh rules are sshfail's pdsh-leg words, in their order, with the table's fixes."""
    words = [*sshfail.PDSH_LEG, sshfail.RUNNER_CHECK]
    rules = [r for r in tdiag._RULES if r.ssh_cause is not None]
    assert [(r.kind, r.pattern.pattern, r.cause, r.hint, r.host_group, r.ssh_cause)
            for r in rules] == [
        (w.kind, w.pattern, w.says, w.fix, w.host_group, w.cause) for w in words
    ]
    assert tdiag.SSH_KINDS == {w.kind for w in words}
    assert sshfail.leg_words("ssh-publickey") is sshfail.PDSH_LEG[0]
    assert sshfail.leg_words("no-torch") is None
    assert sshfail.PDSH_LEG[0].fix == sshfail.FIX[sshfail.Cause.AUTH].leg


def test_ssh_causes_of_a_pdsh_log_line():
    """Each pdsh leg's words classify (S4/S5's classifier) as the cause T2 files them under,
    except the hostkey rule, which covers both host-key causes."""
    lines = {
        "ssh-publickey": "node2: user@node2: Permission denied (publickey).",
        "ssh-resolve": "node2: ssh: Could not resolve hostname node2: Name or service not known",
        "ssh-refused": "node2: ssh: connect to host node2 port 22: Connection refused",
        "ssh-timeout": "node2: ssh: connect to host node2 port 22: Connection timed out",
    }
    for w in sshfail.PDSH_LEG:
        if w.kind in lines:
            assert sshfail.classify(lines[w.kind], 255) is w.cause
    diags = tdiag.diagnose("\n".join(lines.values()), hosts=["node1", "node2"])
    assert [(d.kind, d.node) for d in diags] == [(k, "node2") for k in lines]


def test_rehearsal_reads_ssh_failures_with_the_vocabulary():
    assert launchlegs._SSH_FAILURE is sshfail.PDSH_LEG_FAILED
    assert sshfail.PDSH_LEG_FAILED.search("ssh: connect to host node2 port 22: Connection refused")
    assert not sshfail.PDSH_LEG_FAILED.search("import deepspeed")


def test_transport_hints_are_the_vocabulary():
    target = transport.SSHTarget(alias="n2", hostname="10.0.0.2", port=2222, user="u",
                                 identity_files=("/k/id",), known_hosts_files=("/kh",))
    assert transport._hint(target, sshfail.Cause.REFUSED, None) == (
        "start sshd on n2: systemctl start ssh (port 2222 refused the connection)")
    assert transport._hint(target, sshfail.Cause.UNREACHABLE, None) == transport._hint(
        target, sshfail.Cause.TIMEOUT, None)
    assert transport._hint(target, sshfail.Cause.PROTOCOL, "/cfg") == "run: ssh -F /cfg -v n2 true"
    hint = transport._hint(target, sshfail.Cause.AUTH, "/cfg")
    assert hint.startswith("ssh-copy-id -F /cfg -i /k/id.pub n2 ")
    keyless = transport.SSHTarget(alias="n2", hostname="n2")
    assert transport._hint(keyless, sshfail.Cause.AUTH, None).startswith(
        f"ssh-copy-id -i {sshfail.DEFAULT_KEY}.pub n2 ")


def test_a_dead_or_unknown_ssh_alias_is_fixed_in_the_ssh_config():
    """The hostfile's name is an ssh alias (its HostName is elsewhere): nothing answering there,
    or a HostName nobody resolves, is the alias block's to correct, never the hostname."""
    alias = transport.SSHTarget(alias="gpu-c", hostname="10.0.0.99")
    hint = transport._hint(alias, sshfail.Cause.UNREACHABLE, "/cfg")
    assert hint.startswith("the ssh config -F /cfg sends gpu-c to HostName 10.0.0.99, where "
                           "nothing answers on port 22: if that is not gpu-c's address, correct "
                           "the HostName of its 'Host gpu-c' block"), hint
    assert transport._hint(alias, sshfail.Cause.TIMEOUT, "/cfg") == hint
    named = transport.SSHTarget(alias="gpu-c", hostname="gpu-c.internal")
    assert "sends gpu-c to HostName gpu-c.internal, which the launcher cannot resolve" in \
        transport._hint(named, sshfail.Cause.DNS, None)
    # no alias: the name itself does not resolve, on the launcher and the nodes alike
    plain = transport.SSHTarget(alias="gpu-x", hostname="gpu-x")
    hint = transport._hint(plain, sshfail.Cause.DNS, None)
    assert "'<address> gpu-x' to /etc/hosts on the launcher and on every node" in hint
    assert "'Host gpu-x' block" in hint and "hostnamectl" not in hint


def test_the_pair_fix_names_both_ends():
    assert sshfail.pair_fix(sshfail.Cause.DNS, "node1", "node3", "10.0.0.3") == (
        "on node1: add '10.0.0.3 node3' to /etc/hosts (or fix DNS)")
    assert sshfail.pair_fix(sshfail.Cause.AUTH, "node1", "node3").startswith(
        "on node3: append node1's public key (node1:~/.ssh/id_*.pub)")
