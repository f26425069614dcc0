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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cluster_tests.core import testids as ids
from cluster_tests.judge.common.fieldread import ByFields
from cluster_tests.judge.common.probes import (
    FactsError,
    Probe,
    integer,
    obj,
    opt_int,
    text,
)
from cluster_tests.judge.problem import Problem, SectionCause

#: R1's fix, on the node whose ports are down or slower than its peers'
PORTS_FIX = ("check the cable, the switch port and the subnet manager (ibstat; ibportstate / "
             "mlxlink -d <dev> -p <port>; for RoCE the netdev: ip link, ethtool); NCCL skips an "
             "inactive port, so this node's ranks get fewer rails than the others (or sockets) "
             "until it is active")

#: R3's fix
GID_FIX = ("pick an index set to RoCE v2 on every node (show_gids, or "
           "/sys/class/infiniband/<dev>/ports/<n>/gid_attrs/types/*), the same everywhere, and "
           "export it (or unset it on NCCL >= 2.21)")

#: /dev/shm a local rank needs, MiB (see the module docstring; --shm-per-rank-mb)
SHM_PER_RANK_MB = 128
#: open files every node needs at least (the stock soft limit), and what rank 0's process
#: holds on top: one socket per rank for the TCPStore server and one for NCCL's bootstrap root
NOFILE_FLOOR = 1024
NOFILE_PER_RANK_ON_RANK0 = 2

PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining",
               5: "LinkUp", 6: "LinkErrorRecovery", 7: "Phy Test"}


class RdmaCause(SectionCause):
    """What can be wrong with the fabric and the limits the launch meets (Problem.cause)."""

    PORTS = "RDMA ports down or slow"
    HCA = "NCCL_IB_HCA selects no usable port"
    GID_INDEX = "NCCL_IB_GID_INDEX wrong"
    MEMLOCK = "locked memory limit too low"
    NOFILE = "open files limit too low"
    SHM = "/dev/shm too small"


@dataclass(frozen=True)
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


def _gids(files: Mapping[str, object]) -> dict[int, tuple[str, str, str]]:
    gids, types, ndevs = (obj(files.get(k) or {}, k) for k in ("gids", "gid_types", "gid_ndevs"))
    return {int(idx): (text(gid), text(types.get(idx)), text(ndevs.get(idx)))
            for idx, gid in gids.items() if str(idx).isdigit()}


def ports_from_sysfs(tree: Mapping[str, object]) -> list[Port]:
    """The probe's `rdma.sysfs` dict ({device: {"ports": {n: {file: text}}}}) as ports."""
    ports = []
    for dev in sorted(tree):
        nums = obj(obj(tree[dev], dev).get("ports") or {}, f"{dev} ports")
        for num, raw in sorted(nums.items(), key=lambda kv: int(kv[0])):
            files = obj(raw, f"{dev}:{num}")
            rate, rate_text = _rate(text(files.get("rate")))
            ports.append(Port(dev, int(num), _state_name(text(files.get("state")), PORT_STATES),
                              _state_name(text(files.get("phys_state")), PHYS_STATES),
                              text(files.get("link_layer")).strip(), rate, rate_text,
                              _gids(files)))
    return ports


def _port(dev: str, num: int, source: str, fields: Mapping[str, str]) -> Port:
    rate, rate_text = _rate(fields.get("rate"))
    if rate is not None:
        rate_text = f"{fields['rate']} Gb/sec"
    return Port(dev, num, _state_name(fields.get("state"), PORT_STATES),
                _state_name(fields.get("phys_state"), PHYS_STATES),
                fields.get("link_layer", ""), rate, rate_text, source=source)


def _parse_port_blocks(text: str, device: str, port: str, source: str,
                       fields: dict[str, str]) -> list[Port]:
    """`ibstat` and `ibv_devinfo` print the same shape: a device line, then per port a port line
    and `key: value` lines; `fields` maps their keys to state / phys_state / link_layer / rate."""
    found: list[tuple[str, int, dict[str, str]]] = []
    dev = None
    cur: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(device, line)
        if m:
            dev, cur = m.group(1), None
            continue
        m = re.match(port, line)
        if m and dev:
            cur = {}
            found.append((dev, int(m.group(1)), cur))
            continue
        if cur is None or ":" not in line:
            continue
        key, _, value = line.partition(":")
        name = fields.get(key.strip())
        if name:
            cur[name] = value.strip()
    return [_port(d, n, source, f) for d, n, f in found]


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


