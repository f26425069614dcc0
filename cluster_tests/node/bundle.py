"""Several probe sections in one interpreter, for the launcher's prefetch (`Cluster.prefetch`):
instead of one command per section (each an ssh channel, a shell and a Python start-up on the
node), one command runs them all.  Standard library only, Python >= 3.6.

What arrives on stdin is this text followed by ``bundle_main(SOURCES)``, SOURCES being
{script name: its source} (`cluster_tests.node.bundle_source`).  argv[1] is JSON
``{"bundle": [[script, section, params], ...], "timeout": seconds}``.

Each script is run once, in a namespace of its own (not as __main__, so its own protocol does
not start), and each section runs in a thread of its own: one that hangs holds up no other.  A
section's facts are printed as soon as it ends, as one line ``CT_BUNDLE_JSON:[index, data]``,
`data` being ``{"error": ...}`` when it raised, or when it did not end within its params'
"timeout" (else argv's).  The command ends when every section has been answered for.

Only sections that leave the process as they found it belong in a bundle (no chdir, no
environment changes, no signal handlers): the probes that check modules declare in
`node_probes`."""
import json
import os
import sys
import threading
import time

BUNDLE_MARK = "CT_BUNDLE_JSON:"
NODE_MARK = "CT_BUNDLE_NODE:"


def bundle_main(sources):
    args = json.loads(sys.argv[1])
    if os.environ.get("SLURMD_NODENAME"):
        sys.stdout.write(NODE_MARK + os.environ["SLURMD_NODENAME"] + "\n")
        sys.stdout.flush()
    wanted = args.get("bundle", [])
    default_timeout = float(args.get("timeout", 60))
    start = time.monotonic()
    out_lock = threading.Lock()
    said = set()
    done = threading.Condition(out_lock)

    def say(index, data):
        try:
            text = json.dumps([index, data])
        except (TypeError, ValueError) as exc:
            text = json.dumps([index, {"error": "unreadable facts: %s" % exc}])
        with out_lock:
            if index in said:
                return
            said.add(index)
            sys.stdout.write("\n" + BUNDLE_MARK + text + "\n")
            sys.stdout.flush()
            done.notify_all()

    spaces = {}
    for name in sorted({script for script, _, _ in wanted}):
        space = {"__name__": "ct_bundled", "__file__": "<%s>" % name}
        try:
            exec(compile(sources[name], "<%s>" % name, "exec"), space)
        except Exception as exc:  # noqa: BLE001 - each of its sections reports it
            space = {"_ct_error": "%s: %s" % (type(exc).__name__, exc)}
        spaces[name] = space

    def one(index, script, section, params):
        space = spaces[script]
        fn = space.get("section_" + section)
        if "_ct_error" in space:
            say(index, {"error": space["_ct_error"]})
        elif not callable(fn):
            say(index, {"error": "unknown section"})
        else:
            try:
                say(index, fn(dict(params, sections=[section])))
            except Exception as exc:  # noqa: BLE001 - report, never crash: the rest count
                say(index, {"error": "%s: %s" % (type(exc).__name__, exc)})

    deadlines = {}
    for index, (script, section, params) in enumerate(wanted):
        deadlines[index] = start + float(params.get("timeout", default_timeout))
        threading.Thread(target=one, args=(index, script, section, params), daemon=True).start()
    while True:
        with out_lock:
            left = [i for i in deadlines if i not in said]
            if not left:
                return
            now = time.monotonic()
            late = [i for i in left if deadlines[i] <= now]
            if not late:
                done.wait(min(deadlines[i] for i in left) - now)
                continue
        for i in late:
            say(i, {"error": "did not finish within %gs" % (deadlines[i] - start)})
