"""The fix script: every red's fix, collected into ``reports/fixes.sh`` for a person to review
and run from the launcher. The suite never runs it.

A check attaches a *structured* fix to its failure with :func:`offer` (where it runs and the
shell commands, each idempotent), or one is derived for it after the fact (:data:`DERIVED`,
keyed by test function, from the facts the run already has). The collector puts them on the
failed report as the ``fix_script`` user property (JSON), so they travel through pytest-xdist
and into the JUnit file. :func:`render` turns the run's failed outcomes into the script: one
block per distinct fix, in checklist order, commented with the test ids it answers and the node
it runs on; a fix that needs a person (a refused login, a driver, a cable) is a comment that
quotes the failure's own ``fix:`` text. Commands for a node are run as
``ssh -F <the run's ssh config> [-l <user>] -o BatchMode=yes <node> '<commands>'``, so the
script reaches the nodes exactly as the run did; every host, path and key is shlex-quoted.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import shlex
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from cluster_tests.core import testids as ids
from cluster_tests.core.memokey import base_key
from cluster_tests.judge.fixcmd import hostname_cmd, hosts_entry_cmd, q

LAUNCHER = "launcher"
PROPERTY = "fix_script"
SCRIPT_NAME = "fixes.sh"
#: checklist order of the blocks (by the test module's section)
SECTIONS = {module: letter for letter, module in ids.MODULES.items()}
ORDER = "HSNFEARDCT"


@dataclass(frozen=True)
class Fix:
    """One change on one machine. ``commands`` are POSIX shell, idempotent (a second run changes
    nothing), run in that order on ``where`` (a node of the hostfile, or the launcher)."""

    where: str
    what: str
    commands: tuple[str, ...] = ()
    item: str = ""  # checklist item, e.g. "S2"
    note: str = ""  # said in the block's comment (e.g. what a command cannot do for you)

    def key(self) -> tuple[str, tuple[str, ...]]:
        return (self.where, self.commands)


_OFFERED: contextvars.ContextVar[list[Fix] | None] = contextvars.ContextVar("ct_fixes", default=None)
OFFERED_KEY = pytest.StashKey[list["Fix"]]()


def offer(*fixes: Fix) -> None:
    """Attach structured fixes to the failure the calling check is about to report (ignored
    outside a test, or when the test passes after all)."""
    got = _OFFERED.get()
    if got is not None:
        got.extend(fixes)


# --------------------------------------------------------------------------- fix commands
# (the command builders are judge/fixcmd.py)


def as_root(cluster: Any, node: str, command: str) -> str:
    """The command as root: as it is where the run logs in as root, else through `sudo -n`."""
    base = cluster.cached(base_key(node)) or {}
    if base.get("uid", 0) == 0:
        return command
    return f"sudo -n sh -c {q(command)}"


# --------------------------------------------------------------------------- derived fixes


def _hostname_fix(cluster: Any, params: dict[str, Any]) -> list[Fix]:
    """H2: the node's hostfile name leads elsewhere on the node itself (H2 is red only then):
    its hostname becomes that name and its /etc/hosts maps the name to its own address (an
    address line is left alone)."""
    from cluster_tests.judge.netfacts import is_ip

    node = params.get("node")
    if node is None or is_ip(node) or cluster.login_error(node) is not None:
        return []
    base = cluster.cached(base_key(node)) or {}
    actual = base.get("hostname")
    cmds = []
    if actual and actual != node:
        cmds.append(as_root(cluster, node, hostname_cmd(node)))
    own = own_addresses(cluster, node)
    got = list(base.get("resolve", {}).get(node, {}).get("addrs") or [])
    if own and not set(got) <= set(own) | {a for a in got if a.startswith("127.")}:
        cmds.append(as_root(cluster, node, hosts_entry_cmd(node, own[0])))
    if not cmds:
        return []
    return [Fix(node, f"make {node} name this node (hostname {actual}; it resolves to "
                      f"{', '.join(got) or 'nothing'} there)", tuple(cmds), "H2",
                "without systemd, hostname(1) lasts until reboot: also write it to /etc/hostname")]


def own_addresses(cluster: Any, node: str) -> list[str]:
    """The node's non-loopback addresses, from the facts already probed (sorted)."""
    from cluster_tests.judge.netfacts import all_ips, is_loopback, parse_interfaces

    base = cluster.cached(base_key(node))
    if not base:
        return []
    ips = all_ips(parse_interfaces(base["ip_link"], base["ip_addr"]))
    return sorted(a for a in ips if not is_loopback(a))


