"""The CPU seconds (user + system) of a command and of every process it starts, on the launcher
and on the simulated nodes, and its wall time: the figure that does not depend on what else runs
on the machine.

    .venv/bin/python bench/cpu_of.py -- .venv/bin/python -m pytest tests/e2e/test_e2e_env.py -q
    .venv/bin/python bench/cpu_of.py -- make test

This process makes itself the child subreaper, so the processes its command's processes leave
behind (the nodes' sshd children, daemonized ones) are reaped here, and their CPU time lands in
RUSAGE_CHILDREN with the rest. It prints one line on stderr at the end and exits with the
command's status.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """The orphans of this process's descendants are reparented to it (and reaped here)."""
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def children_cpu() -> float:
    """CPU seconds (user + system) of every reaped descendant so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    become_subreaper()
    start = time.monotonic()
    proc = subprocess.Popen(argv)
    rc = 0
    while True:  # every child, the command's orphans too, until none is left
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == proc.pid:
            rc = os.waitstatus_to_exitcode(status)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"cpu_s={ru.ru_utime + ru.ru_stime:.1f} user_s={ru.ru_utime:.1f} "
          f"sys_s={ru.ru_stime:.1f} wall_s={time.monotonic() - start:.1f} rc={rc}",
          file=sys.stderr, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
