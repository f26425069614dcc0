"""R. RDMA devices and node limits: pure judgement of what `healthprobe.py` gathered.

Everything here is a pure function of probe data (or of tool text), so that it is tested on
real captured outputs (tests/data/samples): the sysfs tree of `/sys/class/infiniband`,
`ibstat`, `ibv_devinfo`, `show_gids`, `ulimit -a`.

Sources of the rules:
- port state / physical state / rate: the kernel's `/sys/class/infiniband/<dev>/ports/<n>/`
  files (`state` "4: ACTIVE", `phys_state` "5: LinkUp", `rate` "200 Gb/sec (4X HDR)",
  `link_layer` "InfiniBand" or "Ethernet" = RoCE);
- `NCCL_IB_HCA`: NCCL's syntax (env.md of NCCL): a comma list of `name[:port]`, names are
  prefixes unless the list starts with `=`; a leading `^` excludes instead of selecting
  (`^=mlx5_3` excludes exactly mlx5_3);
- `NCCL_IB_GID_INDEX`: an index into each RoCE port's GID table
  (`ports/<n>/gids/<i>`, type in `gid_attrs/types/<i>`: "IB/RoCE v1" or "RoCE v2");
- locked memory: RDMA registers (pins) its buffers; NVIDIA's containers are run with
  `--ulimit memlock=-1` and Mellanox OFED asks for `memlock unlimited`;
- /dev/shm: NCCL's SHM transport and DeepSpeed's CPU all-reduce create segments there (one real
  NCCL segment is 9,637,888 bytes, see the nccl-warn-*shm* samples); NVIDIA's containers are
  run with `--shm-size=1g` for an 8-GPU node, i.e. `SHM_PER_RANK_MB` = 128 MiB per local rank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: R1's fix, on the node whose ports are down or slower than its peers'
PORTS_FIX = ("check the cable, the switch port and the subnet manager (ibstat; ibportstate / "
             "mlxlink -d <dev> -p <port>; for RoCE the netdev: ip link, ethtool); NCCL skips an "
             "inactive port, so this node's ranks get fewer rails than the others (or sockets) "
             "until it is active")

#: /dev/shm a local rank needs, MiB (see the module docstring; --shm-per-rank-mb)
SHM_PER_RANK_MB = 128
#: open files every node needs at least (the stock soft limit), and what rank 0's process
#: holds on top: one socket per rank for the TCPStore server and one for NCCL's bootstrap root
NOFILE_FLOOR = 1024
NOFILE_PER_RANK_ON_RANK0 = 2

PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining",
               5: "LinkUp", 6: "LinkErrorRecovery", 7: "Phy Test"}


@dataclass
class Port:
    device: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED, ... (upper case, the kernel's names)
    phys_state: str = ""  # LinkUp, Polling, Disabled, ...
    link_layer: str = ""  # InfiniBand or Ethernet (RoCE)
    rate_gbps: float | None = None
    rate_text: str = ""
    #: GID index -> (gid, type "RoCE v2" / "IB/RoCE v1" / "", netdev)
    gids: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    source: str = "sysfs"

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def roce(self) -> bool:
        return self.link_layer.lower() == "ethernet"

    def describe(self) -> str:
        bits = [self.state.lower() if self.state else "state unknown"]
        if self.phys_state:
            bits.append(f"physical {self.phys_state}")
        if self.rate_text:
            bits.append(self.rate_text)
        if self.link_layer:
            bits.append("RoCE" if self.roce else self.link_layer)
        return f"{self.name} ({', '.join(bits)})"


# -- parsing --------------------------------------------------------------------------------------

def _state_name(text: str | None, table: dict[int, str]) -> str:
    """'4: ACTIVE' -> 'ACTIVE'; 'PORT_ACTIVE (4)' -> 'ACTIVE'; 'Active' -> 'ACTIVE' (states);
    phys states keep the kernel's spelling ('LinkUp')."""
    t = (text or "").strip()
    if not t:
        return ""
    m = re.match(r"^(\d+)\s*:\s*(.*)$", t)
    if m:
        num = int(m.group(1))
        return table.get(num, m.group(2).strip())
    m = re.match(r"^(?:PORT_)?([A-Za-z_ ]+?)\s*\((\d+)\)$", t)
    if m:
        num = int(m.group(2))
        return table.get(num, m.group(1))
    for name in table.values():
        if name.lower() == t.lower():
            return name
    return t.upper() if table is PORT_STATES else t


