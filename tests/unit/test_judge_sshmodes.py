"""judge/ssh/sshmodes.py: S2-S6's verdicts, on what node/probe.py, sshd, ssh and pdsh really
answer here (run on this machine, on files and configs of the test's own)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import PACKAGE

from cluster_tests import node
from cluster_tests.core import transport
from cluster_tests.core.cluster import PROBE_MARK, probe_command
from cluster_tests.core.testids import Scope
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.probes import FactsError
from cluster_tests.judge.env import launchlegs
from cluster_tests.judge.ssh import sshfail, sshmodes
from cluster_tests.judge.ssh.sshmodes import SshCause

PRELUDE = PACKAGE / "node" / "prelude.py"
NO_HOST = "ct-no-such-host.invalid"
SSH_DIR = os.path.expanduser("~/.ssh")


def probe(section: str, home: Path | None = None, **params) -> object:
    """node/probe.py's answer for `section`, run here as a node runs it (with `home` bind-mounted
    over the login user's home, in a mount namespace of its own: nothing outside changes;
    the interpreter, where it lives in that home, mounted into it first)."""
    over: list[str] = []
    if home is not None:
        real = Path(os.path.expanduser("~"))
        inside = Path(sys.base_prefix).resolve()
        keep = inside.relative_to(real) if inside.is_relative_to(real) else None
        script = 'mount --rbind "$1" "$2" && shift 3 && exec "$@"'
        if keep is not None:
            (home / keep).mkdir(parents=True)
            script = 'mount --bind "$3" "$1/$4" && ' + script.replace("shift 3", "shift 4")
        over = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                str(home), str(real), *([str(inside), str(keep)] if keep is not None else
                                        ["-"])]
    argv, stdin = probe_command(sys.executable, json.dumps({"sections": [section], **params}),
                                node.source("probe.py"), site=False)
    out = subprocess.run([*over, *argv], input=stdin, capture_output=True, timeout=60,
                         check=True).stdout.decode()
    return json.loads(out.rsplit(PROBE_MARK, 1)[1].splitlines()[0])[section]


def run_on_node(argv: list[str]) -> dict:
    """node/prelude.py's run_command, run for real as on a node (with node/probe.py's limits on
    the output it keeps); its JSON."""
    code = (f"exec(open({str(PRELUDE)!r}).read())\nimport json, sys\n"
            f"print(json.dumps(run_command({argv!r}, 10, 200000, 20000)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


# -- S3: sshd's effective settings ---------------------------------------------------------------


def test_this_machines_sshd_reads_as_its_settings():
    sshd = sshmodes.SshdFacts.read(probe("sshd"))
    assert sshd.ok and sshd.get("port") == "22" and sshd.get("pubkeyauthentication") == "yes"


def test_sshd_taking_no_keys_is_one_red_with_both_fixes(tmp_path):
    """`sshd -T` of a config that takes no keys and no root: the check's red names both, with
    their fixes; as another user only the first matters."""
    key = tmp_path / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    conf = tmp_path / "sshd_config"
    conf.write_text(f"HostKey {key}\nPubkeyAuthentication no\nPermitRootLogin no\n")
    raw = run_on_node([shutil.which("sshd") or "/usr/sbin/sshd", "-T", "-f", str(conf)])
    sshd = sshmodes.SshdFacts.read(raw)
    assert sshd.ok and sshd.get("pubkeyauthentication") == "no"
    p = sshmodes.sshd_config_problem("n1", sshd, root=True)
    assert p is not None and p.cause is sshfail.Cause.KEYS_NOT_ACCEPTED and p.item == "S3"
    assert p.message == ("n1: PubkeyAuthentication is 'no': sshd refuses every key, so pdsh "
                         "cannot log in\nn1: PermitRootLogin is 'no': root cannot log in with "
                         "a key")
    assert p.fix == ("on n1: set 'PubkeyAuthentication yes' in /etc/ssh/sshd_config; "
                     "systemctl reload ssh; on n1: set 'PermitRootLogin prohibit-password'; "
                     "systemctl reload ssh")
    assert [q.cause for q in sshmodes.sshd_config_problems("n1", sshd, root=False)] == [
        sshfail.Cause.KEYS_NOT_ACCEPTED]


def test_an_sshd_that_cannot_say_is_not_judged(tmp_path):
    raw = run_on_node([shutil.which("sshd") or "/usr/sbin/sshd", "-T", "-f",
                       str(tmp_path / "missing")])
    sshd = sshmodes.SshdFacts.read(raw)
    assert not sshd.ok and sshd.settings == {} and sshd.error
    with pytest.raises(FactsError):
        sshmodes.SshdFacts.read(["not", "an", "object"])


# -- S2: StrictModes on the login user's files ----------------------------------------------------


def _home(tmp_path: Path, ssh_mode: int) -> Path:
    """A home of the test's own (mode 700) with ~/.ssh (`ssh_mode`) and authorized_keys (600)."""
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "authorized_keys").write_text("")
    (ssh / "authorized_keys").chmod(0o600)
    ssh.chmod(ssh_mode)
    home.chmod(0o700)
    return home


