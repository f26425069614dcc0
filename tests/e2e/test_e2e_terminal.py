"""The last screen is the verdict (issue 41): a red run's terminal, read as a person sees it
(the suite run in a pseudo-terminal 80 columns wide, long lines wrapped as the terminal wraps
them), ends with the causes and the launch line, right above pytest's final count, whether the
short test summary is pytest's default (`-rfE`) or the project's (`-ra`), printed by
pytest-xdist's controller; no line per blocked check, but one count per red."""

from __future__ import annotations

import math
import os
import pty
import re
import struct
import subprocess
import tempfile
import time

import pytest
from suite import PYTEST, REPO

COLUMNS, ROWS = 80, 24
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_a_terminal(sim, *args: str, timeout: float = 300) -> str:
    """The suite run as a user runs it at a terminal (a pty, 80x24): what the screen showed,
    escape sequences removed."""
    import fcntl
    import termios

    # from a directory of its own, as a user runs it (the reports go to ./reports), with the
    # project's ini file (its addopts: -ra)
    cwd = tempfile.mkdtemp(prefix="ct-term-", dir=os.environ.get("CT_SUITE_TMP"))
    argv = [*PYTEST, "-c", str(REPO / "pyproject.toml"), "--rootdir",
            str(REPO), "--hostfile", str(sim.hostfile), "--ssh-config", str(sim.ssh_config),
            "-p", "no:cacheprovider", *args]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "COLUMNS", "LINES")}
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return ANSI.sub("", text)


def last_screen(text: str, rows: int = 15) -> list[str]:
    """The lines whose every row is among the terminal's last `rows` rows (a line longer than
    the width takes several rows)."""
    lines = [ln.rsplit("\r", 1)[-1] for ln in text.rstrip("\n").split("\n")]  # \r: written over
    out: list[str] = []
    used = 0
    for line in reversed(lines):
        used += max(1, math.ceil(len(line) / COLUMNS))
        if used > rows:
            break
        out.insert(0, line)
    return out


@pytest.mark.parametrize("how", [
    ("-o", "addopts="),           # pytest's default -r (fE), in one process
    ("-n", "2"),                  # pytest-xdist's controller, with the project's -ra (addopts)
], ids=["pytest-default-r", "xdist-project-ra"])
def test_a_red_runs_last_screen_holds_the_causes_and_the_launch_line(healthy_sim, how):
    sim = healthy_sim
    sim.stop_sshd("node3")
    out = on_a_terminal(sim, "-m", "hostfile or ssh", "--timeout-connect", "3", *how)
    last = last_screen(out)
    shown = "\n".join(last)
    assert re.fullmatch(r"=+ 1 failed, \d+ passed, .*\d+ blocked(, \d+ not applicable)? in "
                        r"[\d.]+s =+", last[-1]), shown
    assert "Causes (1; one red each" in shown, out[-4000:]
    assert "  node3: connection refused (test_login[node3]; blocks" in shown, shown
    counted = re.search(r"(\d+) checks blocked by test_login\[node3\]", shown)
    assert counted, shown
    n = int(counted.group(1))
    assert n >= 10 and re.search(rf"\b{n} blocked(, \d+ not applicable)? in", last[-1]), shown
    assert last[-2] == "deepspeed --hostfile reports/hostfile.healthy ...", shown
    assert "Launch now on 2 of 3 nodes" in shown, shown
    # no SKIPPED line per blocked check anywhere; pytest's red line is there, above the verdict
    assert "blocked by test_login[node3]:" not in out, out[-4000:]
    lines = out.splitlines()
    failed = [i for i, ln in enumerate(lines) if ln.startswith("FAILED ")]
    causes = max(i for i, ln in enumerate(lines) if ln.startswith("Causes ("))
    assert failed and max(failed) < causes, out[-4000:]