def _rate(text: str | None) -> tuple[float | None, str]:
    t = (text or "").strip()
    m = re.match(r"^([\d.]+)", t)
    return (float(m.group(1)) if m else None), t


def ports_from_sysfs(tree: Mapping[str, Any]) -> list[Port]:
    """The probe's `rdma.sysfs` dict ({device: {"ports": {n: {file: text}}}}) as ports."""
    ports = []
    for dev in sorted(tree):
        for num, files in sorted((tree[dev].get("ports") or {}).items(), key=lambda kv: int(kv[0])):
            rate, rate_text = _rate(files.get("rate"))
            gids = {}
            for idx, gid in (files.get("gids") or {}).items():
                gids[int(idx)] = (gid, (files.get("gid_types") or {}).get(idx, ""),
                                  (files.get("gid_ndevs") or {}).get(idx, ""))
            ports.append(Port(dev, int(num), _state_name(files.get("state"), PORT_STATES),
                              _state_name(files.get("phys_state"), PHYS_STATES),
                              (files.get("link_layer") or "").strip(), rate, rate_text, gids))
    return ports


def _parse_port_blocks(text: str, device: str, port: str, source: str,
                       fields: dict[str, str]) -> list[Port]:
    """`ibstat` and `ibv_devinfo` print the same shape: a device line, then per port a port line
    and `key: value` lines; `fields` maps their keys to state / phys_state / link_layer / rate."""
    ports: list[Port] = []
    dev = None
    cur: Port | None = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(device, line)
        if m:
            dev, cur = m.group(1), None
            continue
        m = re.match(port, line)
        if m and dev:
            cur = Port(dev, int(m.group(1)), "", source=source)
            ports.append(cur)
            continue
        if cur is None or ":" not in line:
            continue
        key, _, value = line.partition(":")
        field = fields.get(key.strip())
        value = value.strip()
        if field == "state":
            cur.state = _state_name(value, PORT_STATES)
        elif field == "phys_state":
            cur.phys_state = _state_name(value, PHYS_STATES)
        elif field == "rate":
            cur.rate_gbps, cur.rate_text = _rate(value)
            cur.rate_text = f"{value} Gb/sec" if cur.rate_gbps is not None else value
        elif field == "link_layer":
            cur.link_layer = value
    return ports


def parse_ibstat(text: str) -> list[Port]:
    """`ibstat` (infiniband-diags): CA 'mlx5_0' / Port 1: / State: Active / Rate: 400 ..."""
    return _parse_port_blocks(text, r"^CA '([^']+)'", r"^Port (\d+):$", "ibstat",
                              {"State": "state", "Physical state": "phys_state", "Rate": "rate",
                               "Link layer": "link_layer"})


def parse_ibv_devinfo(text: str) -> list[Port]:
    """`ibv_devinfo [-v]`: hca_id: mlx4_1 / port: 1 / state: PORT_ACTIVE (4) / link_layer ..."""
    return _parse_port_blocks(text, r"^hca_id:\s*(\S+)", r"^port:\s*(\d+)$", "ibv_devinfo",
                              {"state": "state", "phys_state": "phys_state",
                               "link_layer": "link_layer"})


