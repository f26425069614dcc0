"""Site checks with pytest-testinfra, over the run's own SSH sessions.

A site's own checks (a mount, a package version, a service) are written against testinfra's
``host`` API, through the ``cluster_host`` fixture (plugin.py): one testinfra host per node of the
hostfile, with the node as the test id (``test_nccl[node3]``), so that the results join the
cluster summary, the JUnit report and ``-k node3``.

testinfra's own paramiko backend (10.2) is not used as it is: it accepts unknown host keys with a
warning, loads no known_hosts, ignores the ssh config's UserKnownHostsFile and ConnectTimeout,
and runs commands without a deadline (PITFALLS 1). :class:`ClusterBackend` keeps testinfra's
paramiko personality (modules see the connection type "paramiko") but runs every command through
the run's already verified connection to the node (cluster_tests.core.transport.Connection: the
same ssh config, user, identity and strict known_hosts, one session per node shared with the
checklist)
with ``--timeout-command`` as the deadline, enforced on the node too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import testinfra.host
from testinfra.backend import base
from testinfra.backend.paramiko import ParamikoBackend

if TYPE_CHECKING:
    from cluster_tests.core.cluster import Cluster


class SiteCommandTimeout(AssertionError):
    """A site check's command did not finish within --timeout-command."""


class ClusterBackend(ParamikoBackend):
    """testinfra's paramiko backend, over the run's own verified session to one node."""

    NAME = "paramiko"

    def __init__(self, cluster: Cluster, node: str, *, sudo: bool = False,
                 sudo_user: str | None = None, timeout: float | None = None) -> None:
        self.cluster = cluster
        self.node = node
        self.command_timeout = float(timeout or cluster.settings.timeout_command)
        target = cluster.pool.targets[node]
        super().__init__(node, ssh_config=cluster.settings.ssh_config,
                         timeout=int(target.connect_timeout), sudo=sudo, sudo_user=sudo_user)

    @property
    def client(self):  # noqa: ANN201 - paramiko.SSHClient
        """Our connection's client: logged in once with strict host keys (never WarningPolicy)."""
        self.cluster.require(self.node)
        return self.cluster.pool.connection(self.node).connect()

    def get_pytest_id(self) -> str:
        return self.node

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        cmd = self.get_command(command, *args)
        self.cluster.require(self.node)
        res = self.cluster.run(self.node, cmd, timeout=self.command_timeout)
        if res.timed_out:
            raise SiteCommandTimeout(
                f"{self.node}: `{cmd}` did not finish within {self.command_timeout:g} s "
                f"(--timeout-command); it was ended on the node")
        return self.result(res.exit_status, self.encode(cmd), res.stdout, res.stderr)


def host_for(cluster: Cluster, node: str, **kwargs: Any) -> testinfra.host.Host:
    """A testinfra Host for `node` over the run's connection (see the module docstring)."""
    backend = ClusterBackend(cluster, node, **kwargs)
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host


def site_paths(value: str | None) -> list[str]:
    """--site-checks: comma-separated files or directories."""
    return [p.strip() for p in (value or "").split(",") if p.strip()]

