"""H3 / F2: the rendezvous address as DeepSpeed 0.19's runner derives it (pure; no SSH, no I/O).

Without ``--master_addr``, ``deepspeed --hostfile`` (deepspeed/launcher/runner.py, ``main``) runs,
on the machine it starts on::

    ssh [-p <--ssh_port>] <first active host> hostname -I

with ``subprocess.check_output`` (stdout only; stderr goes to the terminal), and takes
``result.decode('utf-8').split()[0]``: the first *word* of everything the remote shell printed on
stdout.  A shell startup file that prints a line therefore hands DeepSpeed a word of that line;
a ``hostname`` without ``-I`` (busybox, BSD) or a failed ssh stops the launch; an address that
the other nodes cannot route to makes them wait in the rendezvous.  With ``--master_addr`` the
value is taken as given.

The measurement (measure/masterroute.py) runs that very command on the rank-0 node; this module
reads what it printed and judges the value against rank 0's interfaces and the peers' routes.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass, field

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.netfacts import is_ip
from cluster_tests.judge.hostfile.hostmodel import HostfileCause
from cluster_tests.judge.problem import Problem

ITEM = ids.MASTER_ADDR.item
BEGIN = "CT_MASTER_ADDR_BEGIN"
END = "CT_MASTER_ADDR_END"
#: bash's xtrace prefix in the startup-file trace (``PS4``); names the file and line
TRACE_TAG = "CT_TRACE"

#: interface name prefixes of addresses that only this machine (or its containers) can reach
VIRTUAL_PREFIXES = ("docker", "virbr", "br-", "cni", "flannel", "cali", "veth", "tun", "lo")


def hostname_i_argv(first_host: str, ssh_port: int | None = None) -> list[str]:
    """The command DeepSpeed's runner runs to infer ``--master_addr`` (its own string, split
    as it splits it)."""
    cmd = "ssh "
    if ssh_port is not None:
        cmd += f" -p {ssh_port}"
    cmd += f" {first_host} hostname -I"
    return shlex.split(cmd)


def ssh_check_argv(first_host: str, ssh_port: int | None = None) -> list[str]:
    """DeepSpeed's check that passwordless ssh works with the hostfile, run on the machine it
    starts on before anything else, ``--master_addr`` or not (skipped only with
    ``--no_ssh_check`` or ``--no_ssh``): its own string, split as it splits it. Only the exit
    status counts (stdout and stderr go to /dev/null)."""
    return shlex.split("ssh -o PasswordAuthentication=no "
                       + (f"-p {ssh_port} " if ssh_port is not None else "")
                       + f"{first_host} hostname")


@dataclass(frozen=True)
class SshCheck:
    """What DeepSpeed's ssh check did on the site (:func:`ssh_check_argv`)."""

    site: str
    first_host: str
    command: str
    exit_status: int | None  # None: it did not run (no session to the site)
    said: str  # stderr, else stdout: what it would have printed without /dev/null

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def ssh_check_problem(c: SshCheck, hostfile: str = "<hostfile>") -> Problem | None:
    """Why DeepSpeed stops at its ssh check, whatever ``--master_addr`` says (None: it passes).
    Exit 255 is ssh's own failure (S4's leg from the site to the first host); any other status
    is the remote `hostname` failing in the non-interactive shell."""
    if c.exit_status is None or c.ok:
        return None
    said = (c.said.strip().splitlines() or [f"exit {c.exit_status}"])[-1].strip()
    stop = (f"{c.site}: deepspeed stops before starting any rank: its check `{c.command}` on "
            f"{c.site} fails, and it raises 'Using hostfile at {hostfile} but host="
            f"{c.first_host} was not reachable via ssh', with or without --master_addr")
    if c.exit_status == 255:
        return Problem((c.site,), HostfileCause.SSH_CHECK_FAILS, f"{stop} (ssh: {said}).",
                       fix=f"passwordless ssh from {c.site} to {c.first_host} (see "
                           f"{ids.SSH_TRUST.of(c.site, c.first_host)})", item=ITEM)
    return Problem(
        (c.site,), HostfileCause.SSH_CHECK_FAILS,
        f"{stop}: ssh reaches {c.first_host}, but `hostname` there fails in a non-interactive "
        f"shell (exit {c.exit_status}: {said}).",
        fix=f"on {c.first_host}: install hostname (apt-get install hostname; dnf install "
            f"hostname) or put it on the PATH that ~/.bashrc sets before any early return; or "
            f"launch with --no_ssh_check (and --master_addr)", item=ITEM)