@dataclass(frozen=True)
class RdmaFacts:
    """A node's RDMA ports and where they were read from ("/sys/class/infiniband",
    "ibv_devinfo", "ibstat"; "": none found)."""

    ports: tuple[Port, ...]
    source: str

    @classmethod
    def read(cls, raw: object) -> RdmaFacts:
        d = obj(raw, "rdma")
        ports = ports_from_sysfs(obj(d.get("sysfs") or {}, "sysfs"))
        if ports:
            shown = obj(d.get("show_gids") or {}, "show_gids")
            table = parse_show_gids(text(shown.get("out"))) if shown.get("rc") == 0 else {}
            ports = [p if p.gids or (p.device, p.port) not in table else
                     replace(p, gids=table[(p.device, p.port)]) for p in ports]
            return cls(tuple(ports), f"{text(d.get('sysfs_root'), '/sys')}/class/infiniband")
        tools = obj(d.get("tools") or {}, "tools")
        for tool, parse in (("ibv_devinfo", parse_ibv_devinfo), ("ibstat", parse_ibstat)):
            res = obj(tools.get(tool) or {}, tool)
            if res.get("rc") == 0:
                ports = parse(text(res.get("out")))
                if ports:
                    return cls(tuple(ports), tool)
        return cls((), "")


# -- peer comparison ------------------------------------------------------------------------------