def misresolved(cluster: Any, a: str, b: str) -> tuple[list[str], str] | None:
    """(what `a` resolves `b` to, b's right address) when a's answer is none of b's own
    addresses; None when it is right, unknown, or b is an address."""
    from cluster_tests.judge.netfacts import is_ip

    if is_ip(b) or a == LAUNCHER:
        return None
    base = cluster.cached(base_key(a))
    own = own_addresses(cluster, b)
    if not base or not own:
        return None
    got = list(base.get("resolve", {}).get(b, {}).get("addrs") or [])
    if not got or set(got) & set(own):
        return None
    return got, own[0]


def hosts_fix(cluster: Any, viewer: str, name: str, address: str, wrong: Sequence[str] = ()
              ) -> Fix:
    said = f" (it says {', '.join(wrong)})" if wrong else ""
    return Fix(viewer, f"/etc/hosts: {name} is {address}{said}",
               (as_root(cluster, viewer, hosts_entry_cmd(name, address)),), "N2")


def _pair_resolution_fix(cluster: Any, params: dict[str, Any]) -> list[Fix]:
    """Any pair check that failed while its source resolves the target to another machine:
    the /etc/hosts line on the source is the fix (F1-F3 then pass too)."""
    pair = params.get("pair")
    if not pair:
        return []
    a, b = pair
    got = misresolved(cluster, a, b)
    return [hosts_fix(cluster, a, b, got[1], got[0])] if got else []


def _rank0_resolution_fix(cluster: Any, params: dict[str, Any]) -> list[Fix]:
    """F2: a node that connects to the rendezvous under rank 0's name but reaches another
    machine: its /etc/hosts line for rank 0 is the fix."""
    node = params.get("node") or (params.get("rendezvous_leg") or (None,))[0]
    if node is None or not cluster.nodes:
        return []
    rank0 = cluster.rank0.name
    got = misresolved(cluster, node, rank0) if node != rank0 else None
    return [hosts_fix(cluster, node, rank0, got[1], got[0])] if got else []


DERIVED: dict[str, Callable[[Any, dict[str, Any]], list[Fix]]] = {
    ids.HOSTNAME_MATCHES.name: _hostname_fix,
    ids.MASTER_PORT.name: _rank0_resolution_fix,
}


