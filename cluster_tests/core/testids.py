"""The names of the checks that code outside their own definition refers to, one constant each.

The reports pick results by test function (`summary.Recorder.by_function(ids.ALLREDUCE.name)`),
the fix tables are keyed by it, and many failure messages send the user to another check
("see test_login[node3]").  A string there would go stale silently when a check is renamed;
through these constants it cannot: tests/unit/test_testids.py checks that every constant names a
test function of cluster_tests/checks/ whose docstring opens with its checklist item, and that no
string literal outside checks/ and this module (nor a message in checks/) spells a test name.

    str(ids.LOGIN)                  -> "test_login"
    ids.LOGIN.of("node1")           -> "test_login[node1]"            (the plugin's node ids)
    ids.RESOLVES.of("node1", "node2") -> "test_resolves[node1->node2]"  (its pair ids)
    ids.ASCEND_ENV.item, .module    -> "E4", "env"

Dependency-free: imports nothing from cluster_tests but the section table (core.sections, itself
dependency-free), so that every layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from cluster_tests.core.sections import BY_LETTER

#: the machine the run starts from, as a launch site in test ids (`test_pdsh_installed[launcher]`)
#: and as the first end of a launcher -> node leg
LAUNCHER = "launcher"


class Scope(Enum):
    """Where a cause lives, which says what leaving nodes out of the launch can do about it
    (judge/healthyset.py reads it to write hostfile.healthy; docs/CHECKLIST.md, "What the launch
    needs", says why, check by check). A check's own scope is its TestId's; a Problem may name
    another (`Problem.scope`: S4's own key refused on rank 0 is AS_RANK0)."""

    #: on the node(s) it names: leaving them out avoids it
    NODE = "node"
    #: between two nodes that the launch needs together: leaving out either end avoids it
    PAIR = "pair"
    #: a leg the launch needs only from rank 0 (pdsh's ssh): leaving out its target avoids it
    FROM_RANK0 = "from-rank0"
    #: a pair the launch needs when either end is rank 0 (names rank 0 resolves for pdsh,
    #: every node resolving rank 0's name)
    RANK0_PAIR = "rank0-pair"
    #: the node may stay, but not as rank 0 (another rank 0 avoids it)
    AS_RANK0 = "as-rank0"
    #: the launch does not need it: reported, no node left out
    NOT_NEEDED = "none"
    #: on the launcher, where the launch starts (its pdsh, its ssh): no subset of nodes avoids it
    LAUNCHER = "launcher"
    #: in what the launcher hands every rank (its .deepspeed_env files, the variables DeepSpeed
    #: exports, the launch's flags): no subset of nodes avoids it
    LAUNCH_WIDE = "launch-wide"

    @property
    def no_subset(self) -> bool:
        """Whether no choice of nodes avoids the cause: the launch waits for its fix."""
        return self in (Scope.LAUNCHER, Scope.LAUNCH_WIDE)


@dataclass(frozen=True)
class TestId:
    """A check's test function: its name, the checklist item(s) its docstring opens with, and
    the scope of its causes (what the launch needs of it)."""

    name: str  # "test_login"
    item: str  # "S1"; "C1 + C3" where one test covers two items
    scope: Scope

    def __str__(self) -> str:
        return self.name

    @property
    def items(self) -> tuple[str, ...]:
        """Its checklist items, one each: ("C1", "C3") for "C1 + C3"."""
        return tuple(self.item.split(" + "))

    @property
    def section(self) -> str:
        """The checklist section letter: "S"."""
        return self.item[0]

    @property
    def module(self) -> str:
        """The check module that defines it: "ssh" (cluster_tests/checks/ssh.py)."""
        return BY_LETTER[self.section].module

    def of(self, *params: str) -> str:
        """The test id of one parametrization: `of(node)` -> "test_login[node]", `of(a, b)` ->
        "test_resolves[a->b]" (the plugin joins a pair's nodes with "->")."""
        return f"{self.name}[{'->'.join(params)}]"


# H. the hostfile
#: the healthy file is written in DeepSpeed's own form
HOSTFILE_SYNTAX = TestId("test_hostfile_syntax", "H1", Scope.NOT_NEEDED)
HOSTNAME_MATCHES = TestId("test_hostname_matches", "H2", Scope.NODE)
MASTER_ADDR = TestId("test_master_addr", "H3", Scope.AS_RANK0)
SLOTS_FIT_ACCELERATORS = TestId("test_slots_fit_accelerators", "H4", Scope.NODE)
INCLUDE_EXCLUDE = TestId("test_include_exclude", "H5", Scope.LAUNCH_WIDE)  # the launch's own flags
# S. SSH
LOGIN = TestId("test_login", "S1", Scope.NODE)
SSH_MODES = TestId("test_ssh_modes", "S2", Scope.NODE)
SSHD_CONFIG = TestId("test_sshd_config", "S3", Scope.NODE)
#: between two other nodes: reported, not needed
SSH_TRUST = TestId("test_ssh_trust", "S4", Scope.FROM_RANK0)
PDSH_INSTALLED = TestId("test_pdsh_installed", "S5", Scope.AS_RANK0)
#: from the launcher: the target, or the launcher itself
PDSH = TestId("test_pdsh", "S5", Scope.FROM_RANK0)
LOGIN_TIME = TestId("test_login_time", "S6", Scope.NOT_NEEDED)
# N. name resolution
RESOLVES = TestId("test_resolves", "N1", Scope.RANK0_PAIR)
NAME_CONSISTENT = TestId("test_name_consistent", "N2", Scope.NODE)
HOSTNAME_NOT_LOOPBACK = TestId("test_hostname_not_loopback", "N3", Scope.NODE)
RESOLVE_FAST = TestId("test_resolve_fast", "N4", Scope.NOT_NEEDED)
# F. network
REACHABLE = TestId("test_reachable", "F1", Scope.PAIR)
#: node -> rank 0; rank 0 -> rank 0 (port taken): as-rank0
MASTER_PORT = TestId("test_master_port", "F2", Scope.PAIR)
HIGH_PORTS = TestId("test_high_ports", "F3", Scope.PAIR)
#: red only where F3 shows drops: F3 holds the pair
FIREWALL_RULES = TestId("test_firewall_rules", "F4", Scope.NOT_NEEDED)
SOCKET_IFNAME = TestId("test_socket_ifname", "F5", Scope.NODE)
SOCKET_IFNAME_ROUTE = TestId("test_socket_ifname_route", "F5", Scope.PAIR)
MTU = TestId("test_mtu", "F6", Scope.NODE)
#: the node's own address, as its gloo ranks advertise it
OWN_ADDRESS = TestId("test_own_address", "F7", Scope.NODE)
# E. environment
REQUIRED_ENV = TestId("test_required_env", "E1", Scope.NODE)
ENV_AGREES = TestId("test_env_agrees", "E2", Scope.NODE)
DEEPSPEED_ENV = TestId("test_deepspeed_env", "E2", Scope.NODE)
VERSIONS = TestId("test_versions", "E3", Scope.NODE)
ASCEND_ENV = TestId("test_ascend_env", "E4", Scope.NODE)
LAUNCH_REHEARSAL = TestId("test_launch_rehearsal", "E5", Scope.NODE)
TMPDIR = TestId("test_tmpdir", "E6", Scope.NODE)
JIT_OPS = TestId("test_jit_ops", "E7", Scope.NODE)
LAUNCH_FILES = TestId("test_launch_files", "E8", Scope.NODE)
# A. accelerators
ACCELERATORS = TestId("test_accelerators", "A1", Scope.NODE)
# R. RDMA and node health
RDMA_PORTS = TestId("test_rdma_ports", "R1", Scope.NODE)
IB_HCA = TestId("test_ib_hca", "R2", Scope.NODE)
IB_GID_INDEX = TestId("test_ib_gid_index", "R3", Scope.NODE)
MEMLOCK = TestId("test_memlock", "R4", Scope.NODE)
OPEN_FILES = TestId("test_open_files", "R5", Scope.NODE)
DEV_SHM = TestId("test_dev_shm", "R6", Scope.NODE)
GPU_HEALTH = TestId("test_gpu_health", "R7", Scope.NODE)
NPU_HEALTH = TestId("test_npu_health", "R8", Scope.NODE)
#: a GPU DCGM fails, an NPU whose RoCE port fails its probe
ACCEL_DIAG = TestId("test_accel_diag", "R9", Scope.NODE)
# D. storage
OUTPUT_DIR = TestId("test_output_dir", "D1", Scope.NODE)
OUTPUT_SHARED = TestId("test_output_shared", "D2", Scope.PAIR)
# C. collectives: whole-cluster runs name no node of their own (their suspects are C2's pairs)
ALLREDUCE = TestId("test_allreduce", "C1 + C3", Scope.NOT_NEEDED)
ALLREDUCE_BUSBW = TestId("test_allreduce_busbw", "C1", Scope.NOT_NEEDED)
ALLREDUCE_PAIR = TestId("test_allreduce_pair", "C2", Scope.PAIR)
# T. training
TRAIN_SINGLE_NODE = TestId("test_train_single_node", "T1", Scope.NODE)
TRAIN_MULTI_NODE = TestId("test_train_multi_node", "T2", Scope.NOT_NEEDED)

#: every check, in checklist order
CHECKS: tuple[TestId, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, TestId))
#: every check by its test function's name
BY_NAME: dict[str, TestId] = {t.name: t for t in CHECKS}