def test_a_world_writable_ssh_dir_makes_sshd_refuse_every_key(tmp_path):
    facts = BaseFacts.read(probe("base", home=_home(tmp_path, 0o777)))
    verdict = sshmodes.strict_modes(facts.ssh, facts.uid, facts.user)
    p = sshmodes.modes_problem("n2", verdict)
    assert p.cause is SshCause.FILE_MODES and p.item == "S2" and p.scope in (None, Scope.NODE)
    assert f"n2: {SSH_DIR} is world-writable (mode 0777): sshd (StrictModes)" in p.message
    assert p.fix == f"on n2: chmod 700 {SSH_DIR}" and p.fixes and p.fixes[0].where == "n2"
    lax = sshmodes.strict_modes(facts.ssh, facts.uid, facts.user, strict=False)
    assert not lax.errors


def test_a_readable_private_key_stops_only_the_nodes_own_ssh(tmp_path):
    home = _home(tmp_path, 0o700)
    key = home / ".ssh" / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    key.chmod(0o644)
    facts = BaseFacts.read(probe("base", home=home))
    p = sshmodes.modes_problem("n1", sshmodes.strict_modes(facts.ssh, facts.uid, facts.user))
    assert p.cause is SshCause.KEY_MODES and p.scope == Scope.AS_RANK0
    assert "UNPROTECTED PRIVATE KEY FILE" in p.message
    assert p.fix == f"on n1: chmod 600 {SSH_DIR}/id_ed25519"


# -- S4: `ssh b` on a -----------------------------------------------------------------------------


def _facts(host_key: tuple[str, str] | None = None) -> sshmodes.TrustFacts:
    return sshmodes.TrustFacts(pubkeys={}, authorized_keys=None, authorized_keys_text=None,
                               known_hosts="/root/.ssh/known_hosts", host_key=host_key,
                               address="10.0.0.3")


