"""Node-side probe of CHECKLIST R: RDMA devices, limits, /dev/shm, GPU and NPU health.

Same protocol as probe.py: argv[1] is JSON {"sections": [...], ...}; one line
`CT_PROBE_JSON:{section: data}` on stdout.  Runs in the non-interactive ssh shell that pdsh
gets, so the limits read here (getrlimit) are the ones a launched rank inherits.  Standard
library only, Python >= 3.6.  It changes nothing on the node; the raw text is parsed on the
launcher (cluster_tests/judge/health/rdma.py, gpuhealth.py).

Sections:
  fabric  /sys/class/infiniband (ibv_devinfo / ibstat where sysfs has none), show_gids,
          ulimit -l / -n with where they come from, /dev/shm size and free space
  accel   nvidia-smi -q, nvidia-smi nvlink -s, NVSwitch + fabric manager, Xid lines of the
          kernel log; npu-smi info -t health and hccn_tool -net_health/-link/-ip/-tls per NPU
  diag    DCGM's active diagnostic, `dcgmi diag -r <dcgm_level>` (table output), where dcgmi is
          on the PATH, killed after <deadline> seconds (its exit status 124 then)

CLUSTER_TESTS_SYSFS, when set, is read instead of /sys (a node whose sysfs is mounted
elsewhere, and the project's simulated cluster, which has no RDMA hardware).
"""

import glob
import os
import re
import resource
import shutil


def run(argv, timeout=15.0):
    return run_quiet(argv, timeout, 400000, 10000)


def read(path, limit=65536):
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _ib_tree(root):
    base = os.path.join(root, "class", "infiniband")
    tree = {}
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return tree
    for dev in devices:
        d = os.path.join(base, dev)
        info = {k: read(os.path.join(d, k))
                for k in ("fw_ver", "board_id", "hca_type", "node_type")}
        ports = {}
        try:
            nums = sorted(os.listdir(os.path.join(d, "ports")))
        except OSError:
            nums = []
        for num in nums:
            p = os.path.join(d, "ports", num)
            files = {k: read(os.path.join(p, k))
                     for k in ("state", "phys_state", "rate", "link_layer")}
            gids, types, ndevs = {}, {}, {}
            try:
                idxs = os.listdir(os.path.join(p, "gids"))
            except OSError:
                idxs = []
            for idx in idxs[:512]:
                gid = read(os.path.join(p, "gids", idx))
                if gid and set(gid.replace(":", "")) - {"0"}:
                    gids[idx] = gid
                    types[idx] = read(os.path.join(p, "gid_attrs", "types", idx)) or ""
                    ndevs[idx] = read(os.path.join(p, "gid_attrs", "ndevs", idx)) or ""
            files.update(gids=gids, gid_types=types, gid_ndevs=ndevs)
            ports[num] = files
        info["ports"] = ports
        tree[dev] = info
    return tree


