"""Node-side: the launch rehearsal's stand-in for `-m deepspeed.launcher.launch` (CHECKLIST E5).

pdsh runs this on every node exactly where the launch would run `deepspeed.launcher.launch`:
after DeepSpeed's exports and `cd <launch dir>;`, with the launching interpreter's absolute
path and `-u`.  It imports what the launch and the first line of a training script import,
each step timed and caught, and prints one line `CT_REHEARSAL:{json}` (before each step a line
`CT_STEP:<step>`, so that a hang names its step).  Standard library only; Python 3.6+.

After the imports it reports what the first step builds (CHECKLIST E7, ``jit`` in the JSON):
DeepSpeed's JIT ops for this accelerator, the extensions directory torch builds them in and
Triton's cache directory (each: exists, writable, free space, identity), every build ``lock``
there with its age and the processes holding or building it, and the ``ninja`` and C++
compiler torch's builder calls, all as this very process (the launch's interpreter, exports
and directory) finds them.  It builds nothing, and creates nothing but a scratch file that it
removes at once.

It also reports the versions CHECKLIST E3 compares (``versions`` in the JSON: the keys of
envprobe.py's ``versions`` section), from this same import, so that each node starts the
interpreter and imports torch once for E3 and E5 together; and E6's temporary directories
(``tmpdir``: tmpdirs.py, as envprobe.py's ``tmpdir`` section reports them) as this process, with
the rank's exports and environment, finds them.
"""

import csv
import faulthandler
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

MARK = "CT_REHEARSAL:"
#: module -> distribution whose metadata should describe it
PACKAGES = (("torch", "torch"), ("deepspeed", "deepspeed"), ("torch_npu", "torch_npu"))


def _error(exc):
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[-1500:]


def _owned(dist, path):
    """Whether the distribution's RECORD lists `path` (None: cannot tell, e.g. an editable
    install, whose files live in a source tree)."""
    try:
        direct = dist.read_text("direct_url.json") or ""
        if json.loads(direct or "{}").get("dir_info", {}).get("editable"):
            return None
        base = os.path.realpath(str(dist.locate_file("")))
        rel = os.path.relpath(os.path.realpath(path), base)
        record = dist.read_text("RECORD")
        if record is not None:
            # the one line, not `dist.files`: torch's RECORD is 16,000 paths made into objects,
            # a quarter of a second on every node of every run
            want = rel.replace(os.sep, "/")
            lines = [line for line in record.splitlines() if want in line]
            return any(row and row[0] == want for row in csv.reader(lines))
        files = dist.files  # an egg-info's installed-files.txt
        if files is None:
            return None
        return rel in set(str(f) for f in files)
    except Exception:
        return None


def _package(module_name, dist_name):
    mod = sys.modules.get(module_name)
    dist = distribution(dist_name)
    info = {"dist_version": dist.version if dist is not None else None, "dist_location": None}
    if dist is not None:
        try:
            info["dist_location"] = str(dist.locate_file(""))
        except Exception:
            pass
    if mod is None:
        info["imported"] = False
        return info
    info["imported"] = True
    info["version"] = getattr(mod, "__version__", None)
    if info["version"] is not None:
        info["version"] = str(info["version"])
    info["file"] = getattr(mod, "__file__", None)
    paths = getattr(mod, "__path__", None)
    info["paths"] = [str(p) for p in paths][:4] if paths is not None else []
    info["owned"] = _owned(dist, info["file"]) if dist is not None and info["file"] else None
    return info


def _accelerator_kind():
    if shutil.which("nvidia-smi") or os.path.exists("/dev/nvidiactl"):
        return "cuda"
    if shutil.which("npu-smi") or os.path.exists("/dev/davinci_manager"):
        return "npu"
    return None


#: how many processes (holders/builders) are reported per lock
HOLDERS_CAP = 8