def test_a_real_ssh_leg_that_cannot_resolve_is_fixed_on_the_source():
    legs = sshmodes.read_legs({NO_HOST: run_on_node(
        ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", "-T", NO_HOST, "true"])})
    leg = legs[NO_HOST]
    assert leg.cause is sshfail.Cause.DNS
    p = sshmodes.trust_problem("node1", NO_HOST, leg.cause, leg.evidence, _facts(),
                               rank0="node1")
    assert p.item == "S4" and p.nodes == ("node1", NO_HOST) and not p.fixes
    assert "Could not resolve hostname" in p.message
    assert p.fix == f"on node1: add '10.0.0.3 {NO_HOST}' to /etc/hosts (or fix DNS)"
    with pytest.raises(FactsError):
        sshmodes.read_legs({"b": {"out": ""}})


def test_an_unknown_host_key_is_copied_as_verified_or_compared_out_of_band():
    cause = sshfail.Cause.HOSTKEY_UNKNOWN
    blob = "AAAAC3NzaC1lZDI1NTE5AAAAIOZ0k1example"
    verified = sshmodes.trust_problem("node1", "node3", cause, "Host key verification failed.",
                                      _facts(host_key=("ssh-ed25519", blob)), rank0="node1")
    assert "copy the key the launcher verified (ssh-ed25519)" in verified.fix
    assert verified.fixes and verified.fixes[0].where == "node1"
    assert blob in verified.fixes[0].commands[0]
    unverified = sshmodes.trust_problem("node1", "node3", cause, "Host key verification failed.",
                                        _facts(), rank0="node1")
    assert not unverified.fixes
    assert unverified.fix == sshfail.pair_fix(cause, "node1", "node3")
    assert "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub" in unverified.fix
    for fix in (verified.fix, unverified.fix):
        assert "ssh-keyscan -" not in fix and "ssh-keyscan node" not in fix


# -- S5, S6 ---------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("pdsh") is None, reason="needs pdsh")
def test_a_real_pdsh_leg_that_cannot_resolve():
    env = dict(os.environ, PDSH_RCMD_TYPE="ssh",
               PDSH_SSH_ARGS_APPEND="-o BatchMode=yes -o ConnectTimeout=2")
    proc = subprocess.run(["pdsh", "-S", "-t", "2", "-w", NO_HOST, "echo", "CT_PDSH_OK"],
                          env=env, capture_output=True, text=True, timeout=30, check=False)
    name = NO_HOST.split(".")[0]  # pdsh prints the short name
    leg = launchlegs.split_pdsh_output(proc.stdout + proc.stderr, [name])[name]
    assert sshmodes.pdsh_leg_cause(leg.lines, leg.pdsh_errors, leg.exit_code) is \
        sshfail.Cause.DNS
    p = sshmodes.pdsh_leg_problem("node1", name, leg.lines, leg.pdsh_errors, leg.exit_code,
                                  launcher=False, see=f"test_ssh_trust[node1->{name}]")
    assert p.item == "S5" and p.scope is None and p.cause == "name not resolved"
    assert "(ssh exited with exit code 255)" in p.message
    assert p.fix == (f"on node1: add '<its address> {name}' to /etc/hosts (or fix DNS); "
                     f"see test_ssh_trust[node1->{name}]")


def test_pdsh_missing_and_slow_logins():
    p = sshmodes.pdsh_missing("launcher", launcher=True)
    assert p.cause is SshCause.NO_PDSH and "apt-get install pdsh" in p.fix
    assert sshmodes.pdsh_missing("node1", launcher=False).fix == "on node1: apt-get install pdsh"
    assert sshmodes.slow_login("n1", 1.0, 5.0) is None
    slow = sshmodes.slow_login("n1", 6.25, 5.0)
    assert slow is not None and slow.cause is SshCause.SLOW_LOGIN
    assert slow.message.startswith("n1: SSH login took 6.2 s (limit 5 s, --slow-login).")
    assert "'UseDNS no'" in slow.fix


def test_a_failed_login_is_a_persons_fix_said_once():
    """S1: what the launcher's connection said, and the launcher's fix for the cause (no
    command: nobody can run one on a node the launcher cannot reach)."""
    target = transport.SSHTarget(alias="node3", hostname="10.0.0.3", port=22, user="root")
    cause = sshfail.Cause.REFUSED
    hint = transport._hint(target, cause, None)
    p = sshmodes.login_problem("node3", f"node3 ({target.destination})", cause,
                               "[Errno 111] Connection refused", hint)
    assert p.item == "S1" and p.nodes == ("node3",) and not p.fixes
    assert p.scope in (None, Scope.NODE)
    assert p.text() == (f"node3 ({target.destination}): connection refused: [Errno 111] "
                        f"Connection refused\n  fix: start sshd on node3: systemctl start ssh "
                        f"(port 22 refused the connection)")
