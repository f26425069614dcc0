"""The `deepspeed` the user's launch runs on the rank-0 node, and so its interpreter (E1, E3, E5).

DeepSpeed's runner starts every rank with its own ``sys.executable`` by absolute path, on every
node, whatever those nodes' non-interactive PATH holds; so what matters is the ``deepspeed`` the
user starts on the rank-0 node:

- when this suite runs on that node (same hostname), this process's environment's ``deepspeed``
  (the one beside ``sys.executable``), as the user runs the suite where they will run deepspeed;
- otherwise the one the user's interactive shell there finds (``$SHELL -i -c 'command -v
  deepspeed'``: a stock Debian/Ubuntu ``~/.bashrc`` activates conda/venvs only for interactive
  shells, below its early return);
- failing both, the non-interactive PATH's (what the launch probe finds by itself).
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from cluster_tests.core.cluster import Cluster
from cluster_tests.core.memokey import MemoKey
from cluster_tests.judge.hostfile import masteraddr as ma

LAUNCH_DEEPSPEED: MemoKey[LaunchDeepspeed] = MemoKey("launchpy", "deepspeed")


@dataclass(frozen=True)
class LaunchDeepspeed:
    path: str | None
    how: str  # "this environment", "interactive shell", or "" (the non-interactive PATH's)


def interactive_lookup_command() -> str:
    """`command -v deepspeed` in the user's interactive shell, between markers (an interactive
    shell without a terminal complains on stderr; that is dropped)."""
    inner = "command -v deepspeed"
    return (f"echo {ma.BEGIN}; \"${{SHELL:-/bin/bash}}\" -i -c '{inner}' </dev/null 2>/dev/null; "
            f"rc=$?; echo; echo \"{ma.END} $rc\"")


def read_lookup(body: str | None) -> str | None:
    """The absolute path an interactive lookup printed (its last line that is one)."""
    paths = [ln.strip() for ln in (body or "").splitlines() if ln.strip().startswith("/")]
    return paths[-1] if paths else None


def launch_deepspeed(cluster: Cluster) -> LaunchDeepspeed:
    return cluster.memo(LAUNCH_DEEPSPEED, lambda: _find(cluster))


def _find(cluster: Cluster) -> LaunchDeepspeed:
    site = cluster.rank0.name
    here = Path(sys.executable).parent / "deepspeed"
    facts = cluster.base_or_none(site)
    if facts is not None and facts.hostname == socket.gethostname() and here.exists():
        return LaunchDeepspeed(str(here), "this environment")
    try:
        res = cluster.run(site, interactive_lookup_command(),
                          timeout=cluster.settings.timeout_connect + 30)
    except Exception:  # noqa: BLE001 - no session to the site: the launch probe will say why
        return LaunchDeepspeed(None, "")
    body, _ = ma.read_marked(res.stdout)
    path = read_lookup(body)
    return LaunchDeepspeed(path, "interactive shell" if path else "")
