"""The prelude shared by the probe-family node-side scripts: cluster_tests.node.source() sends
this text followed by the script, so the script runs alone (Python 3.6+, standard library only)
but never repeats these helpers.

Used by: probe.py, envprobe.py, netprobe.py, healthprobe.py, storeprobe.py (node.PARTS).
Not used by allreduce.py, train_smoke.py, rehearse.py: they share nothing with it (no JSON
sections, no capped commands).

A script must not define any name defined here (tests/unit/test_node_prelude.py checks it)."""
import json
import shutil
import subprocess
import sys
import threading
import time

MARK = "CT_PROBE_JSON:"


def run_command(argv, timeout, out_cap, err_cap, env=None):
    """Run argv with a timeout; keep the last out_cap/err_cap characters of stdout/stderr."""
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, env=env)
        return {"rc": proc.returncode, "out": proc.stdout.decode("utf-8", "replace")[-out_cap:],
                "err": proc.stderr.decode("utf-8", "replace")[-err_cap:],
                "seconds": time.monotonic() - start}
    except FileNotFoundError:
        return {"rc": 127, "out": "", "err": "%s: command not found" % argv[0], "seconds": 0.0}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "out": "", "err": "timed out after %ss" % timeout, "seconds": timeout}
    except OSError as exc:
        return {"rc": 126, "out": "", "err": str(exc), "seconds": 0.0}


def run_quiet(argv, timeout, out_cap, err_cap):
    """run_command without the "seconds" entry (what most probes report)."""
    result = run_command(argv, timeout, out_cap, err_cap)
    del result["seconds"]
    return result


def read_text(path, limit=1024 * 1024):
    """The first `limit` bytes of a file as text (None when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


#: where administration tools live that a regular user's PATH often lacks (Debian's and
#: Ubuntu's: /usr/sbin is on root's PATH only)
ADMIN_DIRS = "/usr/sbin:/sbin"


def admin_tool(name):
    """`name` on PATH, else in ADMIN_DIRS (None: not installed). A tool found there still runs
    as the login user: as a regular user, `iptables -S` then says it needs root."""
    return shutil.which(name) or shutil.which(name, path=ADMIN_DIRS)


def in_parallel(fn, items):
    """fn(item) for every item, each in its own thread; returns when all are done."""
    threads = [threading.Thread(target=fn, args=(item,)) for item in items]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def probe_main(namespace, default=()):
    """The probe protocol: argv[1] is JSON {"sections": [...], ...}; each section's facts (or
    {"error": ...}) are printed as one JSON line after MARK.  A section NAME is the script's
    function `section_NAME(params)` (`namespace` is the script's globals())."""
    sections = {k[len("section_"):]: v for k, v in namespace.items()
                if k.startswith("section_") and callable(v)}
    params = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    result = {}
    for name in params.get("sections", list(default)):
        fn = sections.get(name)
        if fn is None:
            result[name] = {"error": "unknown section"}
            continue
        try:
            result[name] = fn(params)
        except Exception as exc:  # report, never crash: the launcher needs the rest
            result[name] = {"error": "%s: %s" % (type(exc).__name__, exc)}
    sys.stdout.write("\n" + MARK + json.dumps(result) + "\n")
    sys.stdout.flush()
