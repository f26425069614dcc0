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

from cluster_tests.core.sections import BY_LETTER

#: the machine the run starts from, as a launch site in test ids (`test_pdsh_installed[launcher]`)
#: and as the first end of a launcher -> node leg
LAUNCHER = "launcher"


@dataclass(frozen=True)
class TestId:
    """A check's test function: its name and the checklist item(s) its docstring opens with."""

    name: str  # "test_login"
    item: str  # "S1"; "C1 + C3" where one test covers two items

    def __str__(self) -> str:
        return self.name

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
HOSTFILE_SYNTAX = TestId("test_hostfile_syntax", "H1")
HOSTNAME_MATCHES = TestId("test_hostname_matches", "H2")
MASTER_ADDR = TestId("test_master_addr", "H3")
# S. SSH
LOGIN = TestId("test_login", "S1")
SSH_MODES = TestId("test_ssh_modes", "S2")
SSHD_CONFIG = TestId("test_sshd_config", "S3")
SSH_TRUST = TestId("test_ssh_trust", "S4")
PDSH_INSTALLED = TestId("test_pdsh_installed", "S5")
PDSH = TestId("test_pdsh", "S5")
# N. name resolution
RESOLVES = TestId("test_resolves", "N1")
NAME_CONSISTENT = TestId("test_name_consistent", "N2")
HOSTNAME_NOT_LOOPBACK = TestId("test_hostname_not_loopback", "N3")
# F. network
REACHABLE = TestId("test_reachable", "F1")
MASTER_PORT = TestId("test_master_port", "F2")
HIGH_PORTS = TestId("test_high_ports", "F3")
FIREWALL_RULES = TestId("test_firewall_rules", "F4")
SOCKET_IFNAME = TestId("test_socket_ifname", "F5")
OWN_ADDRESS = TestId("test_own_address", "F7")
# E. environment
REQUIRED_ENV = TestId("test_required_env", "E1")
DEEPSPEED_ENV = TestId("test_deepspeed_env", "E2")
VERSIONS = TestId("test_versions", "E3")
ASCEND_ENV = TestId("test_ascend_env", "E4")
LAUNCH_REHEARSAL = TestId("test_launch_rehearsal", "E5")
TMPDIR = TestId("test_tmpdir", "E6")
JIT_OPS = TestId("test_jit_ops", "E7")
# A. accelerators
ACCELERATORS = TestId("test_accelerators", "A1")
# R. RDMA and node health
IB_HCA = TestId("test_ib_hca", "R2")
MEMLOCK = TestId("test_memlock", "R4")
GPU_HEALTH = TestId("test_gpu_health", "R7")
ACCEL_DIAG = TestId("test_accel_diag", "R9")
# D. storage
OUTPUT_DIR = TestId("test_output_dir", "D1")
# C. collectives
ALLREDUCE = TestId("test_allreduce", "C1 + C3")
ALLREDUCE_PAIR = TestId("test_allreduce_pair", "C2")
# T. training
TRAIN_SINGLE_NODE = TestId("test_train_single_node", "T1")
TRAIN_MULTI_NODE = TestId("test_train_multi_node", "T2")


# What the launch needs of each check (judge/healthyset.py reads it to write hostfile.healthy;
# docs/CHECKLIST.md "What the launch needs" says why, check by check).
#: Needs: "node" the node; "pair" both nodes together (either is dropped); "from-rank0" the
#: pair only when its first node is rank 0 (the target is dropped); "rank0-pair" the pair when
#: either end is rank 0 (names rank 0 resolves for pdsh, every node resolving rank 0's name);
#: "as-rank0" the node may stay, but not as rank 0; "none" the launch does not need it.
LAUNCH_NEEDS: dict[str, str] = {
    # H
    "test_hostfile_syntax": "none",  # the healthy file is written in DeepSpeed's own form
    "test_hostname_matches": "node",
    "test_master_addr": "as-rank0",
    "test_slots_fit_accelerators": "node",
    "test_include_exclude": "none",
    # S
    "test_login": "node",
    "test_ssh_modes": "node",
    "test_sshd_config": "node",
    "test_ssh_trust": "from-rank0",  # between two other nodes: reported, not needed
    "test_pdsh_installed": "as-rank0",
    "test_pdsh": "from-rank0",  # from the launcher: the target (see pdsh_needs)
    "test_login_time": "none",
    # N
    "test_resolves": "rank0-pair",
    "test_name_consistent": "node",
    "test_hostname_not_loopback": "node",
    "test_resolve_fast": "none",
    # F
    "test_reachable": "pair",
    "test_high_ports": "pair",
    "test_master_port": "pair",  # node -> rank 0; rank 0 -> rank 0 (port taken): as-rank0
    "test_firewall_rules": "none",  # red only where F3 shows drops: F3 holds the pair
    "test_socket_ifname": "node",
    "test_socket_ifname_route": "pair",
    "test_mtu": "node",
    "test_own_address": "node",  # the node's own address, as its gloo ranks advertise it
    # E
    "test_required_env": "node",
    "test_env_agrees": "node",
    "test_deepspeed_env": "node",
    "test_versions": "node",
    "test_ascend_env": "node",
    "test_launch_rehearsal": "node",
    "test_tmpdir": "node",
    "test_jit_ops": "node",
    # A, R
    "test_accelerators": "node",
    "test_rdma_ports": "node",
    "test_ib_hca": "node",
    "test_ib_gid_index": "node",
    "test_memlock": "node",
    "test_open_files": "node",
    "test_dev_shm": "node",
    "test_gpu_health": "node",
    "test_npu_health": "node",
    "test_accel_diag": "node",  # a GPU DCGM fails, an NPU whose RoCE port fails its probe
    # D
    "test_output_dir": "node",
    "test_output_shared": "pair",
    # C, T: whole-cluster runs name no node of their own (their suspects are C2's pairs)
    "test_allreduce": "none",
    "test_allreduce_busbw": "none",
    "test_allreduce_pair": "pair",
    "test_train_single_node": "node",
    "test_train_multi_node": "none",
}