def marked_command(argv: list[str], connect_timeout: int) -> str:
    """``argv`` (DeepSpeed's ssh) with its stdout between markers, so that whatever the shell
    that runs it prints is not mistaken for it.  BatchMode and ConnectTimeout only bound the
    wait; they change nothing in what the remote shell prints."""
    ssh = [argv[0], "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}", *argv[1:]]
    return (f"echo {BEGIN}; {shlex.join(ssh)} </dev/null; rc=$?; echo; "
            f"echo \"{END} $rc\"")


def read_marked(text: str) -> tuple[str | None, int | None]:
    """(what the marked command printed, its exit status); (None, None) if the markers are
    missing (the command never ran)."""
    start = text.find(BEGIN + "\n")
    end = text.rfind("\n" + END + " ")
    if start < 0 or end < 0 or end < start:
        return None, None
    body = text[start + len(BEGIN) + 1:end]  # (the `echo` after it gave the "\n" before END)
    m = re.match(r"\s*(-?\d+)", text[end + len(END) + 2:])
    return body, int(m.group(1)) if m else None


def trace_command(files: tuple[str, ...] = ("/etc/bash.bashrc", "~/.bashrc")) -> str:
    """A non-interactive bash that reads the startup files as sshd's bash does, with xtrace on
    and stderr on stdout: each line of output follows the trace of the command that printed it.
    (PS4 is set inside: bash does not import it from the environment when run as root.)"""
    reads = "; ".join(f"[ -r {f} ] && . {f}" for f in files)
    inner = f"PS4='+{TRACE_TAG} ${{BASH_SOURCE}}:${{LINENO}}: '; exec 2>&1; set -x; {reads}"
    return f"echo {BEGIN}; bash -c {shlex.quote(inner)} </dev/null; rc=$?; echo; echo \"{END} $rc\""


_TRACE = re.compile(r"^\++" + TRACE_TAG + r" (?P<file>[^:]*):(?P<line>\d+): ")


def printed_by(trace: str, printed: str) -> tuple[str, int] | None:
    """(file, line) of the startup-file command that printed ``printed``, from the output of
    ``trace_command``; None when no traced command printed it."""
    where: tuple[str, int] | None = None
    want = printed.strip()
    for line in trace.splitlines():
        m = _TRACE.match(line)
        if m:
            if m.group("file"):
                where = (m.group("file"), int(m.group("line")))
            continue
        if want and line.strip() == want and where is not None:
            return where
    return None


#: whether a word is an IP address (judge/netfacts' test)
is_address = is_ip


@dataclass
class Derived:
    """The ``--master_addr`` the launch will use and how it came to be."""

    how: str  # "given" (--master_addr) or "derived" (DeepSpeed's `hostname -I`)
    site: str  # where deepspeed starts (the rank-0 node)
    first_host: str  # the host DeepSpeed asks
    command: str = ""  # DeepSpeed's command, as run on the site
    stdout: str | None = None  # what it printed on stdout (None: it did not run)
    stderr: str = ""
    exit_status: int | None = None
    value: str | None = None  # None: DeepSpeed stops before starting any rank
    #: where a startup file printed the line that the value was taken from ("file:line")
    printed_at: tuple[str, int] | None = None
    noise: list[str] = field(default_factory=list)  # stdout lines that are not addresses
    #: what a fix passes as --master_addr: the first host's name where every node resolves it
    #: (empty: that name), else an address of it (a name only ssh configs know is no use: every
    #: rank resolves --master_addr with its resolver)
    suggest: str = ""

    @property
    def suggested(self) -> str:
        return self.suggest or self.first_host


