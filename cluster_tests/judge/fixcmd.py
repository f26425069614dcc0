"""The shell commands of the structured fixes (fixes.sh): each idempotent (a second run changes
nothing), every path, name and key shlex-quoted. Pure text builders: the S checks' judgement
(judge/ssh.py) and the fix script (report/fixes.py) both use them."""

from __future__ import annotations

import shlex


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