class Collector:
    """Registered by the plugin: gives every check a place to `offer` fixes, and puts the
    offered (and derived) fixes of a failed check on its report."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        token = _OFFERED.set(item.stash.setdefault(OFFERED_KEY, []))
        try:
            return (yield)
        finally:
            _OFFERED.reset(token)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if report.when != "call" or not report.failed:
            return report
        offered: list[Fix] = item.stash.get(OFFERED_KEY, [])
        got = list(offered)
        cluster = getattr(item, "funcargs", {}).get("cluster")
        if cluster is not None:
            params = getattr(getattr(item, "callspec", None), "params", {})
            name = getattr(item, "originalname", item.name)
            for derive in (DERIVED.get(name), _pair_resolution_fix if not got else None):
                if derive is None:
                    continue
                try:
                    got += derive(cluster, params)
                except Exception:  # noqa: BLE001 - a fix we cannot derive is a comment instead
                    pass
        if got:
            unique = list({f.key(): f for f in got}.values())
            report.user_properties.append(
                (PROPERTY, json.dumps([dataclasses.asdict(f) for f in unique])))
        return report


# --------------------------------------------------------------------------- the script


def fixes_of(properties: dict[str, Any]) -> list[Fix]:
    raw = properties.get(PROPERTY)
    if not raw:
        return []
    try:
        return [Fix(d["where"], d["what"], tuple(d.get("commands", ())), d.get("item", ""),
                    d.get("note", "")) for d in json.loads(raw)]
    except (ValueError, KeyError, TypeError):
        return []


@dataclass
class Block:
    fix: Fix
    section: int
    tests: list[str]
    manual_text: list[str] = dataclasses.field(default_factory=list)


def _section(module: str) -> int:
    stem = Path(module.split("::")[0]).stem
    letter = SECTIONS.get(stem)
    return ORDER.index(letter) if letter else len(ORDER)


def blocks(outcomes: Iterable[Any]) -> list[Block]:
    """One block per distinct fix, in checklist order (then first appearance); each lists the
    ids of the failed tests it answers. Failures without a structured fix give manual blocks
    (their `fix:` text), one per distinct text."""
    out: dict[tuple, Block] = {}
    for o in outcomes:
        if o.outcome not in ("failed", "error"):
            continue
        sec = _section(o.module)
        structured = fixes_of(o.properties)
        for f in structured:
            # a fix sorts by its own checklist item (an N2 /etc/hosts fix that also answers an
            # S4 pair is an N block)
            own = ORDER.index(f.item[0]) if f.item and f.item[0] in ORDER else sec
            b = out.setdefault(("cmd", *f.key()), Block(f, own, []))
            if o.test_id not in b.tests:
                b.tests.append(o.test_id)
        if structured:
            continue
        texts = o.fixes
        if not texts:
            continue
        where = o.node or ("->".join(o.pair) if o.pair else "")
        key = ("manual", tuple(texts))
        b = out.setdefault(key, Block(Fix(where, o.headline or o.test_id), sec, [], texts))
        b.section = min(b.section, sec)
        b.tests.append(o.test_id)
    return sorted(out.values(), key=lambda b: b.section)  # stable: first appearance within


def ssh_prefix(ssh_config: str | None, user: str | None, connect_timeout: float,
               accept_new: bool = False) -> list[str]:
    argv = ["ssh"]
    if ssh_config and Path(ssh_config).is_file():
        argv += ["-F", ssh_config]
    if user:
        argv += ["-l", user]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(connect_timeout))}",
             "-o", f"StrictHostKeyChecking={'accept-new' if accept_new else 'yes'}"]
    return argv


def _comment(text: str) -> list[str]:
    return [("# " + line).rstrip() for line in str(text).splitlines() or [""]]


def render(outcomes: Iterable[Any], ssh: Sequence[str], *, command_line: str = "",
           when: float | None = None) -> tuple[str, int, int]:
    """The script's text, the number of command blocks and of manual blocks."""
    bl = blocks(outcomes)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when or time.time()))
    lines = [
        "#!/usr/bin/env bash",
        f"# fixes.sh: written by cluster_tests on {stamp}, one block per fix of the failed checks,",
        "# in checklist order. Review it, run it from the launcher (where the suite ran), then",
        "# rerun what failed: pytest --lf. The suite never runs it. Each block is idempotent:",
        "# running the script twice changes nothing the second time. Blocks that need a person",
        "# are comments.",
    ]
    if command_line:
        lines += _comment(f"run: {command_line}")
    lines += ["set -u", "failed=0",
              'ct_failed() { echo "fixes.sh: the block for $1 failed (exit $2)" >&2; failed=1; }',
              ""]
    prefix = shlex.join(ssh)
    n_cmd = n_manual = 0
    if not bl:
        lines += ["# nothing to fix: no failed check carried a fix", ""]
    for b in bl:
        f, ids = b.fix, ", ".join(b.tests)
        item = f"[{f.item}] " if f.item else ""
        if f.commands:
            n_cmd += 1
            lines += _comment(f"--- {item}on {f.where}: {f.what}")
            lines += _comment(f"answers: {ids}")
            if f.note:
                lines += _comment(f"note: {f.note}")
            script = (" && ".join(f"{{ {c}; }}" for c in f.commands) if len(f.commands) > 1
                      else f.commands[0])
            if f.where == LAUNCHER:
                lines.append(f"( {script} ) || ct_failed launcher $?")
            else:
                lines.append(f"{prefix} {q(f.where)} {q(script)} || ct_failed {q(f.where)} $?")
        else:
            n_manual += 1
            where = f" on {f.where}" if f.where else ""
            lines += _comment(f"--- {item}needs a person{where} (not run by this script): {f.what}")
            lines += _comment(f"answers: {ids}")
            for t in b.manual_text:
                lines += _comment(f"fix: {t}")
        lines.append("")
    lines.append('exit "$failed"')
    return "\n".join(lines) + "\n", n_cmd, n_manual


def write(path: Path, outcomes: Iterable[Any], ssh: Sequence[str], command_line: str = ""
          ) -> tuple[int, int]:
    text, n_cmd, n_manual = render(list(outcomes), ssh, command_line=command_line)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    tmp.replace(path)
    return n_cmd, n_manual
