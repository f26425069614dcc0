"""The shell commands of the structured fixes (fixes.sh): each idempotent (a second run changes
nothing), every path, name and key shlex-quoted. Pure text builders: the S checks' judgement
(judge/ssh/sshmodes.py) and the fix script (report/fixes.py) both use them."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.basefacts import BaseFacts
from cluster_tests.judge.common.netfacts import is_ip, own_addresses
from cluster_tests.judge.problem import Fix


def q(text: str) -> str:
    return shlex.quote(str(text))


def chmod_cmd(path: str, mode: int) -> str:
    """Set the mode only where it differs (a second run changes nothing)."""
    return f"find {q(path)} -maxdepth 0 ! -perm {mode:o} -exec chmod {mode:o} {{}} +"


def chmod_go_w_cmd(path: str) -> str:
    return f"find {q(path)} -maxdepth 0 -perm /022 -exec chmod go-w {{}} +"


def chown_cmd(path: str, user: str) -> str:
    return f'[ "$(stat -c %U {q(path)})" = {q(user)} ] || chown {q(user)} {q(path)}'


def mkdir_cmd(path: str, mode: int = 0o700) -> str:
    return f"[ -d {q(path)} ] || mkdir -m {mode:o} {q(path)}"


def touch_cmd(path: str, mode: int = 0o600) -> str:
    return f"[ -e {q(path)} ] || install -m {mode:o} /dev/null {q(path)}"


def authorize_key_cmd(authorized_keys: str, pubkey_line: str) -> str:
    """Append the key to authorized_keys unless its base64 blob is there already."""
    parts = pubkey_line.split()
    blob = parts[1] if len(parts) > 1 else pubkey_line
    f = q(authorized_keys)
    return (f"grep -qF -- {q(blob)} {f} 2>/dev/null || "
            f"{{ [ ! -s {f} ] || [ -z \"$(tail -c1 {f})\" ] || echo >> {f}; "
            f"(umask 077; printf '%s\\n' {q(pubkey_line.strip())} >> {f}); }}")


def hosts_entry_cmd(name: str, address: str, hosts: str = "/etc/hosts") -> str:
    """Make ``name`` resolve to ``address`` only in /etc/hosts: keep a line that already says so,
    take the name off every other line, add ``address name`` when no line says it. Rewritten in
    place (the file may be a bind mount) and only when the content changes."""
    awk = ("{ c = $0; sub(/#.*/, \"\", c); k = split(c, w); "
           "if (k >= 2) { hit = 0; out = w[1]; "
           "for (i = 2; i <= k; i++) { if (w[i] == n) hit = 1; else out = out \" \" w[i] } "
           "if (hit) { if (w[1] == a && !done) { print; done = 1; next } "
           "if (out != w[1]) print out; next } } print } "
           "END { if (!done) print a \" \" n }")
    f = q(hosts)
    return (f'( t=$(mktemp) && awk -v n={q(name)} -v a={q(address)} {q(awk)} {f} > "$t" && '
            f'{{ cmp -s "$t" {f} || cat "$t" > {f}; }}; rc=$?; rm -f "$t"; exit $rc )')


#: where the N3 fix keeps the node's /etc/hosts as it was before its first change
HOSTS_BACKUP_SUFFIX = ".cluster-tests.bak"

# awk over /etc/hosts: take `n` (the hostname, and its FQDNs `n.*`; hosts lookups ignore case)
# off every loopback line (127.x, ::1), dropping a line left naming nothing; add `a` with the
# names taken off, in their order (`node2.example node2` stays so: the first is the canonical
# name), unless a line of `a` names them already. Every other line is kept as it is.
_OWN_NAME_AWK = (
    "function own(w) { w = tolower(w); return w == ln || index(w, ln \".\") == 1 } "
    "function lo(w) { return w ~ /^127\\./ || w == \"::1\" || w == \"0:0:0:0:0:0:0:1\" } "
    "BEGIN { ln = tolower(n) } "
    "{ c = $0; cm = \"\"; h = index(c, \"#\"); "
    "if (h) { cm = \" \" substr(c, h); c = substr(c, 1, h - 1) } "
    "k = split(c, w); "
    "if (k >= 2 && lo(w[1])) { out = w[1]; hit = 0; "
    "for (i = 2; i <= k; i++) { if (own(w[i])) { hit = 1; "
    "if (!(tolower(w[i]) in seen)) { seen[tolower(w[i])] = 1; order[++m] = w[i] } } "
    "else out = out \" \" w[i] } "
    "if (hit) { if (out != w[1]) print out cm; next } } "
    "if (k >= 2 && w[1] == a) for (i = 2; i <= k; i++) have[tolower(w[i])] = 1; "
    "print } "
    "END { if (!(ln in seen)) order[++m] = n; add = \"\"; "
    "for (i = 1; i <= m; i++) if (!(tolower(order[i]) in have)) "
    "add = add \" \" order[i]; if (add != \"\") print a add }"
)


def own_name_hosts_cmd(hostname: str, address: str, hosts: str = "/etc/hosts",
                       backup: str | None = None) -> str:
    """N3: the node's own hostname (and its FQDNs) off every loopback line of ``hosts`` (the
    ``127.0.1.1 <hostname>`` line goes when it names nothing else; ``127.0.0.1 localhost`` keeps
    localhost), and a line ``address hostname`` where none says it. ``hosts`` is backed up to
    ``backup`` (default ``<hosts>.cluster-tests.bak``) before the first change only: a backup
    already there is kept. Rewritten in place (the file may be a bind mount), and only when the
    content changes: a second run changes nothing."""
    f = q(hosts)
    b = q(backup if backup is not None else hosts + HOSTS_BACKUP_SUFFIX)
    return (f'( t=$(mktemp) && awk -v n={q(hostname)} -v a={q(address)} {q(_OWN_NAME_AWK)} '
            f'{f} > "$t" && {{ cmp -s "$t" {f} || {{ {{ [ -e {b} ] || cp -p {f} {b}; }} && '
            f'cat "$t" > {f}; }}; }}; rc=$?; rm -f "$t"; exit $rc )')


def hostname_cmd(name: str) -> str:
    """Set the hostname where it differs: hostnamectl on a systemd host, else hostname(1)."""
    n = q(name)
    return (f'[ "$(hostname)" = {n} ] || {{ if [ -d /run/systemd/system ] && '
            f"command -v hostnamectl >/dev/null 2>&1; then hostnamectl set-hostname {n}; "
            f"else hostname {n}; fi; }}")


def known_host_cmd(known_hosts: str, name: str, keytype: str, blob: str) -> str:
    """Make `name`'s host key in `known_hosts` the given one (a key the launcher verified):
    drop other keys recorded for the name, append this one unless it is there."""
    f = q(known_hosts)
    line = q(f"{name} {keytype} {blob}")
    return (f"{{ [ -d \"$(dirname {f})\" ] || mkdir -m 700 \"$(dirname {f})\"; }} && "
            f"{{ grep -qF -- {q(f'{name} {keytype} {blob}')} {f} 2>/dev/null || "
            f"{{ ssh-keygen -R {q(name)} -f {f} >/dev/null 2>&1; "
            f"(umask 077; printf '%s\\n' {line} >> {f}); }}; }}")


# -- fixes built from a node's base facts (the `base` probe: uid, hostname, resolve, interfaces)


def as_root(base: BaseFacts | None, command: str) -> str:
    """The command as root on a node whose base facts are `base`: as it is where the run logs
    in as root (or its facts are unknown), else through `sudo -n`."""
    if base is None or base.uid == 0:
        return command
    return f"sudo -n sh -c {q(command)}"


def hostname_fix(node: str, base: BaseFacts | None) -> list[Fix]:
    """H2: the node's hostfile name leads elsewhere on the node itself (H2 is red only then):
    its hostname becomes that name and its /etc/hosts maps the name to its own address (an
    address line is left alone). `base`: the node's base facts (none: no fix)."""
    if is_ip(node) or base is None:
        return []
    actual = base.hostname
    cmds = []
    if actual and actual != node:
        cmds.append(as_root(base, hostname_cmd(node)))
    own = own_addresses(base)
    got = list(base.resolved(node).addrs)
    if own and not set(got) <= set(own) | {a for a in got if a.startswith("127.")}:
        cmds.append(as_root(base, hosts_entry_cmd(node, own[0])))
    if not cmds:
        return []
    return [Fix(node, f"make {node} name this node (hostname {actual}; it resolves to "
                      f"{', '.join(got) or 'nothing'} there)", tuple(cmds),
                ids.HOSTNAME_MATCHES.item,
                "without systemd, hostname(1) lasts until reboot: also write it to /etc/hostname")]


def hosts_fix(viewer: str, viewer_base: BaseFacts | None, name: str, address: str,
              wrong: Sequence[str] = ()) -> Fix:
    """N1/N2: `viewer`'s /etc/hosts maps `name` to `address` (it said `wrong`)."""
    said = f" (it says {', '.join(wrong)})" if wrong else ""
    return Fix(viewer, f"/etc/hosts: {name} is {address}{said}",
               (as_root(viewer_base, hosts_entry_cmd(name, address)),),
               ids.NAME_CONSISTENT.item)
