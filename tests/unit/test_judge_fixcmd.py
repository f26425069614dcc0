"""judge/common/fixcmd.py: the fix commands fixes.sh runs, run here for real in a scratch
directory: each does what it says, and a second run changes nothing."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from cluster_tests.judge.common import fixcmd


def sh(command: str) -> None:
    subprocess.run(["sh", "-c", command], check=True)


def test_modes_and_directories_are_set_and_stay_set(tmp_path: Path) -> None:
    ssh = tmp_path / ".ssh"
    keys = ssh / "authorized_keys"
    for _ in range(2):
        sh(fixcmd.mkdir_cmd(str(ssh)))
        sh(fixcmd.touch_cmd(str(keys)))
    assert stat.S_IMODE(ssh.stat().st_mode) == 0o700
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    keys.chmod(0o666)
    sh(fixcmd.chmod_go_w_cmd(str(keys)))
    assert stat.S_IMODE(keys.stat().st_mode) == 0o644


def test_a_key_is_authorized_once(tmp_path: Path) -> None:
    keys = tmp_path / "authorized_keys"
    line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHa/PuojmUmvWPaS1uLw5SSgN root@node1"
    for _ in range(2):
        sh(fixcmd.authorize_key_cmd(str(keys), line))
    assert keys.read_text().splitlines() == [line]


def test_the_own_name_on_127_0_1_1_is_rewritten_once_with_a_backup(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    before = "127.0.0.1 localhost\n127.0.1.1 node3.example node3\n"
    hosts.write_text(before)
    cmd = fixcmd.own_name_hosts_cmd("node3", "10.77.0.3", str(hosts))
    sh(cmd)
    after = hosts.read_text()
    assert "127.0.1.1" not in after and "127.0.0.1 localhost" in after
    assert any(ln.split()[:1] == ["10.77.0.3"] and "node3" in ln.split()
               for ln in after.splitlines())
    backup = Path(str(hosts) + fixcmd.HOSTS_BACKUP_SUFFIX)
    assert backup.read_text() == before
    mtime = os.stat(hosts).st_mtime_ns
    sh(cmd)
    assert hosts.read_text() == after and os.stat(hosts).st_mtime_ns == mtime
    assert backup.read_text() == before


def test_quoting_keeps_a_path_one_word() -> None:
    out = subprocess.run(["sh", "-c", f"printf '%s|' {fixcmd.q('a b; rm -rf x')}"],
                         capture_output=True, text=True, check=True).stdout
    assert out == "a b; rm -rf x|"
