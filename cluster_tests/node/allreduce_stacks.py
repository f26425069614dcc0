"""Part of node/allreduce.py (sent before it, node.PARTS): where a rank is, when asked or at its
own deadline. Its stacks (faulthandler, into the supervisor's pipe) and its TCP connections
(/proc/<pid>/net/tcp: the peers it has and the connects nobody answered). Standard library only;
nothing here runs on import."""

import os
import socket

# --- where this rank is: its stack, on request or at its deadline ------------------------------

#: Seconds a rank at its watchdog waits at most for the supervisor's py-spy before it ends (it
#: goes on as soon as the supervisor says py-spy is done: a byte on ``CT_SPY_ACK_FD``; py-spy
#: reads libtorch's symbols, seconds on a loaded node: a fixed wait lost the native frames)
SPY_WAIT = 15.0


def wait_for_spy(environ: dict, most: float = SPY_WAIT) -> None:
    """At the watchdog, once the supervisor was told: until its py-spy is done (a byte on the
    ``CT_SPY_ACK_FD`` pipe), at most `most` s. Read in this thread, not the main one, which may
    be blocked in gloo's or NCCL's C code where no Python signal handler runs."""
    import select
    import time

    try:
        fd = int(environ.get("CT_SPY_ACK_FD", ""))
    except ValueError:
        time.sleep(min(most, 2.5))  # an older supervisor: its fixed wait
        return
    try:
        select.select([fd], [], [], most)
    except (OSError, ValueError):
        pass

#: File descriptor the stacks go to: a pipe of the supervisor's (``CT_STACK_FD``), else stderr.
_STACK_FD = -1


def tcp_peers(pid: int) -> dict:
    """Process ``pid``'s TCP connections by state: ``syn_sent``, the 'ip:port' of every
    connect nobody has answered yet, and ``established``, [local port, remote 'ip:port'] of
    every open one. A rank stuck in gloo's or NCCL's full-mesh connect waits in the same frames
    whichever peer is missing; these say which peers it has and which it still waits for."""
    out = {"syn_sent": [], "established": []}  # type: dict
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return out
    states = {"02": "syn_sent", "01": "established"}
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] in states and cols[9] in inodes:
                endpoint = _proc_endpoint(cols[2])
                if not endpoint:
                    continue
                if cols[3] == "01":
                    local = int(cols[1].rsplit(":", 1)[1], 16)
                    out["established"].append([local, endpoint])
                elif endpoint not in out["syn_sent"]:
                    out["syn_sent"].append(endpoint)
    return out


def _proc_endpoint(text: str) -> str:
    """/proc/net/tcp's '0100007F:1F90' (or tcp6's 32 hex digits) as '127.0.0.1:8080'."""
    try:
        addr, port = text.split(":")
        raw = bytes.fromhex(addr)
        if len(raw) == 4:
            ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
        else:
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
            ip = socket.inet_ntop(socket.AF_INET6, words)
            if ip.startswith("::ffff:") and "." in ip:
                ip = ip[7:]
        return f"{ip}:{int(port, 16)}"
    except (ValueError, OSError):
        return ""


def register_stack_dump(environ: dict) -> int:
    """``faulthandler`` on SIGUSR1, all threads, into ``CT_STACK_FD`` (the supervisor's pipe for
    this rank) or stderr: a rank blocked inside gloo/NCCL/HCCL still answers, because the dump
    is written by the C signal handler, not by Python code."""
    global _STACK_FD
    import faulthandler
    import signal

    try:
        fd = int(environ.get("CT_STACK_FD", "2"))
        os.fstat(fd)
    except (ValueError, OSError):
        fd = 2
    faulthandler.register(signal.SIGUSR1, file=fd, all_threads=True)
    _STACK_FD = fd
    return fd


def dump_own_stack() -> None:
    """This rank's stacks (all threads) before its watchdog ends it."""
    if _STACK_FD < 0:
        return
    import faulthandler

    try:
        faulthandler.dump_traceback(file=_STACK_FD, all_threads=True)
    except (OSError, ValueError):
        pass
