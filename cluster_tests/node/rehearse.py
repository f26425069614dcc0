"""Node-side: the launch rehearsal's stand-in for `-m deepspeed.launcher.launch` (CHECKLIST E5).

pdsh runs this on every node exactly where the launch would run `deepspeed.launcher.launch`:
after DeepSpeed's exports and `cd <launch dir>;`, with the launching interpreter's absolute
path and `-u`.  It imports what the launch and the first line of a training script import,
each step timed and caught, and prints one line `CT_REHEARSAL:{json}` (before each step a line
`CT_STEP:<step>`, so that a hang names its step).  Standard library only; Python 3.6+.
"""

import json
import os
import shutil
import sys
import time
import traceback

MARK = "CT_REHEARSAL:"
#: module -> distribution whose metadata should describe it
PACKAGES = (("torch", "torch"), ("deepspeed", "deepspeed"), ("torch_npu", "torch_npu"))


def _error(exc):
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[-1500:]


def _dist(name):
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8: no metadata to compare with
        return None
    try:
        return metadata.distribution(name)
    except Exception:
        return None


def _owned(dist, path):
    """Whether the distribution's RECORD lists `path` (None: cannot tell, e.g. an editable
    install, whose files live in a source tree)."""
    try:
        direct = dist.read_text("direct_url.json") or ""
        if json.loads(direct or "{}").get("dir_info", {}).get("editable"):
            return None
        files = dist.files
        if files is None:
            return None
        base = os.path.realpath(str(dist.locate_file("")))
        rel = os.path.relpath(os.path.realpath(path), base)
        return rel in set(str(f) for f in files)
    except Exception:
        return None


def _package(module_name, dist_name):
    mod = sys.modules.get(module_name)
    dist = _dist(dist_name)
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


def main():
    out = {"executable": sys.executable, "cwd": os.getcwd(), "pwd": os.environ.get("PWD"),
           "version": sys.version.split()[0],
           "sys_path": sys.path[:16], "pythonpath": os.environ.get("PYTHONPATH"),
           "steps": [], "accelerator": _accelerator_kind()}

    def step(name, fn):
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

    def imp(name):
        return lambda: __import__(name) and None

    step("import deepspeed.launcher.launch", imp("deepspeed.launcher.launch"))
    step("import deepspeed", imp("deepspeed"))
    torch_ok = step("import torch", imp("torch"))
    kind = out["accelerator"]
    if kind == "cuda" and torch_ok:
        def cuda():
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False (torch %s, built for CUDA "
                                   "%s)" % (torch.__version__, torch.version.cuda))
            n = torch.cuda.device_count()
            if n < 1:
                raise RuntimeError("torch.cuda.device_count() is 0")
            return n
        step("torch.cuda.device_count()", cuda)
    elif kind == "npu" and torch_ok:
        def npu():
            import torch
            import torch_npu  # noqa: F401
            n = torch.npu.device_count()
            if n < 1:
                raise RuntimeError("torch.npu.device_count() is 0")
            return n
        step("import torch_npu; torch.npu.device_count()", npu)
    out["packages"] = {m: _package(m, d) for m, d in PACKAGES}
    sys.stdout.write(MARK + json.dumps(out) + "\n")
    sys.stdout.flush()


main()