def compare_ports(node: str, mine: Sequence[Port], peers: Mapping[str, Sequence[Port]],
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


def judge_hca(spec: HcaSpec, ports: Sequence[Port]) -> tuple[list[Port], list[str]]:
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


def judge_gid_index(index: int, ports: Sequence[Port]) -> tuple[dict[str, str], list[str]]:
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


@dataclass(frozen=True)
class RcLine:
    """A line of a file that sets a limit (an rc file's `ulimit`, a limits.conf entry)."""

    path: str
    lineno: int
    line: str

    def describe(self) -> str:
        return f"{self.path}:{self.lineno}: {self.line.strip()}"

    @classmethod
    def read_all(cls, raw: object) -> tuple[RcLine, ...]:
        out = []
        for row in raw if isinstance(raw, list) else []:
            if not isinstance(row, list) or len(row) != 3:
                raise FactsError(f"a limit's line: expected [path, lineno, line], got {row!r}")
            out.append(cls(text(row[0]), integer(row[1]), text(row[2])))
        return tuple(out)


@dataclass(frozen=True)
class Ancestor:
    """A process above the probe (its shell, sshd, ...) and the locked memory it runs with."""

    pid: int
    comm: str
    memlock_soft_kb: int | None
    memlock_hard_kb: int | None


@dataclass(frozen=True)
class Limits:
    """The limits of pdsh's non-interactive shell (KB for locked memory; UNLIMITED: -1), and
    what may set them."""

    memlock_soft_kb: int | None
    memlock_hard_kb: int | None
    nofile_soft: int | None
    nofile_hard: int | None
    rc_ulimit_lines: tuple[RcLine, ...] = ()
    limits_conf_lines: tuple[RcLine, ...] = ()
    ancestors: tuple[Ancestor, ...] = ()

    @classmethod
    def read(cls, raw: object) -> Limits:
        d = obj(raw, "limits")
        procs = d.get("ancestors")
        return cls(opt_int(d.get("memlock_soft_kb")), opt_int(d.get("memlock_hard_kb")),
                   opt_int(d.get("nofile_soft")), opt_int(d.get("nofile_hard")),
                   RcLine.read_all(d.get("rc_ulimit_lines")),
                   RcLine.read_all(d.get("limits_conf_lines")),
                   tuple(Ancestor(integer(a.get("pid")), text(a.get("comm")),
                                  opt_int(a.get("memlock_soft_kb")),
                                  opt_int(a.get("memlock_hard_kb")))
                         for a in (obj(x, "ancestor")
                                   for x in (procs if isinstance(procs, list) else []))))


@dataclass(frozen=True)
class Shm(ByFields, what="shm"):
    """/dev/shm as the node's shell sees it (statvfs; `mount`: its line of /proc/self/mounts)."""

    exists: bool
    total_bytes: int | None = None
    avail_bytes: int | None = None
    mount: str = ""


@dataclass(frozen=True)
class FabricFacts:
    """node/healthprobe.py's `fabric`: R1-R6's facts."""

    rdma: RdmaFacts
    limits: Limits
    shm: Shm

    @classmethod
    def read(cls, raw: object) -> FabricFacts:
        d = obj(raw, "fabric")
        return cls(RdmaFacts.read(d.get("rdma")), Limits.read(d.get("limits")),
                   Shm.read(d.get("shm")))


FABRIC = Probe("healthprobe.py", "fabric", FabricFacts.read)


_SETS_MEMLOCK = re.compile(r"ulimit\s+(-\w*\s+)*-\w*l")


def memlock_origin(limits: Limits, min_kb: int = UNLIMITED) -> list[str]:
    """Where a low locked-memory limit comes from: a `ulimit` line in the shell's rc files, a
    limits.conf/limits.d entry, or the limit sshd (and so systemd's LimitMEMLOCK or the
    container runtime) started with."""
    where = [ln.describe() for ln in limits.rc_ulimit_lines
             if _SETS_MEMLOCK.search(ln.line)]
    where += [ln.describe() for ln in limits.limits_conf_lines if "memlock" in ln.line]
    for proc in limits.ancestors:
        soft = proc.memlock_soft_kb
        if proc.comm in ("sshd", "systemd", "init", "containerd-shim", "dockerd") and \
                soft is not None and soft != UNLIMITED and (min_kb == UNLIMITED or soft < min_kb):
            where.append(f"{proc.comm} (pid {proc.pid}) already runs with max locked memory "
                         f"{fmt_kb(soft)}: systemd's LimitMEMLOCK for the "
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


def judge_shm(shm: Shm, slots: int, per_rank_mb: float = SHM_PER_RANK_MB) -> str | None:
    """/dev/shm must have room for the node's local ranks (free space, not only size: stale
    segments of a killed job count against it)."""
    if not shm.exists:
        return ("/dev/shm does not exist "
                "(NCCL's SHM transport and DeepSpeed's shm all-reduce need it)")
    need = shm_needed_bytes(slots, per_rank_mb)
    total, avail = shm.total_bytes, shm.avail_bytes
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


# -- the reds ------------------------------------------------------------------------------------

def judge_ports(node: str, facts: RdmaFacts, peers: Mapping[str, Sequence[Port]],
                spec: HcaSpec | None = None) -> Problem | None:
    """R1: the node's ports against its peers' (`compare_ports`), and at least one active."""
    problems = compare_ports(node, facts.ports, peers, spec)
    none_up = not any(p.up for p in facts.ports)
    if none_up:
        problems.append("no RDMA port is active: " + ", ".join(p.describe() for p in facts.ports))
    if not problems:
        return None
    down = [p.name for p in facts.ports if not p.up
            and (none_up or any(x.startswith(p.describe()) for x in problems))]
    return Problem((node,), RdmaCause.PORTS,
                   f"{node}: RDMA ports (read from {facts.source}):\n  "
                   + "\n  ".join(dict.fromkeys(problems)),
                   fix=f"on {node}: {PORTS_FIX}",
                   item=ids.RDMA_PORTS.item, facts={"ports_down": down})


def hca_problem(node: str, value: str, where: str, spec: HcaSpec, ports: Sequence[Port],
                problems: Sequence[str]) -> Problem | None:
    """R2: NCCL_IB_HCA=`value` (set in `where`) and what `judge_hca` found wrong with it."""
    if not problems:
        return None
    active = [p.name for p in ports if p.up]
    return Problem(
        (node,), RdmaCause.HCA,
        f"{node}: NCCL_IB_HCA={value} (from {where}; {spec.describe()}) "
        + "; ".join(problems) + ".\n"
        f"  RDMA ports on {node}: {', '.join(p.describe() for p in ports)}",
        fix=f"export NCCL_IB_HCA={'=' + ','.join(active) if active else '<device>:<port>'}"
            f" (where it is set: {where}), or unset it to let NCCL use every active port",
        item=ids.IB_HCA.item)


def gid_index_problem(node: str, index: int, where: str, ports: Sequence[Port],
                      peers: Mapping[str, Sequence[Port]]) -> Problem | None:
    """R3: NCCL_IB_GID_INDEX=`index` is set on every active RoCE port here, with the same RoCE
    version as at that index on the peers (both ends of a connection speak one version)."""
    types, problems = judge_gid_index(index, ports)
    mine = set(types.values())
    for peer, peer_ports in peers.items():
        theirs = set(judge_gid_index(index, peer_ports)[0].values())
        if mine and theirs and mine != theirs:
            problems.append(f"GID index {index} is {'/'.join(sorted(mine))} here but "
                            f"{'/'.join(sorted(theirs))} on {peer}: the two ends of a RoCE "
                            f"connection must speak the same version")
    if not problems:
        return None
    return Problem((node,), RdmaCause.GID_INDEX,
                   f"{node}: NCCL_IB_GID_INDEX={index} (from {where}):\n  "
                   + "\n  ".join(problems), fix=GID_FIX, item=ids.IB_GID_INDEX.item)


def gid_index_not_a_number(node: str, value: str, where: str) -> Problem:
    return Problem((node,), RdmaCause.GID_INDEX,
                   f"{node}: NCCL_IB_GID_INDEX={value!r} (from {where}) is not a number",
                   item=ids.IB_GID_INDEX.item)


def _memlock_fix(node: str, limits: Limits, minimum: int) -> str:
    hard = limits.memlock_hard_kb
    rc_lines = [ln.describe() for ln in limits.rc_ulimit_lines if _SETS_MEMLOCK.search(ln.line)]
    raise_soft = hard == UNLIMITED or (minimum != UNLIMITED and hard is not None
                                       and hard >= minimum)
    return (f"on {node}: "
            + "".join(f"remove or raise `{o}`; " for o in rc_lines)
            + ("`ulimit -l unlimited` in ~/.bashrc above any early return (the hard limit "
               "allows it), or " if raise_soft else "")
            + "'* soft memlock unlimited' and '* hard memlock unlimited' in "
              "/etc/security/limits.d/90-rdma.conf (sshd with UsePAM yes), LimitMEMLOCK=infinity "
              "for sshd (systemctl edit ssh), or run the container with --ulimit memlock=-1")


def memlock_problem(node: str, limits: Limits, nports: int, uses_rdma: bool,
                    minimum: int = UNLIMITED) -> Problem | None:
    """R4: locked memory in pdsh's shell, where the launch uses RDMA (`nports` ports here)."""
    wrong = judge_memlock(limits.memlock_soft_kb, limits.memlock_hard_kb, uses_rdma, minimum)
    if wrong is None:
        return None
    origin = memlock_origin(limits, minimum)
    return Problem(
        (node,), RdmaCause.MEMLOCK,
        f"{node}: {wrong} ({nports} RDMA port(s) here); memory registration "
        f"(ibv_reg_mr) fails or NCCL falls back to sockets."
        + ("\n  set by:\n    " + "\n    ".join(origin) if origin else ""),
        fix=_memlock_fix(node, limits, minimum), item=ids.MEMLOCK.item)


def nofile_problem(node: str, limits: Limits, world: int, is_rank0: bool) -> Problem | None:
    """R5: open files in pdsh's shell, enough for the job's sockets."""
    wrong = judge_nofile(limits.nofile_soft, world, is_rank0)
    if not wrong:
        return None
    need = max(nofile_needed(world, is_rank0), 65536)
    set_by = [ln.describe() for ln in limits.rc_ulimit_lines if "-n" in ln.line] + \
        [ln.describe() for ln in limits.limits_conf_lines if "nofile" in ln.line]
    return Problem(
        (node,), RdmaCause.NOFILE,
        f"{node}: {wrong}." + ("\n  set by:\n    " + "\n    ".join(set_by) if set_by else ""),
        fix=f"on {node}: '* soft nofile {need}' in /etc/security/limits.d/90-nofile.conf (and a "
            f"hard limit at least that), LimitNOFILE= for sshd, or the container's --ulimit "
            f"nofile={need}:{need}", item=ids.OPEN_FILES.item)


def shm_problem(node: str, shm: Shm, slots: int,
                per_rank_mb: float = SHM_PER_RANK_MB) -> Problem | None:
    """R6: /dev/shm has room for the node's `slots` local ranks."""
    wrong = judge_shm(shm, slots, per_rank_mb)
    if not wrong:
        return None
    gib = max(1, -(-shm_needed_bytes(slots, per_rank_mb) // (1 << 30)))
    return Problem(
        (node,), RdmaCause.SHM,
        f"{node}: {wrong}. NCCL's SHM transport then fails with 'No space left on device' "
        f"(posix_fallocate / failed to extend /dev/shm/nccl-*), DeepSpeed's CPU all-reduce "
        f"and dataloader workers with a bus error."
        + (f"\n  mounted as: {shm.mount}" if shm.mount else ""),
        fix=f"on {node}: a container: --shm-size={gib}g (docker), an emptyDir with medium: "
            f"Memory on /dev/shm (Kubernetes); a host: mount -o remount,size={gib}G /dev/shm "
            f"(and its size= in /etc/fstab); and remove stale segments of killed jobs "
            f"(ls -la /dev/shm)", item=ids.DEV_SHM.item)