def _proc_limits(pid):
    """(soft, hard) max locked memory in KB from /proc/PID/limits (-1: unlimited)."""
    text = read("/proc/%s/limits" % pid) or ""
    for line in text.splitlines():
        if line.startswith("Max locked memory"):
            cells = line.split()
            vals = []
            for c in cells[3:5]:
                vals.append(-1 if c == "unlimited" else (int(c) // 1024 if c.isdigit() else None))
            return vals
    return [None, None]


def _ancestors():
    out = []
    pid = os.getpid()
    for _ in range(16):
        stat = read("/proc/%d/stat" % pid) or ""
        m = re.match(r"^\d+ \((.*)\) \S (\d+)", stat)
        if not m:
            break
        soft, hard = _proc_limits(pid)
        out.append({"pid": pid, "comm": m.group(1),
                    "memlock_soft_kb": soft, "memlock_hard_kb": hard})
        ppid = int(m.group(2))
        if ppid <= 0:
            break
        pid = ppid
    return out


def _lim(which, kb):
    soft, hard = resource.getrlimit(which)
    def conv(v):
        return -1 if v == resource.RLIM_INFINITY else (v // 1024 if kb else v)
    return conv(soft), conv(hard)


def _grep_lines(paths, pattern):
    out = []
    for path in paths:
        text = read(path, 256 * 1024)
        if text is None:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            s = line.strip()
            if s and not s.startswith("#") and re.search(pattern, s):
                out.append([path, i, s])
    return out


def section_fabric(params):
    root = os.environ.get("CLUSTER_TESTS_SYSFS") or "/sys"
    tree = _ib_tree(root)
    tools = {}
    if not tree:
        for tool in ("ibv_devinfo", "ibstat"):
            found = admin_tool(tool)  # ibstat: /usr/sbin
            if found:
                tools[tool] = run([found], timeout=15)
    show_gids = run(["show_gids"], timeout=10) if tree and shutil.which("show_gids") else None
    ml_soft, ml_hard = _lim(resource.RLIMIT_MEMLOCK, True)
    nf_soft, nf_hard = _lim(resource.RLIMIT_NOFILE, False)
    home = os.path.expanduser("~")
    rc_files = [os.path.join(home, f) for f in (".bashrc", ".bash_profile", ".profile")] + \
        ["/etc/bash.bashrc", "/etc/profile"] + sorted(glob.glob("/etc/profile.d/*.sh"))
    limits_files = (["/etc/security/limits.conf"]
                    + sorted(glob.glob("/etc/security/limits.d/*.conf")))
    try:
        st = os.statvfs("/dev/shm")
        shm: dict = {"exists": True, "total_bytes": st.f_blocks * st.f_frsize,
               "avail_bytes": st.f_bavail * st.f_frsize}
    except OSError as exc:
        shm = {"exists": False, "error": str(exc)}
    mounts = read("/proc/self/mounts", 1024 * 1024) or ""
    # the last mount on /dev/shm is the one in force (a container's or a namespace's on top)
    shm["mount"] = ([ln for ln in mounts.splitlines() if ln.split()[1:2] == ["/dev/shm"]]
                    or [""])[-1]
    return {
        "rdma": {"sysfs_root": root, "sysfs": tree, "tools": tools, "show_gids": show_gids},
        "limits": {
            "memlock_soft_kb": ml_soft, "memlock_hard_kb": ml_hard,
            "nofile_soft": nf_soft, "nofile_hard": nf_hard,
            "rc_ulimit_lines": _grep_lines(rc_files, r"\bulimit\b"),
            "limits_conf_lines": _grep_lines(limits_files, r"memlock|nofile"),
            "ancestors": _ancestors(),
        },
        "shm": shm,
    }


def _fabric_manager():
    running = []
    for comm in glob.glob("/proc/[0-9]*/comm"):
        name = read(comm, 256)
        if name and name.startswith("nv-fabricmanage"):
            running.append(comm.split("/")[2])
    state = run(["systemctl", "is-active", "nvidia-fabricmanager"], timeout=5) \
        if shutil.which("systemctl") else None
    return {"pids": running, "systemctl": state}


def section_accel(params):
    out = {}
    if shutil.which("nvidia-smi"):
        out["nvidia_smi_q"] = run(["nvidia-smi", "-q"], timeout=40)
        out["nvlink_s"] = run(["nvidia-smi", "nvlink", "-s"], timeout=20)
        nvswitch = (os.environ.get("CLUSTER_TESTS_NVSWITCH_DIR")
                    or "/proc/driver/nvidia-nvswitch/devices")
        try:
            out["nvswitches"] = sorted(os.listdir(nvswitch))
        except OSError:
            out["nvswitches"] = []
        if out["nvswitches"]:
            out["fabric_manager"] = _fabric_manager()
        dmesg = run(["dmesg"], timeout=10) if shutil.which("dmesg") else None
        if dmesg is not None:
            every = dmesg["out"].splitlines()
            # "The NVIDIA GPU <bus>" names the GPU that the line or two after says "has fallen
            # off the bus": kept with them
            lines = [ln for i, ln in enumerate(every)
                     if "NVRM: Xid" in ln or "fallen off the bus" in ln
                     or ("NVRM: The NVIDIA GPU" in ln
                         and any("fallen off the bus" in x for x in every[i + 1:i + 3]))]
            out["dmesg"] = {"rc": dmesg["rc"], "err": dmesg["err"][-500:], "lines": lines[-200:]}
    if shutil.which("npu-smi"):
        listing = run(["npu-smi", "info", "-l"], timeout=20)
        out["npu_smi_info_l"] = listing
        ids = re.findall(r"NPU ID\s*:\s*(\d+)", listing["out"]) if listing["rc"] == 0 else []
        out["npu_health"] = {i: run(["npu-smi", "info", "-t", "health", "-i", i, "-c", "0"],
                                    timeout=20)
                             for i in ids}
        hccn = {}
        if shutil.which("hccn_tool"):
            count = int(params.get("npu_devices") or 0) or len(ids)
            for dev in range(count):
                hccn[str(dev)] = {what: run(["hccn_tool", "-i", str(dev), "-" + what, "-g"],
                                            timeout=15)
                                  for what in ("net_health", "link", "ip", "tls")}
        out["hccn"] = hccn
    return out


def section_diag(params):
    tool = shutil.which("dcgmi")
    out: dict = {"dcgmi": tool}
    if tool:
        level = int(params.get("dcgm_level") or 1)
        deadline = float(params.get("deadline") or 120)
        argv = ["dcgmi", "diag", "-r", str(level)]
        out["argv"] = argv
        out["dcgmi_diag"] = run_command(argv, deadline, 400000, 10000)
    return out


if __name__ == "__main__":
    probe_main(globals(), ["fabric"])