def parse_show_gids(text: str) -> dict[tuple[str, int], dict[int, tuple[str, str, str]]]:
    """`show_gids` (MLNX_OFED): DEV PORT INDEX GID IPv4 VER DEV -> {(dev, port): {idx: (gid,
    'RoCE v1'/'RoCE v2', netdev)}}.  The VER column prints v1/v2."""
    out: dict[tuple[str, int], dict[int, tuple[str, str, str]]] = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) < 5 or not cells[1].isdigit() or not cells[2].isdigit():
            continue
        ver = next((c for c in cells[3:] if re.fullmatch(r"v[12]", c)), "")
        netdev = cells[-1] if ver and cells[-1] != ver else ""
        out.setdefault((cells[0], int(cells[1])), {})[int(cells[2])] = (
            cells[3], {"v1": "IB/RoCE v1", "v2": "RoCE v2"}.get(ver, ver), netdev)
    return out


def ports_from_probe(rdma: Mapping[str, Any]) -> tuple[list[Port], str]:
    """The node's ports and where they were read from ('sysfs', 'ibstat', 'ibv_devinfo' or '')."""
    ports = ports_from_sysfs(rdma.get("sysfs") or {})
    if ports:
        shown = rdma.get("show_gids") or {}
        table = parse_show_gids(shown.get("out", "")) if shown.get("rc") == 0 else {}
        for p in ports:
            if not p.gids and (p.device, p.port) in table:
                p.gids = table[(p.device, p.port)]
        return ports, f"{rdma.get('sysfs_root', '/sys')}/class/infiniband"
    for tool, parse in (("ibv_devinfo", parse_ibv_devinfo), ("ibstat", parse_ibstat)):
        res = (rdma.get("tools") or {}).get(tool)
        if res and res.get("rc") == 0:
            ports = parse(res.get("out", ""))
            if ports:
                return ports, tool
    return [], ""


# -- peer comparison ------------------------------------------------------------------------------

def compare_ports(node: str, mine: list[Port], peers: Mapping[str, list[Port]],
                  spec: HcaSpec | None = None) -> list[str]:
    """Problems of `node`'s ports against the other nodes': a port that is down here while
    some peer has the same device:port up, and an active port slower than the same port on a
    peer.  A port down on every node (an unused Ethernet port) is no problem here, nor one
    that NCCL_IB_HCA (`spec`) leaves out."""
    problems = []
    if spec is not None:
        mine = [p for p in mine if spec.matches(p)]
    by_name: dict[str, dict[str, Port]] = {}
    for peer, ports in peers.items():
        if peer == node:
            continue
        for p in ports:
            by_name.setdefault(p.name, {})[peer] = p
    for p in mine:
        others = by_name.get(p.name, {})
        up_on = sorted(n for n, q in others.items() if q.up)
        if not p.up and up_on:
            problems.append(f"{p.describe()} is not active, while it is active on "
                            f"{_names(up_on)}")
            continue
        if p.up and p.rate_gbps is not None:
            faster = {n: q for n, q in others.items() if q.up and q.rate_gbps is not None
                      and q.rate_gbps > p.rate_gbps}
            if faster:
                best = max(q.rate_gbps for q in faster.values() if q.rate_gbps is not None)
                problems.append(f"{p.describe()} runs at {p.rate_gbps:g} Gb/s, below the "
                                f"{best:g} Gb/s of the same port on {_names(sorted(faster))}")
    return problems