def _ext_root():
    """torch.utils.cpp_extension._get_build_directory's root, without creating it: the value of
    TORCH_EXTENSIONS_DIR as it is, else get_default_build_root()/py<maj><min><abiflags>_<cpu|cuXY|
    rocmXY> (torch 2.x names the folder so)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is not None:
        return root, "TORCH_EXTENSIONS_DIR"
    import torch
    base = _default_build_root(torch)
    hip = getattr(torch.version, "hip", None)
    if hip is not None:
        flavour = "rocm" + hip.replace(".", "")
    elif torch.version.cuda is not None:
        flavour = "cu" + torch.version.cuda.replace(".", "")
    else:
        flavour = "cpu"
    folder = "py%d%d%s_%s" % (sys.version_info[0], sys.version_info[1],
                              getattr(sys, "abiflags", ""), flavour)
    return os.path.join(base, folder), "torch's default"


#: the body of torch.utils.cpp_extension.get_default_build_root in torch 1.x-2.x
BUILD_ROOT_BODY = ("return os.path.realpath("
                   "torch._appdirs.user_cache_dir(appname='torch_extensions'))")


def _default_build_root(torch):
    """torch.utils.cpp_extension.get_default_build_root(), without importing that module
    (it imports setuptools: 0.15 s on every node) where its source shows the body it has had
    since torch 1.x; otherwise the function itself."""
    loaded = sys.modules.get("torch.utils.cpp_extension")
    if loaded is None:
        try:
            with open(os.path.join(os.path.dirname(torch.__file__), "utils",
                                   "cpp_extension.py")) as fh:
                text = fh.read()
            body = text.split("def get_default_build_root(", 1)[1].split("\ndef ", 1)[0]
            if BUILD_ROOT_BODY in body:
                import torch._appdirs
                return os.path.realpath(torch._appdirs.user_cache_dir(appname="torch_extensions"))
        except (OSError, IndexError, AttributeError, ImportError):
            pass
    from torch.utils.cpp_extension import get_default_build_root
    return get_default_build_root()


def _triton_dir():
    if os.environ.get("TRITON_CACHE_DIR"):
        return os.environ["TRITON_CACHE_DIR"], "TRITON_CACHE_DIR"
    home = os.environ.get("TRITON_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".triton", "cache"), ("TRITON_HOME" if os.environ.get("TRITON_HOME")
                                                    else "Triton's default")


def _dir_facts(path):
    """exists, identity (inode, ctime), and for the directory or, where it does not exist yet,
    the nearest existing parent (which torch's makedirs would create it in): a file really
    created and removed there, and the free space."""
    d = {"path": path, "exists": os.path.isdir(path)}
    probe = path
    while not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    d["checked"] = probe
    try:
        st = os.stat(path)
        d["ino"], d["ctime_ns"], d["uid"] = st.st_ino, st.st_ctime_ns, st.st_uid
    except OSError:
        pass
    try:
        fd, name = tempfile.mkstemp(prefix=".ct_jit_", dir=probe)
        os.close(fd)
        os.unlink(name)
        d["writable"] = True
    except OSError as exc:
        d["writable"] = False
        d["write_error"] = str(exc)
    try:
        vfs = os.statvfs(probe)
        d["free_bytes"] = vfs.f_bavail * vfs.f_frsize
    except OSError:
        d["free_bytes"] = None
    return d


def _proc_scan(locks, op_dirs):
    """pid facts of the processes that hold a lock open (torch's FileBaton keeps the fd of the
    lock it created until it removes it) or run in / name an op's directory (ninja, c++, cc1plus
    run with cwd in it), as far as /proc shows them (this user's processes)."""
    found = {}
    me = os.getpid()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
    except OSError:
        return found
    for pid in pids:
        base = "/proc/" + pid
        why = []
        try:
            for fd in os.listdir(base + "/fd"):
                try:
                    target = os.readlink(base + "/fd/" + fd)
                except OSError:
                    continue
                if target in locks:
                    why.append(("holds", target))
        except OSError:
            pass
        try:
            cwd = os.readlink(base + "/cwd")
        except OSError:
            cwd = ""
        try:
            with open(base + "/cmdline", "rb") as fh:
                cmd = fh.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            cmd = ""
        for d in op_dirs:
            if cwd == d or cwd.startswith(d + "/") or (d + "/") in cmd:
                why.append(("builds", d))
        for kind, what in why:
            found.setdefault(what, []).append(
                {"pid": int(pid), "how": kind, "cwd": cwd, "cmd": cmd[:300]})
    return found


def _newest_mtime(path, cap=2000):
    newest = None
    n = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            n += 1
            if n > cap:
                return newest
            try:
                m = os.lstat(os.path.join(root, name)).st_mtime
            except OSError:
                continue
            newest = m if newest is None or m > newest else newest
    return newest


def _locks(root):
    """Every <root>/<op>/lock: age, identity, and who holds or builds it."""
    locks = []
    try:
        ops = sorted(os.listdir(root))
    except OSError:
        return [], []
    now = time.time()
    for op in ops:
        lock = os.path.join(root, op, "lock")
        try:
            st = os.stat(lock)
        except OSError:
            continue
        newest = _newest_mtime(os.path.join(root, op))
        locks.append({"op": op, "path": lock, "age_s": round(now - st.st_mtime, 1),
                      "ino": st.st_ino, "mtime_ns": st.st_mtime_ns,
                      "activity_age_s": round(now - newest, 1) if newest else None})
    if locks:
        procs = _proc_scan({x["path"] for x in locks},
                           [os.path.dirname(x["path"]) for x in locks])
        for x in locks:
            seen = {}
            for p in procs.get(x["path"], []) + procs.get(os.path.dirname(x["path"]), []):
                seen.setdefault(p["pid"], p)  # a holder is named once, as holding it
            x["processes"] = list(seen.values())[:HOLDERS_CAP]
    return ops, locks


def _tool(argv):
    path = shutil.which(argv[0])
    info = {"name": argv[0], "path": path}
    try:
        proc = subprocess.run(argv + ["--version"], check=False, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=20)
        text = proc.stdout.decode("utf-8", "replace").strip()
        info["ok"] = proc.returncode == 0
        info["version"] = text.splitlines()[0][:200] if text else ""
    except (OSError, subprocess.SubprocessError) as exc:
        info["ok"] = False
        info["error"] = str(exc)[:300]
    return info


def _jit_ops():
    """The ops this launch JIT-loads here: what DeepSpeed builds in init_distributed for this
    accelerator (TorchBackend's build_shm_op: its ShareMemCommBuilder where DeepSpeed deems it
    compatible), DeepSpeed's Adam on a device accelerator (FusedAdamBuilder), and every op a
    previous job built in the extensions directory.  `prebuilt`: installed with DeepSpeed
    (installed_ops), so loaded without a build."""
    from deepspeed.accelerator import get_accelerator
    try:
        from deepspeed.git_version_info import accelerator_name, installed_ops
    except ImportError:
        installed_ops, accelerator_name = {}, ""
    accel = get_accelerator()
    name = getattr(accel, "_name", None) or accel.device_name()
    ops = []

    def add(builder_class, why):
        try:
            b = accel.create_op_builder(builder_class)
        except Exception as exc:
            ops.append({"builder": builder_class, "why": why, "error": str(exc)[:300]})
            return
        if b is None:
            return
        ok = _compatible(b.name)
        ops.append({"name": b.name, "builder": builder_class, "why": why,
                    "absolute_name": b.absolute_name(), "compatible": ok,
                    "prebuilt": bool(installed_ops.get(b.name)) and accelerator_name == name})
    add("ShareMemCommBuilder", "init_distributed (TorchBackend's build_shm_op)")
    if name != "cpu":
        add("FusedAdamBuilder", "DeepSpeed's Adam (FusedAdam)")
    return {"accelerator": name, "op_builder_dir": accel.op_builder_dir(), "ops": ops}


def _compatible(op_name):
    """``deepspeed.ops.__compatible_ops__[op_name]`` as the launch gets it: DeepSpeed 0.17+
    computes that dict on first access, by ``probe_is_compatible`` of every op's builder in
    ``ALL_OPS``, one op independently of the others; this calls it for the op asked about only
    (async_io's probe alone compiles a test program and imports distutils: 0.2 s on every node,
    for an op the first step never builds).  An older DeepSpeed's dict, computed at import, is
    read as it is."""
    import deepspeed.ops
    eager = deepspeed.ops.__dict__.get("__compatible_ops__")
    if eager is None:
        try:
            from deepspeed.ops.op_builder.all_ops import ALL_OPS
            from deepspeed.ops.op_builder.builder import probe_is_compatible
        except ImportError:
            eager = deepspeed.ops.__compatible_ops__
        else:
            if op_name == "deepspeed_not_implemented":  # the dict sets it False after probing
                return False
            builder = ALL_OPS.get(op_name)
            return bool(builder is not None and probe_is_compatible(builder))
    return bool(eager.get(op_name, False))


def jit_facts():
    out = {}
    try:
        out.update(_jit_ops())
    except Exception as exc:
        out["ops_error"] = _error(exc)
    try:
        root, source = _ext_root()
        out["ext"] = _dir_facts(root)
        out["ext"]["source"] = source
        out["ext"]["entries"], out["locks"] = _locks(root)
        out["ext"]["entries"] = out["ext"]["entries"][:64]
    except Exception as exc:
        out["ext_error"] = _error(exc)
    tdir, tsource = _triton_dir()
    out["triton"] = _dir_facts(tdir)
    out["triton"]["source"] = tsource
    try:
        import importlib.util
        out["triton"]["installed"] = importlib.util.find_spec("triton") is not None
    except Exception:
        out["triton"]["installed"] = None
    cxx = os.environ.get("CXX", "c++")
    out["ninja"] = _tool(["ninja"])
    out["cxx"] = _tool([cxx])
    out["cxx"]["from_env"] = "CXX" in os.environ
    out["path"] = os.environ.get("PATH")
    return out


def versions(torch_error):
    """E3's versions (the same keys and values as envprobe.py's `versions` section, which E3 uses
    where this rehearsal did not run; both from versions.py, the part sent before this script),
    from the torch this process already imported."""
    return stack_versions(sys.modules.get("torch") if torch_error is None else None, torch_error)


def _step(out, name, fn):
    """Run one step of the check, named on stdout first (a hang names its step), timed and
    caught into out["steps"]; whether it worked."""
    sys.stdout.write("CT_STEP:%s\n" % name)
    sys.stdout.flush()
    start = time.time()
    rec = {"step": name, "ok": True, "error": None}
    try:
        value = fn()
        if value is not None:
            rec["value"] = value
    except BaseException as exc:  # SystemExit from a broken package too
        rec["ok"] = False
        rec["error"] = _error(exc)
    rec["seconds"] = round(time.time() - start, 3)
    out["steps"].append(rec)
    return rec["ok"]


def _importer(name):
    return lambda: __import__(name) and None


def _cuda_devices():
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False (torch %s, built for CUDA "
                           "%s)" % (torch.__version__, torch.version.cuda))
    n = torch.cuda.device_count()
    if n < 1:
        raise RuntimeError("torch.cuda.device_count() is 0")
    return n


def _npu_devices():
    import torch
    import torch_npu  # noqa: F401
    n = torch.npu.device_count()
    if n < 1:
        raise RuntimeError("torch.npu.device_count() is 0")
    return n


def _imports(out):
    """What the launch and a training script's first line import, each a step; whether torch
    imported."""
    _step(out, "import deepspeed.launcher.launch", _importer("deepspeed.launcher.launch"))
    _step(out, "import deepspeed", _importer("deepspeed"))
    torch_ok = _step(out, "import torch", _importer("torch"))
    if out["accelerator"] == "cuda" and torch_ok:
        _step(out, "torch.cuda.device_count()", _cuda_devices)
    elif out["accelerator"] == "npu" and torch_ok:
        _step(out, "import torch_npu; torch.npu.device_count()", _npu_devices)
    return torch_ok


def _inspect_jit(out):
    """E7's facts into out["jit"], timed (its own step line, outside the import steps)."""
    sys.stdout.write("CT_STEP:inspect JIT ops\n")
    sys.stdout.flush()
    start = time.time()
    try:
        out["jit"] = jit_facts()
    except Exception as exc:
        out["jit"] = {"error": _error(exc)}
    out["jit"]["seconds"] = round(time.time() - start, 3)


def main():
    deadline = globals().get("CT_DEADLINE")  # pdsh's deadline for this leg, set by the launcher
    if deadline:
        # still here just before pdsh ends this leg (a hung import, a dead NFS mount): this
        # process's stacks on stderr, so that the red can say where it hung
        faulthandler.dump_traceback_later(max(1.0, float(deadline) - 5), exit=False)
    out = {"executable": sys.executable, "cwd": os.getcwd(), "pwd": os.environ.get("PWD"),
           "version": sys.version.split()[0],
           "sys_path": sys.path[:16], "pythonpath": os.environ.get("PYTHONPATH"),
           "steps": [], "accelerator": _accelerator_kind()}
    torch_ok = _imports(out)
    out["packages"] = {m: _package(m, d) for m, d in PACKAGES}
    torch_step = [s for s in out["steps"] if s["step"] == "import torch"][0]
    out["versions"] = versions(torch_step["error"])
    if "deepspeed" in sys.modules and torch_ok:
        _inspect_jit(out)
    # E6 from the rank's own environment (exports applied), not from another shell's
    out["tmpdir"] = tmpdir_facts(os.environ.get("TMPDIR"), None)
    if deadline:
        faulthandler.cancel_dump_traceback_later()
    sys.stdout.write(MARK + json.dumps(out) + "\n")
    sys.stdout.flush()


main()
