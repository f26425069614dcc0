"""Node-side environment probe (CHECKLIST E1-E6, A1): files the launch reads, versions, devices.

Same protocol as probe.py: argv[1] is JSON {"sections": [...], ...}; one line
`CT_PROBE_JSON:{section: data}` on stdout.  Runs in the non-interactive ssh shell pdsh gets.
Standard library only (torch is imported inside `versions`/`devices`, once, if present).

Sections:
  envfiles  ~/.bashrc text, and `.deepspeed_env` (DS_ENV_FILE) in home and the launch directory
  versions  Python, torch (+CUDA, NCCL), deepspeed, torch_npu, CANN, drivers
  devices   allocate a small tensor on every device torch (or torch_npu) sees
  ascend    HCCL_* variables, and `hccn_tool -i N -link -g` for every NPU
  launch    (rank-0 node) how `deepspeed` would start here: the interpreter its entry point runs,
            and, from that interpreter in the launch directory, DeepSpeed's own export rules, the
            accelerator it picks, its environment and the `.deepspeed_env` files it reads
  tmpdir    TMPDIR as the ranks get it, the directory Python's tempfile settles on, and for each:
            exists, a file really created there, free space
  launchfiles  the launch directory (is it one), and for each path the launch names: a file's
            size and SHA-256 (up to digest_max bytes), a directory's files with their sizes
            (run on the launcher too, the copy the nodes are compared with)
"""

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess

#: how much of an environment file (.deepspeed_env, .bashrc) is read
ENV_FILE_CAP = 256 * 1024


def run(argv, timeout=10.0):
    return run_quiet(argv, timeout, 100000, 10000)


def section_envfiles(params):
    home = os.path.expanduser("~")
    name = os.environ.get("DS_ENV_FILE", ".deepspeed_env")
    dirs = [home]
    launch_dir = params.get("launch_dir") or os.getcwd()
    if os.path.abspath(launch_dir) != os.path.abspath(home):
        dirs.append(launch_dir)
    files = {}
    for d in dirs:
        path = os.path.join(d, name)
        files[path] = read_text(path, ENV_FILE_CAP) if os.path.isfile(path) else None
    return {"home": home, "cwd": os.getcwd(), "ds_env_name": name, "deepspeed_env": files,
            "bashrc": read_text(os.path.join(home, ".bashrc"), ENV_FILE_CAP)}


def section_versions(params):
    """E3's versions (versions.py, the part sent before this script)."""
    try:
        import torch
    except Exception as exc:
        return stack_versions(None, "%s: %s" % (type(exc).__name__, exc))
    return stack_versions(torch, None)


def section_devices(params):
    out: dict = {"torch": None, "error": None, "kind": None, "count": 0, "devices": []}
    try:
        import torch
    except Exception as exc:
        out["error"] = "torch not importable: %s: %s" % (type(exc).__name__, exc)
        return out
    out["torch"] = torch.__version__
    backend = None
    if params.get("npu"):
        try:
            import torch_npu  # noqa: F401
            backend = ("npu", torch.npu)
        except Exception as exc:
            out["error"] = "torch_npu not importable: %s: %s" % (type(exc).__name__, exc)
    if backend is None and not params.get("npu"):
        backend = ("cuda", torch.cuda)
    if backend is None:
        return out
    kind, mod = backend
    out["kind"] = kind
    try:
        out["count"] = int(mod.device_count()) if mod.is_available() else 0
    except Exception as exc:
        out["error"] = "%s.device_count() failed: %s" % (kind, exc)
        return out
    for i in range(out["count"]):
        try:
            t = torch.ones(1024, device="%s:%d" % (kind, i))
            ok = float(t.sum().item()) == 1024.0
            out["devices"].append({"index": i, "ok": ok, "error": None if ok else "wrong sum"})
        except Exception as exc:
            out["devices"].append({"index": i, "ok": False,
                                   "error": "%s: %s" % (type(exc).__name__, exc)})
    return out


def section_ascend(params):
    env = {k: v for k, v in os.environ.items() if k.startswith("HCCL_")}
    tool = shutil.which("hccn_tool")
    links = {}
    if tool:
        for dev in params.get("devices", []):
            links[str(dev)] = run([tool, "-i", str(dev), "-link", "-g"], timeout=10)
    return {"env": env, "hccn_tool": tool, "npu_smi": shutil.which("npu-smi"), "links": links}


def _entry_interpreter(path):
    """The interpreter a console script runs: its `#!` line (resolving `/usr/bin/env NAME`), or
    pip's `#!/bin/sh` + `'''exec' "/path/python" "$0" "$@"` form for long paths."""
    text = read_text(path, 4096) or ""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("#!"):
        return None, lines[0] if lines else ""
    words = lines[0][2:].split()
    if not words:
        return None, lines[0]
    if os.path.basename(words[0]) == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        return (shutil.which(rest[0]) if rest else None), lines[0]
    if os.path.basename(words[0]) in ("sh", "bash") and len(lines) > 1:
        m = re.match(r"""^'''exec' "?([^" ]+)"? """, lines[1])
        if m:
            return m.group(1), lines[0]
    return words[0], lines[0]


