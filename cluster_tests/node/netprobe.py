"""Node-side network probe (CHECKLIST F1-F4): real listeners, real connections, firewall rules.

Same protocol as probe.py: argv[1] is JSON {"sections": [...], ...}; one line
`CT_PROBE_JSON:{section: data}` on stdout.  Standard library only, Python >= 3.6.

Sections:
  listen   bind K ephemeral TCP ports (and the master port, if asked) on 0.0.0.0, then hand the
           listening sockets to a detached child that accepts (and greets) every connection for
           at most `hold` seconds and exits; returns the ports and the child's pid at once, so
           the sockets are listening before the launcher starts any connector.
  connect  from this node, connect to every target's ports in parallel with a short deadline;
           each attempt ends ok / refused / timed out / unreachable; then time a few TCP
           handshakes to one open port of each target (RTT, jitter).
  stop     end the listener child by pid, only if its command line carries our token; report
           whether it is gone.
  firewall `iptables -S` and `nft list ruleset` (needs root), raw.
"""

import errno
import os
import select
import signal
import socket
import threading
import time

GREETING = b"CT-LISTENER "


def run(argv, timeout=10.0):
    return run_quiet(argv, timeout, 200000, 20000)


# -- listen ------------------------------------------------------------------------------------

def _bind(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
        s.listen(128)
    except OSError:
        s.close()
        raise
    return s


def _port_owner(port):
    res = run(["ss", "-Hltnp", "sport = :%d" % port], timeout=5)
    return res["out"].strip() if res["rc"] == 0 else ""


def _serve(socks, token, deadline):
    """The detached child: greet every connection until the deadline or SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    greeting = GREETING + token.encode() + b"\n"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            ready, _, _ = select.select(socks, [], [], min(left, 1.0))
        except (OSError, ValueError):
            break
        for s in ready:
            try:
                conn, _ = s.accept()
            except OSError:
                continue
            try:
                conn.settimeout(1.0)
                conn.sendall(greeting)
            except OSError:
                pass
            finally:
                conn.close()
    os._exit(0)


def _iface_address(name):
    """The first address of interface `name` (as gloo's lookupAddrForIface takes it: IPv4 before
    IPv6 in getifaddrs' order)."""
    res = run(["ip", "-o", "addr", "show", "dev", name], timeout=5)
    for line in res["out"].splitlines():
        words = line.split()
        if len(words) > 3 and words[2] in ("inet", "inet6"):
            return words[3].split("/")[0]
    return None


def _own_address():
    """This node's address as a gloo rank takes it without GLOO_SOCKET_IFNAME (torch's
    makeDefaultDevice, gloo's lookupAddrForHostname): gethostname(), getaddrinfo(AF_UNSPEC,
    SOCK_STREAM), the first result that binds; none: the loopback fallback.  Returns (facts,
    a socket listening on exactly that address, or None)."""
    host = socket.gethostname()
    out: dict = {"hostname": host, "candidates": [], "addr": None, "family": None,
                 "how": "hostname",
           "error": None}
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        infos = []
        out["error"] = "%s does not resolve: %s" % (host, exc)
    out["candidates"] = [info[4][0] for info in infos]
    for fam, stype, proto, _, sa in infos:
        s = socket.socket(fam, stype, proto)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((sa[0], 0) if fam == socket.AF_INET else (sa[0], 0) + tuple(sa[2:]))
            s.listen(16)
        except OSError as exc:
            s.close()
            out.setdefault("bind_errors", []).append("%s: %s" % (sa[0], exc.strerror or exc))
            continue
        out.update(addr=sa[0], family=6 if fam == socket.AF_INET6 else 4, port=s.getsockname()[1])
        return out, s
    out["how"] = "loopback fallback"  # torch warns and uses 127.0.0.1
    s = _bind_addr("127.0.0.1")
    if s is not None:
        out.update(addr="127.0.0.1", family=4, port=s.getsockname()[1])
    return out, s


def _bind_addr(addr):
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((addr, 0))
        s.listen(16)
    except OSError:
        s.close()
        return None
    return s


def section_listen(params):
    token = params["token"]
    count = int(params.get("ports", 2))
    hold = float(params.get("hold", 60))
    socks, ports = [], []
    for _ in range(count):
        s = _bind(0)
        socks.append(s)
        ports.append(s.getsockname()[1])
    own = None
    if params.get("own_address"):
        ifname = params.get("gloo_ifname")
        if ifname:  # gloo binds the (first) named interface's address instead
            first = ifname.split(",")[0]
            addr = _iface_address(first)
            own = {"how": "GLOO_SOCKET_IFNAME=%s" % ifname, "addr": addr, "hostname": None,
                   "candidates": [], "family": (6 if addr and ":" in addr else 4), "error": None
                   if addr else "no address on %s" % first}
            s = _bind_addr(addr) if addr else None
            if s is not None:
                own["port"] = s.getsockname()[1]
        else:
            own, s = _own_address()
        if s is not None:
            socks.append(s)
    master: dict | None = None
    if params.get("master_port"):
        mp = int(params["master_port"])
        try:
            socks.append(_bind(mp))
            master = {"port": mp, "free": True}
        except OSError as exc:
            master = {"port": mp, "free": False, "error": exc.strerror or str(exc),
                      "owner": _port_owner(mp)}
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # first child: new session, fork the server, leave
        os.close(read_fd)
        os.setsid()
        pid2 = os.fork()
        if pid2 != 0:
            os.write(write_fd, str(pid2).encode())
            os._exit(0)
        os.close(write_fd)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        _serve(socks, token, time.monotonic() + hold)
    os.close(write_fd)
    os.waitpid(pid, 0)
    child = int(os.read(read_fd, 64).decode() or 0)
    os.close(read_fd)
    for s in socks:
        s.close()
    return {"pid": child, "ports": ports, "master": master, "hold": hold, "own": own}


# -- connect -----------------------------------------------------------------------------------

def _classify(exc):
    if isinstance(exc, socket.timeout):
        return "timed out"
    code = getattr(exc, "errno", None)
    if code == errno.ECONNREFUSED:
        return "refused"
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "unreachable"
    if code == errno.ETIMEDOUT:
        return "timed out"
    return "error: %s" % exc


def _connect(addr, port, timeout, token):
    start = time.monotonic()
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((addr, port))
        connect_ms = (time.monotonic() - start) * 1000.0
        greeting = b""
        try:
            while not greeting.endswith(b"\n") and len(greeting) < 200:
                chunk = s.recv(200)
                if not chunk:
                    break
                greeting += chunk
        except OSError:
            pass
        ours = greeting.strip() == GREETING + token.encode() if token else True
        return {"status": "ok" if ours else "other listener", "ms": connect_ms}
    except OSError as exc:
        return {"status": _classify(exc), "ms": (time.monotonic() - start) * 1000.0}
    finally:
        s.close()


def _resolve(name):
    try:
        return socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0], None
    except (socket.gaierror, IndexError) as exc:
        return None, str(exc)


def section_connect(params):
    token = params.get("token", "")
    timeout = float(params.get("port_timeout", 3))
    samples = int(params.get("samples", 5))
    sem = threading.Semaphore(max(1, int(params.get("fanout", 32))))
    out = {}
    jobs = []
    for t in params.get("targets", []):
        # the address the target's ranks advertise (given), else the one ssh reaches it at, else
        # its name as this node resolves it
        addr, err = ((t["dial"], None) if t.get("dial") else
                     (t["host"], None) if t.get("host") else _resolve(t["name"]))
        entry = {"addr": addr, "resolve_error": err, "ports": {}, "master": None,
                 "rtt_ms": [], "ssh": None}
        out[t["name"]] = entry
        if addr is None:
            continue
        for port in t.get("ports", []):
            jobs.append((entry, "ports", addr, port))
        own = t.get("own") or {}
        if own.get("addr") and own.get("port"):  # the address its gloo ranks advertise, as is
            jobs.append((entry, "own", own["addr"], own["port"]))
        if t.get("master_port"):
            # the rendezvous address as the launch has it (--master_addr), when it is not the name
            maddr, merr = _resolve(t["master_host"]) if t.get("master_host") else (addr, None)
            if maddr is None:
                entry["master"] = {"status": "unresolved", "error": merr,
                                   "port": t["master_port"], "host": t["master_host"]}
            else:
                entry["master_addr"] = maddr
                jobs.append((entry, "master", maddr, t["master_port"]))

    def one(job):
        entry, kind, addr, port = job
        with sem:
            res = _connect(addr, port, timeout, token)
        res["port"] = port
        if kind == "ports":
            entry["ports"][str(port)] = res
        elif kind == "own":
            res["addr"] = addr
            entry["own"] = res
        else:
            entry["master"] = res

    in_parallel(one, jobs)

    # dialed at its own address and no port answered: one port at the address its name (or
    # ssh) leads to, which tells the address's fault (F7) from the path's (F3)
    alt = []
    for t in params.get("targets", []):
        entry = out[t["name"]]
        ports = entry["ports"]
        if t.get("dial") and ports and all(r["status"] != "ok" for r in ports.values()):
            there = (t["host"], None) if t.get("host") else _resolve(t["name"])[0:2]
            if there[0] and there[0] != t["dial"]:
                alt.append((entry, "alt", there[0], int(next(iter(ports)))))

    def other(job):
        entry, _, addr, port = job
        with sem:
            res = _connect(addr, port, timeout, token)
        res.update(port=port, addr=addr)
        entry["alt"] = res

    in_parallel(other, alt)

    def rtt(name):
        entry = out[name]
        open_ports = [int(p) for p, r in entry["ports"].items() if r["status"] == "ok"]
        with sem:
            if open_ports:
                for _ in range(samples):
                    r = _connect(entry["addr"], open_ports[0], timeout, token)
                    if r["status"] == "ok":
                        entry["rtt_ms"].append(r["ms"])
            elif entry["addr"]:
                # one plain connect to sshd (never a burst: sshd penalizes unauthenticated churn)
                entry["ssh"] = _connect(entry["addr"], int(params.get("ssh_port", 22)), timeout, "")

    in_parallel(rtt, out)
    if params.get("compact"):
        return _compact(params.get("targets", []), out)
    return out


def _compact(targets, out):
    """--pairs matrix (every peer of every node): the targets whose every port answered (and
    whose own gloo address, where tried) as two strings in the order of `targets`, their
    addresses and median RTTs ("-" where the target is in `*detail` instead, with every detail);
    the launcher keeps them as flat arrays, not as an object per pair (4096 nodes: 16.7 M)."""
    addrs, rtts, detail = [], [], {}
    for t in targets:
        entry = out[t["name"]]
        own = entry.get("own")
        if (entry["addr"] and entry["ports"] and entry["master"] is None
                and all(r["status"] == "ok" for r in entry["ports"].values())
                and (own is None or own.get("status") == "ok")):
            got = sorted(entry["rtt_ms"])
            addrs.append(entry["addr"])
            rtts.append("%.4f" % got[len(got) // 2] if got else "nan")
        else:
            addrs.append("-")
            rtts.append("-")
            detail[t["name"]] = entry
    return {"*detail": detail, "*compact": {"addr": " ".join(addrs), "rtt_ms": " ".join(rtts)}}


# -- stop --------------------------------------------------------------------------------------

def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def section_stop(params):
    pid = int(params["pid"])
    token = params["token"]
    cmd = _cmdline(pid)
    if cmd is None or not _alive(pid):
        return {"was_running": False, "gone": True}
    if token not in cmd:
        return {"was_running": False, "gone": True,
                "note": "pid %d is no longer our listener" % pid}
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, sig)
        except OSError:
            break
        end = time.monotonic() + wait
        while time.monotonic() < end and _alive(pid):
            time.sleep(0.02)
        if not _alive(pid):
            break
    return {"was_running": True, "gone": not _alive(pid)}


# -- firewall ----------------------------------------------------------------------------------

def section_firewall(params):
    out = {"uid": os.getuid()}
    for tool, args in (("iptables", ["-w", "5", "-S"]), ("nft", ["list", "ruleset"])):
        found = admin_tool(tool)
        if found:
            out[tool] = run([found, *args], timeout=10)
    return out


if __name__ == "__main__":
    probe_main(globals())
