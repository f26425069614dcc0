"""Node-side probe: gathers the facts that the checks assert on, in one round trip.

Sent over SSH on standard input and run by the node's own Python (`--remote-python`), in the
non-interactive shell that pdsh would get, so that `os.environ` here is what a launched rank
sees.  Standard library only, Python >= 3.6.  It changes nothing on the node.

Input: one JSON object as argv[1]: {"sections": [...], ...parameters}.
Output: one line `CT_PROBE_JSON:{...}` on stdout (a chatty ~/.bashrc may print other lines).
"""

import grp
import os
import pwd
import shutil
import socket
import stat
import sys
import threading
import time


def run(argv, timeout=10.0, env=None):
    return run_command(argv, timeout, 200000, 20000, env)


def stat_path(path):
    try:
        st = os.lstat(path)
    except OSError as exc:
        return {"path": path, "exists": False, "error": exc.strerror}
    return {
        "path": path,
        "exists": True,
        "mode": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "is_dir": stat.S_ISDIR(st.st_mode),
        "is_link": stat.S_ISLNK(st.st_mode),
        "owner": _user_name(st.st_uid),
        "group": _group_name(st.st_gid),
        "group_private": _group_private_to(st.st_gid, os.getuid()),
    }


def _group_private_to(gid, uid):
    """Debian's sshd StrictModes allowance: a group-writable file is fine when its group is the
    user's private group (every account with that primary group is the user, and the
    supplementary member list is empty or just the user)."""
    try:
        gr = grp.getgrgid(gid)
        me = pwd.getpwuid(uid)
    except KeyError:
        return False
    members = 0
    for pw in pwd.getpwall():
        if pw.pw_gid == gid:
            members += 1
            if pw.pw_uid != uid:
                return False
    if gr.gr_mem:
        members += 1
        if gr.gr_mem != [me.pw_name]:
            return False
    return members > 0


def ssh_files(home):
    ssh_dir = os.path.join(home, ".ssh")
    chain = [stat_path(os.path.join(ssh_dir, "authorized_keys")), stat_path(ssh_dir)]
    path = home
    while True:
        chain.append(stat_path(path))
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    pubkeys, private = {}, {}
    try:
        names = sorted(os.listdir(ssh_dir))
    except OSError:
        names = []
    for name in names:
        full = os.path.join(ssh_dir, name)
        if name.startswith("id_") and name.endswith(".pub"):
            pubkeys[name] = read_text(full, 64 * 1024)
        elif name.startswith("id_") and not name.endswith("-cert.pub"):
            private[name] = stat_path(full)
    return {
        "chain": chain,
        "pubkeys": pubkeys,
        "private_keys": private,
        "authorized_keys_text": read_text(os.path.join(ssh_dir, "authorized_keys")),
    }


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def resolve(name):
    start = time.monotonic()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
        addrs = []
        for info in infos:
            if info[4][0] not in addrs:
                addrs.append(info[4][0])
        return {"addrs": addrs, "seconds": time.monotonic() - start, "error": None}
    except socket.gaierror as exc:
        return {"addrs": [], "seconds": time.monotonic() - start, "error": str(exc)}


#: what `ssh -G` says that the checks read: where ssh goes for a name, as whom
SSH_G_KEYS = ("hostname", "port", "user")


def ssh_views(names, workers=8):
    """name -> what this node's OpenSSH client makes of it (`ssh -G NAME`: the hostname, port
    and user it would use, from ~/.ssh/config and /etc/ssh/ssh_config, Host and Match blocks
    and tokens applied), or {"error": ...}; the hostname resolved here too where it is another
    name.  `workers` at a time (rank 0 asks for every host of a big cluster)."""
    if not names or not shutil.which("ssh"):
        return {}
    out = {}
    todo = list(names)
    lock = threading.Lock()

    def work(_):
        while True:
            with lock:
                if not todo:
                    return
                name = todo.pop()
            res = run(["ssh", "-G", name], timeout=10)
            view = {}
            if res["rc"] != 0:
                view["error"] = ((res["err"] or res["out"]).strip().splitlines() or
                                 ["exit %d" % res["rc"]])[-1][:300]
            else:
                for line in res["out"].splitlines():
                    key, _, value = line.partition(" ")
                    if key in SSH_G_KEYS:
                        view[key] = value.strip()
                host = view.get("hostname")
                if host and host != name:
                    view["resolve"] = resolve(host)
            with lock:
                out[name] = view

    in_parallel(work, range(min(workers, len(todo))))
    return out