def derive(site: str, first_host: str, command: str, stdout: str | None, stderr: str,
           exit_status: int | None) -> Derived:
    """What DeepSpeed's runner takes from ``ssh <first host> hostname -I``."""
    d = Derived("derived", site, first_host, command, stdout, stderr, exit_status)
    if stdout is None or exit_status != 0:
        return d  # check_output raises: the runner stops
    words = stdout.split()
    d.value = words[0] if words else None
    d.noise = [ln for ln in stdout.splitlines()
               if ln.strip() and not all(is_address(w) for w in ln.split())]
    return d


def given(site: str, first_host: str, value: str) -> Derived:
    return Derived("given", site, first_host, value=value)


@dataclass
class Route:
    """A peer's route to the master address (``ip -o route get``)."""

    ok: bool
    text: str  # the route, or why there is none
    local: bool = False  # the peer owns that address itself: its ranks would connect to themselves


def read_route(exit_status: int, stdout: str, stderr: str) -> Route:
    if exit_status != 0:
        said = stderr.strip() or stdout.strip() or f"exit {exit_status}"
        return Route(False, said.splitlines()[-1])
    text = stdout.strip().splitlines()[0] if stdout.strip() else ""
    if text.startswith("local ") or " dev lo " in f" {text} ":
        return Route(True, text, local=True)
    if text.startswith(("unreachable", "prohibit", "blackhole")):
        return Route(False, text)
    return Route(True, text)


def _startup_fix(d: Derived) -> str:
    if d.printed_at:
        f, line = d.printed_at
        where = f"{f} line {line}"
    else:
        where = "the shell startup file that prints it (~/.bashrc, /etc/bash.bashrc)"
    return (f"on {d.first_host}: remove that output from {where} (or print it only in "
            f"interactive shells, or to stderr), or pass --master_addr {d.suggested}")


def _red(d: Derived, cause: HostfileCause, message: str, fix: str) -> Problem:
    """H3's red on the rank-0 node (where deepspeed starts): `message` headed by its name."""
    return Problem((d.site,), cause, f"{d.site}: {message}", fix=fix, item=ITEM,
                   facts={"master_addr": d.value or ""})


def problems(d: Derived, rank0_ips: dict[str, str], routes: dict[str, Route]) -> list[Problem]:
    """Why ``d.value`` cannot be the rendezvous address, each with its fix (empty: it can).

    ``rank0_ips``: address -> interface on the rank-0 node; ``routes``: each peer's route to
    the value (only when it is an address)."""
    if d.how == "derived" and d.value is None:
        return [_not_derived(d)]
    value = d.value or ""
    if not is_address(value):
        return _not_an_address(d, value, rank0_ips)
    return _address_problems(d, str(ipaddress.ip_address(value)), rank0_ips, routes)


def judge(d: Derived, rank0_ips: dict[str, str], routes: dict[str, Route]) -> Problem | None:
    """H3's one red for the master address (None: it is usable): :func:`problems`, each in
    turn where there are several (the value is unusable from some peers for two reasons)."""
    found = problems(d, rank0_ips, routes)
    if len(found) <= 1:
        return found[0] if found else None
    return Problem((d.site,), found[0].cause, "\n".join(p.message for p in found),
                   fix="; ".join(dict.fromkeys(p.fix for p in found)), item=ITEM,
                   facts=found[0].facts)


def _not_derived(d: Derived) -> Problem:
    """DeepSpeed's `ssh <first host> hostname -I` gives no value: the launch stops."""
    fix = f"pass --master_addr {d.suggested}"
    if d.stdout is None:
        return _red(d, HostfileCause.MASTER_ADDR_NOT_DERIVED,
                    f"`{d.command}` did not run on {d.site} ({d.stderr.strip() or 'no output'}).",
                    fix)
    if d.exit_status != 0:
        lines = (d.stderr.strip() or d.stdout.strip() or "nothing").splitlines()
        # GNU and busybox tools name the refused option first, then "Try '... --help'" or
        # their usage: the line that says why, else the last one
        refusal = re.compile(r"invalid option|unrecognized option|illegal option|usage",
                             re.IGNORECASE)
        said = next((ln.strip() for ln in lines if refusal.search(ln)), lines[-1].strip())
        cause = ("this `hostname` has no -I option" if refusal.search(said)
                 else f"it exited {d.exit_status}")
        return _red(d, HostfileCause.MASTER_ADDR_NOT_DERIVED,
                    f"DeepSpeed cannot derive --master_addr: `{d.command}` on {d.site} fails "
                    f"({cause}: {said}), so deepspeed stops before starting any rank.", fix)
    return _red(d, HostfileCause.MASTER_ADDR_NOT_DERIVED,
                f"DeepSpeed cannot derive --master_addr: `{d.command}` on {d.site} prints "
                f"nothing on stdout, so deepspeed stops before starting any rank.", fix)


