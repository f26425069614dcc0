"""A node part: the versions CHECKLIST E3 compares, read the same way wherever they are read.
cluster_tests.node.source() sends this text before envprobe.py (its `versions` section) and
before rehearse.py (the rehearsal's `versions`, from the import it already made), so the two
report the same keys with the same values.  Standard library only, Python 3.6+; it needs
nothing of the prelude (rehearse.py is sent without it).

A script sent with this part must not define any name defined here
(tests/unit/test_node_prelude.py checks it)."""
import glob
import re
import shutil
import subprocess
import sys

#: where the CANN toolkit (or NNAE) writes its version, first match wins
CANN_VERSION_FILES = ("/usr/local/Ascend/ascend-toolkit/latest/*/ascend_toolkit_install.info",
                      "/usr/local/Ascend/ascend-toolkit/latest/version.cfg",
                      "/usr/local/Ascend/nnae/latest/*/ascend_nnae_install.info")
ASCEND_DRIVER_FILE = "/usr/local/Ascend/driver/version.info"


def _version_file_text(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(8192).decode("utf-8", "replace")
    except OSError:
        return None


def cann_version():
    for pattern in CANN_VERSION_FILES:
        for path in sorted(glob.glob(pattern)):
            text = _version_file_text(path) or ""
            m = re.search(r"(?:^|\n)\s*(?:version|Version)\s*=\s*(\S+)", text)
            if m:
                return m.group(1)
            m = re.search(r"\[version:\s*([^\]]+)\]", text)
            if m:
                return m.group(1).strip()
    return None


def ascend_driver():
    m = re.search(r"Version\s*=\s*(\S+)", _version_file_text(ASCEND_DRIVER_FILE) or "")
    return m.group(1) if m else None


def nvidia_driver():
    if not shutil.which("nvidia-smi"):
        return None
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                               "--format=csv,noheader"], check=False, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    text = proc.stdout.decode("utf-8", "replace").strip()
    return text.splitlines()[0].strip() if proc.returncode == 0 and text else None


def distribution(name):
    """importlib.metadata's distribution (None before Python 3.8 or when not installed)."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8: no metadata to compare with
        return None
    try:
        return metadata.distribution(name)
    except Exception:
        return None


def dist_version(name):
    dist = distribution(name)
    return dist.version if dist is not None else None


def stack_versions(torch, torch_error):
    """E3's versions.  `torch`: the imported module, None where it did not import (then
    `torch_error` says why, in the caller's words)."""
    out = {"python": sys.version.split()[0], "python_executable": sys.executable,
           "deepspeed": dist_version("deepspeed"), "torch_npu": dist_version("torch_npu"),
           "torch": None, "cuda": None, "nccl": None, "cann": cann_version(),
           "ascend_driver": ascend_driver(), "nvidia_driver": None, "torch_error": torch_error}
    if torch is not None and torch_error is None:
        try:
            out["torch"] = torch.__version__
            out["cuda"] = torch.version.cuda
            try:
                if torch.cuda.is_available():
                    v = torch.cuda.nccl.version()
                    out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception as exc:  # a broken CUDA install is reported, not fatal
                out["nccl"] = "error: %s" % exc
        except Exception as exc:
            out["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
    out["nvidia_driver"] = nvidia_driver()
    return out