def section_base(params):
    me = pwd.getpwuid(os.getuid())
    home = me.pw_dir
    try:
        private_group = grp.getgrgid(me.pw_gid)
        group_members = list(private_group.gr_mem)
        group_name = private_group.gr_name
    except KeyError:
        group_members, group_name = [], str(me.pw_gid)
    hostname = socket.gethostname()
    names = list(params.get("names", []))
    resolved = {}
    for name in set(names + [hostname]):
        resolved[name] = resolve(name)
    # how ssh (pdsh's, DeepSpeed's) reads the names: every name where asked (the rank-0 node,
    # where the launch's ssh runs), else those the resolver cannot place (an alias of the ssh
    # config is then the only way ssh finds them)
    ssh_names = [n for n in names if params.get("ssh_all") or not resolved[n]["addrs"]]
    addrs = run(["ip", "-o", "addr", "show"], timeout=5)
    links = run(["ip", "-o", "link", "show"], timeout=5)
    return {
        "hostname": hostname,
        "user": me.pw_name,
        "uid": me.pw_uid,
        "gid": me.pw_gid,
        "group": group_name,
        "group_members": group_members,
        "home": home,
        "ssh": ssh_files(home),
        "hostname_I": run(["hostname", "-I"], timeout=5)["out"].split(),
        "env": dict(os.environ),
        "python": {"executable": sys.executable, "version": sys.version.split()[0]},
        "resolve": resolved,
        "ssh_names": ssh_views(sorted(set(ssh_names))),
        "ip_addr": addrs["out"] if addrs["rc"] == 0 else "",
        "ip_link": links["out"] if links["rc"] == 0 else "",
        "which": {t: shutil.which(t) for t in ("pdsh", "ssh", "sshd", "nvidia-smi", "npu-smi",
                                               "hccn_tool", "deepspeed", "iptables", "timeout")},
        "cpu_count": os.cpu_count(),
    }


def section_sshd(params):
    """`sshd -T` with `-C` for this login (user, and the client/server ends of the session we
    came in by), so that `Match User/Address` blocks apply as they do to a real login; plain
    `-T` where this sshd does not take -C."""
    sshd = admin_tool("sshd") or "/usr/sbin/sshd"
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = os.environ.get("USER", "root")
    conn = (os.environ.get("SSH_CONNECTION") or "").split()
    spec = "user=%s" % user
    if len(conn) == 4:
        spec += ",host=%s,addr=%s,laddr=%s,lport=%s" % (conn[0], conn[0], conn[2], conn[3])
    res = run([sshd, "-T", "-C", spec], timeout=10)
    res["connection_spec"] = spec
    if res["rc"] != 0:
        plain = run([sshd, "-T"], timeout=10)
        if plain["rc"] == 0:
            plain["connection_spec"] = None
            return plain
    return res


def section_ssh_pairs(params):
    """ssh from this node to every target, in parallel, as pdsh would (OpenSSH, BatchMode)."""
    targets = list(params.get("targets", []))
    timeout = float(params.get("connect_timeout", 5))
    limit = max(1, int(params.get("fanout", 16)))
    results = {}
    sem = threading.Semaphore(limit)

    def one(target):
        with sem:
            argv = [
                "ssh",
                "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=yes",
                "-o", "ConnectTimeout=%d" % max(1, int(timeout)),
                "-o", "ConnectionAttempts=1",
                "-o", "LogLevel=ERROR",
                "-T",
                target,
                "true",
            ]
            results[target] = run(argv, timeout=timeout + 10)

    in_parallel(one, targets)
    return results


def section_routes(params):
    out = {}
    for addr in params.get("route_to", []):
        out[addr] = run(["ip", "-o", "route", "get", addr], timeout=5)
    return out


def section_accelerators(params):
    """Raw outputs of the vendor tools that exist on this node (parsed on the launcher)."""
    out = {"cpu_count": os.cpu_count()}
    if shutil.which("nvidia-smi"):
        out["nvidia_smi_L"] = run(["nvidia-smi", "-L"], timeout=20)
    if shutil.which("npu-smi"):
        out["npu_smi_info"] = run(["npu-smi", "info"], timeout=20)
        out["npu_smi_info_l"] = run(["npu-smi", "info", "-l"], timeout=20)
    return out


if __name__ == "__main__":
    probe_main(globals(), ["base"])