def _not_an_address(d: Derived, value: str, rank0_ips: dict[str, str]) -> list[Problem]:
    """A name as the value: given (fine where it is the rank-0 node's own: N1/N2 judge how
    every node resolves it), or a word a startup file printed before `hostname -I`'s."""
    if d.how == "given":
        if value in (d.first_host, d.site):
            return []  # the rank-0 node's own name: N1/N2 judge how every node resolves it
        return [_red(d, HostfileCause.MASTER_ADDR_NOT_RANK0,
                     f"--master_addr {value} is not the first host of the launch "
                     f"({d.first_host}, addresses {', '.join(sorted(rank0_ips)) or 'unknown'}); "
                     f"rank 0 runs on {d.first_host}, so the other ranks would wait for a "
                     f"rendezvous that never comes.",
                     f"--master_addr {d.suggested}, or move the host of {value} to the first "
                     f"line")]
    line = next((ln for ln in d.noise if value in ln.split()), value)
    origin = (f"{d.printed_at[0]}:{d.printed_at[1]} prints it" if d.printed_at
              else "a shell startup file prints it")
    return [_red(d, HostfileCause.MASTER_ADDR_PRINTED,
                 f"DeepSpeed will use '{value}' as --master_addr: it takes the first word of "
                 f"what `{d.command}` prints on {d.site}, and the remote shell prints "
                 f"'{line.strip()}' before `hostname -I` ({origin}); every rank would wait for "
                 f"a rendezvous at '{value}'.", _startup_fix(d))]


def _address_problems(d: Derived, ip: str, rank0_ips: dict[str, str],
                      routes: dict[str, Route]) -> list[Problem]:
    """An address as the value: one of the rank-0 node's that every peer routes to, and that
    no peer owns as well."""
    what = ("--master_addr" if d.how == "given" else
            f"the --master_addr DeepSpeed derives (first word of `{d.command}`, run on {d.site})")
    owner = rank0_ips.get(ip)
    fix = f"pass --master_addr {d.suggested}"
    if ipaddress.ip_address(ip).is_loopback or (owner or "").startswith(VIRTUAL_PREFIXES):
        return [_red(d, HostfileCause.MASTER_ADDR_UNREACHABLE,
                     f"{what} is {ip}, an address of {owner or 'loopback'} on {d.first_host}, "
                     f"which the other nodes cannot reach.", fix)]
    if owner is None:
        return [_red(d, HostfileCause.MASTER_ADDR_NOT_RANK0,
                     f"{what} is {ip}, which is not an address of {d.first_host} (rank 0; its "
                     f"addresses: {', '.join(sorted(rank0_ips)) or 'none'}): the other ranks "
                     f"would wait for a rendezvous that never comes.", fix)]
    local = sorted(p for p, r in routes.items() if r.local)
    unroutable = sorted(p for p, r in routes.items() if not r.ok)
    out = []
    if unroutable:
        out.append(_red(
            d, HostfileCause.MASTER_ADDR_UNREACHABLE,
            f"{what} is {ip} ({owner} on {d.first_host}), and "
            + "; ".join(f"{p} has no route to it ({routes[p].text})" for p in unroutable)
            + ": those ranks cannot reach the rendezvous.",
            f"pass --master_addr with an address of {d.first_host} its peers reach "
            f"(e.g. --master_addr {d.suggested})"))
    if local:
        out.append(_red(
            d, HostfileCause.MASTER_ADDR_SHARED,
            f"{what} is {ip} ({owner} on {d.first_host}), but {', '.join(local)} "
            f"{'has' if len(local) == 1 else 'have'} that address too: their ranks would "
            f"connect to themselves.", fix))
    return out