def _names(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# -- NCCL_IB_HCA ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HcaSpec:
    raw: str
    entries: tuple[tuple[str, int | None], ...]  # (name, port or None)
    exclude: bool = False
    exact: bool = False

    def matches(self, port: Port) -> bool:
        hit = any(self._entry_hits(e, port) for e in self.entries)
        return hit != self.exclude

    def _entry_hits(self, entry: tuple[str, int | None], port: Port) -> bool:
        name, num = entry
        named = port.device == name if self.exact else port.device.startswith(name)
        return named and (num is None or num == port.port)

    def describe(self) -> str:
        how = "exact names" if self.exact else "name prefixes"
        items = ", ".join(n + (f":{p}" if p is not None else "") for n, p in self.entries)
        return f"{'not ' if self.exclude else ''}{how} {items or '(none)'}"


def parse_hca_spec(value: str) -> HcaSpec:
    """NCCL_IB_HCA: `mlx5` (prefix), `=mlx5_0:1,mlx5_1:1` (exact), `^mlx5_3` / `^=mlx5_3`
    (exclude)."""
    from cluster_tests.judge.network.ifjudge import nccl_list_prefix

    exclude, exact, text = nccl_list_prefix(value)
    entries = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, port = item.partition(":")
        entries.append((name.strip(), int(port) if port.strip().isdigit() else None))
    return HcaSpec(value, tuple(entries), exclude, exact)


def judge_hca(spec: HcaSpec, ports: list[Port]) -> tuple[list[Port], list[str]]:
    """(the active ports NCCL will use, problems).  Every entry of an include list must name
    an existing port that is active; the selection must leave at least one active port."""
    chosen = [p for p in ports if spec.matches(p)]
    problems = []
    if not spec.exclude:
        for entry in spec.entries:
            hits = [p for p in ports if spec._entry_hits(entry, p)]
            label = entry[0] + (f":{entry[1]}" if entry[1] is not None else "")
            if not hits:
                problems.append(f"'{label}' names no RDMA port here")
            elif not any(p.up for p in hits):
                problems.append(f"'{label}' names only ports that are not active: "
                                + ", ".join(p.describe() for p in hits))
    active = [p for p in chosen if p.up]
    if not active and not problems:
        problems.append("selects no active port (" + (", ".join(p.describe() for p in chosen)
                                                       or "nothing") + ")")
    return active, problems


# -- NCCL_IB_GID_INDEX ----------------------------------------------------------------------------

def gid_at(port: Port, index: int) -> tuple[str, str] | None:
    """(gid, type) at `index`, None when the entry is missing or all zeros (unset)."""
    entry = port.gids.get(index)
    if entry is None:
        return None
    gid = entry[0].strip()
    if not gid or set(gid.replace(":", "")) <= {"0"}:
        return None
    return gid, entry[1]


def judge_gid_index(index: int, ports: list[Port]) -> tuple[dict[str, str], list[str]]:
    """({port: RoCE type} of the active RoCE ports at `index`, problems on this node)."""
    types, problems = {}, []
    for p in ports:
        if not (p.up and p.roce):
            continue
        got = gid_at(p, index)
        if got is None:
            present = sorted(i for i in p.gids if gid_at(p, i))
            problems.append(f"{p.name}: GID index {index} is not set (set indices: "
                            f"{', '.join(map(str, present)) or 'none'})")
        else:
            types[p.name] = got[1] or "type unknown"
    return types, problems


# -- limits and /dev/shm --------------------------------------------------------------------------

UNLIMITED = -1


def fmt_kb(value: int | None) -> str:
    if value is None:
        return "unknown"
    if value == UNLIMITED:
        return "unlimited"
    return f"{value} KB" if value < 1024 * 1024 else f"{value / 1024 / 1024:g} GB"


def parse_ulimit_a(text: str) -> dict[str, int]:
    """`ulimit -a` (bash) -> {"-l": kbytes or UNLIMITED, "-n": n, ...}."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^.*\((?:[^()]*,\s*)?(-\w)\)\s+(\S+)\s*$", line)
        if m:
            v = m.group(2)
            if v == "unlimited":
                out[m.group(1)] = UNLIMITED
            elif v.isdigit():
                out[m.group(1)] = int(v)
    return out


def memlock_origin(limits: Mapping[str, Any], min_kb: int = UNLIMITED) -> list[str]:
    """Where a low locked-memory limit comes from, from the probe's `limits` data: a `ulimit`
    line in the shell's rc files, a limits.conf/limits.d entry, or the limit sshd (and so
    systemd's LimitMEMLOCK or the container runtime) started with."""
    where = []
    for path, lineno, line in limits.get("rc_ulimit_lines") or []:
        if re.search(r"ulimit\s+(-\w*\s+)*-\w*l", line):
            where.append(f"{path}:{lineno}: {line.strip()}")
    for path, lineno, line in limits.get("limits_conf_lines") or []:
        if "memlock" in line:
            where.append(f"{path}:{lineno}: {line.strip()}")
    for proc in limits.get("ancestors") or []:
        soft = proc.get("memlock_soft_kb")
        if proc.get("comm") in ("sshd", "systemd", "init", "containerd-shim", "dockerd") and \
                soft not in (None, UNLIMITED) and (min_kb == UNLIMITED or soft < min_kb):
            where.append(f"{proc['comm']} (pid {proc['pid']}) already runs with max locked memory "
                         f"{fmt_kb(proc['memlock_soft_kb'])}: systemd's LimitMEMLOCK for the "
                         f"service, or the container's --ulimit memlock")
            break
    return where


def judge_memlock(soft_kb: int | None, hard_kb: int | None, has_rdma: bool,
                  min_kb: int = UNLIMITED) -> str | None:
    """None when fine; else what is wrong.  Without RDMA devices any value is fine."""
    if not has_rdma or soft_kb is None:
        return None
    if soft_kb == UNLIMITED:
        return None
    if min_kb != UNLIMITED and soft_kb >= min_kb:
        return None
    want = "unlimited" if min_kb == UNLIMITED else f"at least {fmt_kb(min_kb)}"
    return (f"max locked memory (ulimit -l) is {fmt_kb(soft_kb)} (hard {fmt_kb(hard_kb)}) in the "
            f"non-interactive shell pdsh gets; RDMA must pin its buffers, NCCL/HCCL over "
            f"InfiniBand/RoCE needs {want}")


def nofile_needed(world: int, is_rank0: bool) -> int:
    return max(NOFILE_FLOOR, NOFILE_PER_RANK_ON_RANK0 * world + 256) if is_rank0 else NOFILE_FLOOR


def judge_nofile(soft: int | None, world: int, is_rank0: bool) -> str | None:
    if soft is None or soft == UNLIMITED:
        return None
    need = nofile_needed(world, is_rank0)
    if soft >= need:
        return None
    why = (f"the rank-0 node's process holds a socket per rank ({world} ranks) for the "
           f"rendezvous store and NCCL's bootstrap" if is_rank0 and need > NOFILE_FLOOR else
           "the stock soft limit is 1024; less breaks dataloaders and NCCL's sockets")
    return f"open files (ulimit -n) is {soft}, below {need} ({why})"


def shm_needed_bytes(slots: int, per_rank_mb: float = SHM_PER_RANK_MB) -> int:
    return int(max(1, slots) * per_rank_mb * 1024 * 1024)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "unknown"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def judge_shm(shm: Mapping[str, Any], slots: int,
              per_rank_mb: float = SHM_PER_RANK_MB) -> str | None:
    """/dev/shm must have room for the node's local ranks (free space, not only size: stale
    segments of a killed job count against it)."""
    if not shm.get("exists"):
        return ("/dev/shm does not exist "
                "(NCCL's SHM transport and DeepSpeed's shm all-reduce need it)")
    need = shm_needed_bytes(slots, per_rank_mb)
    total, avail = shm.get("total_bytes"), shm.get("avail_bytes")
    if avail is None or avail >= need:
        return None
    return (f"/dev/shm has {fmt_bytes(avail)} free of {fmt_bytes(total)}, below the "
            f"{fmt_bytes(need)} that {slots} local rank{'s need' if slots != 1 else ' needs'} "
            f"({per_rank_mb:g} MiB a rank, --shm-per-rank-mb)")


def rdma_summary(ports: Iterable[Port]) -> str:
    ports = list(ports)
    if not ports:
        return "none"
    up = sum(p.up for p in ports)
    return f"{len(ports)} port{'s' if len(ports) != 1 else ''}, {up} active: " + \
        ", ".join(p.describe() for p in ports)
