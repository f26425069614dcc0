"""A node part: CHECKLIST E6's facts, TMPDIR as a rank gets it and the directory its tools
really write to.  cluster_tests.node.source() sends this text before envprobe.py (its `tmpdir`
section) and before rehearse.py (the launch's own leg, which runs with the rank's exports and
environment), so both report the same keys.  Standard library only, Python 3.6+.

A script sent with this part must not define any name defined here
(tests/unit/test_node_prelude.py checks it)."""
import os
import tempfile


def _try_dir(path):
    """Is `path` a directory this user can create a file in (really: one is written and
    removed), and how much is free there."""
    info = {"path": path, "is_dir": os.path.isdir(path), "exists": os.path.exists(path)}
    if not info["is_dir"]:
        return info
    try:
        fd, name = tempfile.mkstemp(prefix=".ct_tmpdir_", dir=path)
        try:
            os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
            os.unlink(name)
        info["writable"] = True
    except OSError as exc:
        info["writable"] = False
        info["error"] = "%s: %s" % (type(exc).__name__, exc.strerror or exc)
    try:
        st = os.statvfs(path)
        info["free_bytes"] = st.f_bavail * st.f_frsize
    except OSError:
        pass
    return info


def tmpdir_facts(value, from_launch):
    """gcc and ninja (DeepSpeed's op builds), nvcc, Triton and torch.compile write their
    temporary files to TMPDIR when it is set; Python's tempfile skips an unusable TMPDIR and
    settles on /tmp (or the next candidate).  `value`: the TMPDIR the ranks get (set in this
    process's environment for the fallback's sake)."""
    out = {"TMPDIR": value, "from_launch": from_launch}
    if value:
        out["tmpdir"] = _try_dir(value)
        os.environ["TMPDIR"] = value
    tempfile.tempdir = None
    try:
        out["effective"] = _try_dir(tempfile.gettempdir())
    except OSError as exc:  # FileNotFoundError: "No usable temporary directory found in ..."
        out["effective_error"] = str(exc)
    return out
