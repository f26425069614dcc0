"""The names of the checks that code outside their own definition refers to, one constant each.

The reports pick results by test function (`summary.Recorder.by_function(ids.ALLREDUCE.name)`),
the fix tables are keyed by it, and many failure messages send the user to another check
("see test_login[node3]").  A string there would go stale silently when a check is renamed;
through these constants it cannot: tests/unit/test_testids.py checks that every constant names a test
function of cluster_tests/checks/ whose docstring opens with its checklist item, and that no
string literal outside checks/ and this module (nor a message in checks/) spells a test name.

    str(ids.LOGIN)                  -> "test_login"
    ids.LOGIN.of("node1")           -> "test_login[node1]"            (the plugin's node ids)
    ids.RESOLVES.of("node1", "node2") -> "test_resolves[node1->node2]"  (its pair ids)
    ids.ASCEND_ENV.item, .module    -> "E4", "test_env"

Dependency-free: imports nothing from cluster_tests, so that every layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass

# docs/CHECKLIST.md's section letter -> the check module that holds the section
MODULES = {"H": "test_hostfile", "S": "test_ssh", "N": "test_names", "F": "test_network",
           "E": "test_env", "A": "test_accelerator", "R": "test_health", "D": "test_storage",
           "C": "test_collective", "T": "test_training"}


@dataclass(frozen=True)
class TestId:
    """A check's test function: its name and the checklist item(s) its docstring opens with."""

    __test__ = False  # not a pytest test class, wherever it is imported

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
        """The check module that defines it: "test_ssh"."""
        return MODULES[self.section]

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
SSHD_CONFIG = TestId("test_sshd_config", "S3")
SSH_TRUST = TestId("test_ssh_trust", "S4")
PDSH_INSTALLED = TestId("test_pdsh_installed", "S5")
PDSH = TestId("test_pdsh", "S5")
# N. name resolution
RESOLVES = TestId("test_resolves", "N1")
NAME_CONSISTENT = TestId("test_name_consistent", "N2")
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
# A. accelerators
ACCELERATORS = TestId("test_accelerators", "A1")
# R. RDMA and node health
IB_HCA = TestId("test_ib_hca", "R2")
MEMLOCK = TestId("test_memlock", "R4")
# D. storage
OUTPUT_DIR = TestId("test_output_dir", "D1")
# C. collectives
ALLREDUCE = TestId("test_allreduce", "C1 + C3")
ALLREDUCE_PAIR = TestId("test_allreduce_pair", "C2")
# T. training
TRAIN_SINGLE_NODE = TestId("test_train_single_node", "T1")
TRAIN_MULTI_NODE = TestId("test_train_multi_node", "T2")
