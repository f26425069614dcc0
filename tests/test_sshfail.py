"""One SSH-failure vocabulary: transport, S4/S5 and T2 name causes the same way."""

from cluster_tests.core import transport
from cluster_tests.judge import ssh, sshfail, training


def test_one_cause_enum():
    assert transport.Cause is sshfail.Cause
    assert all(c in sshfail.FIX for c in sshfail.Cause)


def test_classify_words():
    assert ssh.classify_ssh_failure("Permission denied (publickey).", 255) == sshfail.Cause.AUTH.value
    assert ssh.classify_ssh_failure("Permission denied (password).", 255) == "public keys not accepted"
    assert sshfail.classify("ssh: Could not resolve hostname x", 255) is sshfail.Cause.DNS


def test_training_ssh_rules_mapped():
    for rule in training._RULES:
        if rule.kind.startswith("ssh-"):
            assert isinstance(rule.ssh_cause, sshfail.Cause)