# Run by the launching interpreter in the launch directory: what DeepSpeed's runner reads there.
LAUNCH_FACTS = r"""
import json, os, sys, traceback
out = {"executable": sys.executable, "cwd": os.path.abspath("."), "env": dict(os.environ)}
try:
    import deepspeed
    import deepspeed.launcher.runner as r
    from deepspeed.accelerator import get_accelerator
    acc = get_accelerator()
    out["deepspeed"] = getattr(deepspeed, "__version__", None)
    out["accelerator"] = getattr(acc, "_name", None)
    out["export_envs"] = list(acc.export_envs())
    out["EXPORT_ENVS"] = list(r.EXPORT_ENVS)
    out["EXCLUDE_ENVS"] = dict((k, list(v)) for k, v in getattr(r, "EXCLUDE_ENVS", {}).items())
    name = r.DEEPSPEED_ENVIRONMENT_NAME
    files = []
    for d in r.DEEPSPEED_ENVIRONMENT_PATHS:
        f = os.path.join(d, name)
        if os.path.isfile(f):
            with open(f, "rb") as fh:
                files.append([os.path.abspath(f), fh.read(262144).decode("utf-8", "replace")])
    out["env_files"] = files
    out["env_file_name"] = name
except BaseException:
    out["error"] = "".join(traceback.format_exc()).strip()[-3000:]
sys.stdout.write("\nCT_LAUNCH_FACTS:" + json.dumps(out) + "\n")
"""


def section_launch(params):
    home = os.path.expanduser("~")
    launch_dir = os.path.abspath(os.path.expanduser(params.get("launch_dir") or home))
    out: dict = {"home": home, "launch_dir": launch_dir, "launch_dir_ok": os.path.isdir(launch_dir),
           "path": os.environ.get("PATH", ""), "deepspeed_on_path": shutil.which("deepspeed"),
           "pdsh": shutil.which("pdsh")}
    # the `deepspeed` the user's own (interactive) shell runs, when the suite found one
    given = params.get("deepspeed")
    out["deepspeed"] = given if given and os.access(given, os.X_OK) else out["deepspeed_on_path"]
    if not out["deepspeed"]:
        return out
    out["interpreter"], out["shebang"] = _entry_interpreter(out["deepspeed"])
    if not out["interpreter"] or not out["launch_dir_ok"]:
        return out
    try:
        proc = subprocess.Popen([out["interpreter"], "-c", LAUNCH_FACTS], cwd=launch_dir,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        out["facts_error"] = "%s: %s" % (out["interpreter"], exc)
        return out
    try:
        stdout, stderr = proc.communicate(timeout=float(params.get("import_timeout", 120)))
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        rc = 124
    text = stdout.decode("utf-8", "replace")
    for line in reversed(text.splitlines()):
        if line.startswith("CT_LAUNCH_FACTS:"):
            out["facts"] = json.loads(line[len("CT_LAUNCH_FACTS:"):])
            break
    else:
        out["facts_error"] = "exit %s: %s" % (rc, (stderr.decode("utf-8", "replace")
                                                   or text).strip()[-3000:])
    return out


def section_tmpdir(params):
    """E6, where the rehearsal's own leg did not report it (tmpdirs.py). `tmpdir` in params:
    the value the launch exports (from .deepspeed_env), which then replaces this shell's."""
    given = params.get("tmpdir")
    return tmpdir_facts(given if given is not None else os.environ.get("TMPDIR"),
                        given is not None)


def section_launchfiles(params):
    launch_dir = params["launch_dir"]
    return {"launch_dir": launch_dir, "dir_ok": os.path.isdir(launch_dir),
            "paths": {p: describe_path(p, int(params.get("digest_max", 1 << 25)),
                                       int(params.get("entries_max", 20000)))
                      for p in params.get("paths", [])}}


def describe_path(path, digest_max, entries_max):
    """What `path` is here: a file's size and digest, a directory's files and their sizes."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"kind": "missing"}
    except OSError as exc:
        return {"kind": "other", "error": "%s: %s" % (type(exc).__name__, exc)}
    if stat.S_ISREG(st.st_mode):
        out = {"kind": "file", "size": st.st_size, "sha256": None}
        if st.st_size <= digest_max:
            try:
                out["sha256"] = file_sha256(path)
            except OSError as exc:
                return {"kind": "other", "error": "unreadable: %s" % exc}
        return out
    if not stat.S_ISDIR(st.st_mode):
        return {"kind": "other", "error": "neither a file nor a directory"}
    listing, digest, count = [], hashlib.sha256(), 0
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            try:
                size = os.lstat(full).st_size
            except OSError:
                continue
            rel = os.path.relpath(full, path)
            digest.update(("%s\t%d\n" % (rel, size)).encode("utf-8", "surrogateescape"))
            count += 1
            if count <= entries_max:
                listing.append([rel, size])
        if count > entries_max:
            break
    return {"kind": "dir", "count": count, "listing": listing,
            "listing_sha256": digest.hexdigest()}


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


if __name__ == "__main__":
    probe_main(globals())
