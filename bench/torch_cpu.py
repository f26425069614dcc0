"""How much of a command's CPU goes to processes that import torch: the floor of the project's
own test time, since every rank, launch.py, runner, rehearsal leg and C2 pair worker on the
simulated nodes is such a process, and none of them can be left out without leaving out the
case that starts it.

    .venv/bin/python bench/torch_cpu.py -- .venv/bin/python -m pytest tests/e2e -n 2 ...

For the command's duration, a ``sitecustomize.py`` in this checkout's venv (none may be there
already) makes every process of the venv that imported torch append one line, its own CPU
seconds and command line, to ``.sim/torch_cpu/torch.jsonl`` when it exits (normally or through
``os._exit``; a SIGKILLed process writes nothing, so the sum is a lower bound). The nodes of the
simulated cluster run this venv's interpreter and share the checkout's filesystem, so their
processes are counted too. Printed: the machine's CPU seconds over the command (``/proc/stat``,
every process on it), the torch processes' sum, and that sum by kind of process.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from scale import busy_cpu_seconds  # noqa: E402

LOG_DIR = REPO / ".sim" / "torch_cpu"

HOOK = '''\
# written by bench/torch_cpu.py for one measurement, removed after it
import os
import sys

if os.path.exists(%(on)r):
    import atexit

    def _ct_record(how):
        try:
            if "torch" not in sys.modules:
                return
            import json
            import resource
            ru = resource.getrusage(resource.RUSAGE_SELF)
            line = json.dumps({"cpu": ru.ru_utime + ru.ru_stime, "how": how,
                               "pytest": "_pytest" in sys.modules,
                               "argv": " ".join([sys.executable] + sys.argv)[:300]})
            fd = os.open(%(log)r, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            os.write(fd, (line + "\\n").encode())
            os.close(fd)
        except Exception:
            pass

    atexit.register(_ct_record, "exit")
    _ct_exit = os._exit

    def _ct_recorded_exit(code, _exit=_ct_exit):
        _ct_record("_exit")
        _exit(code)

    os._exit = _ct_recorded_exit
'''

#: (kind, words that all appear in the command line), first match wins
KINDS = (
    ("C1/C2 all-reduce rank", ("--world-size",)),
    ("T1/T2 rank (train_smoke.py)", ("train_smoke.py",)),
    ("DeepSpeed launch.py", ("deepspeed/launcher/launch.py",)),
    ("DeepSpeed runner", ("deepspeed/launcher/runner.py",)),
    ("DeepSpeed runner", ("bin/deepspeed ",)),
    ("a test's own launch rank (train.py)", ("train.py",)),
    ("rehearsal leg / launch probe (python -c)", ("-c",)),
)


def kind(row: dict) -> str:
    if row.get("pytest"):
        return "pytest itself (an xdist worker, or a test's run of the suite)"
    argv = row["argv"]
    for name, words in KINDS:
        if all(w in argv for w in words):
            return name
    return "other: " + argv[:60]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", nargs="+", help="the command (after --)")
    a = ap.parse_args()
    site = Path(sysconfig.get_paths(vars={"base": str(REPO / ".venv"),
                                          "platbase": str(REPO / ".venv")})["purelib"])
    hook = site / "sitecustomize.py"
    if hook.exists():
        sys.exit(f"{hook} exists already: not replacing it")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log, on = LOG_DIR / "torch.jsonl", LOG_DIR / "on"
    log.unlink(missing_ok=True)
    log.touch()
    log.chmod(0o666)  # a regular user's processes on the nodes append to it too
    on.touch()
    hook.write_text(HOOK % {"on": str(on), "log": str(log)})
    cpu0, t0 = busy_cpu_seconds(), time.monotonic()
    try:
        rc = subprocess.run(a.command, check=False).returncode
    finally:
        hook.unlink()
        on.unlink()
    cpu, wall = busy_cpu_seconds() - cpu0, time.monotonic() - t0
    rows = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
    by: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for r in rows:
        k = kind(r)
        by[k] += r["cpu"]
        count[k] += 1
    torch_s = sum(by.values())
    print(f"exit {rc}; {wall:.0f} s wall; the machine's CPU over it: {cpu:.0f} s "
          f"({os.cpu_count()} cores)")
    print(f"processes that imported torch: {len(rows)}, {torch_s:.0f} CPU s "
          f"({100 * torch_s / max(cpu, 1e-9):.0f} % of the machine's)")
    for name, seconds in by.most_common():
        print(f"  {seconds:8.1f} s  {count[name]:5d}  {name}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
