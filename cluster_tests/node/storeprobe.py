"""Node-side storage probe (CHECKLIST D1-D2): the output directory is writable, roomy, shared.

Same protocol as probe.py: argv[1] is JSON {"sections": [...], ...}; one line
`CT_PROBE_JSON:{section: data}` on stdout.  Standard library only.

Sections:
  dir     exists / is a directory / a file can be created and removed there / free bytes /
          the mount it lives on (from /proc/self/mountinfo)
  write   write this node's token file `.ct-share-<session>-<node>` (content: the token)
  read    read every expected token file; report what each holds
  remove  remove this node's token file (only ours: the name carries the session id)
"""

import os
import tempfile


def _mount_of(path):
    """(mount point, fs type, source) of the mount holding `path`, from mountinfo."""
    best = None
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                mnt = fields[4].replace("\\040", " ")
                if path == mnt or path.startswith(mnt.rstrip("/") + "/"):
                    if best is None or len(mnt) >= len(best[0]):
                        best = (mnt, rfields[0] if rfields else "?",
                                rfields[1] if len(rfields) > 1 else "?")
    except OSError:
        pass
    return best


def section_dir(params):
    path = params["path"]
    out = {"path": path, "exists": os.path.exists(path), "is_dir": os.path.isdir(path),
           "writable": False, "error": None, "free_bytes": None, "mount": None}
    if not out["is_dir"]:
        return out
    real = os.path.realpath(path)
    out["mount"] = _mount_of(real)
    try:
        st = os.statvfs(real)
        out["free_bytes"] = st.f_bavail * st.f_frsize
    except OSError as exc:
        out["error"] = "statvfs: %s" % exc.strerror
    try:
        fd, tmp = tempfile.mkstemp(prefix=".ct-write-", dir=real)
        os.write(fd, b"x")
        os.close(fd)
        os.unlink(tmp)
        out["writable"] = True
    except OSError as exc:
        out["error"] = exc.strerror or str(exc)
    return out


def _token_path(params, node):
    return os.path.join(params["path"], ".ct-share-%s-%s" % (params["session"], node))


def section_write(params):
    path = _token_path(params, params["owner"])
    try:
        with open(path, "w") as fh:
            fh.write(params["token"])
            fh.flush()
            os.fsync(fh.fileno())
        return {"ok": True, "file": path}
    except OSError as exc:
        return {"ok": False, "file": path, "error": exc.strerror or str(exc)}


def section_read(params):
    out = {}
    for node in params["writers"]:
        path = _token_path(params, node)
        try:
            with open(path) as fh:
                out[node] = {"found": True, "content": fh.read(256)}
        except OSError as exc:
            out[node] = {"found": False, "error": exc.strerror or str(exc)}
    return out


def section_remove(params):
    path = _token_path(params, params["owner"])
    try:
        os.unlink(path)
        return {"removed": True}
    except FileNotFoundError:
        return {"removed": False, "gone": True}
    except OSError as exc:
        return {"removed": False, "error": exc.strerror or str(exc)}


if __name__ == "__main__":
    probe_main(globals())
