"""A node of the unit tests' own: node/probe.py's base section run here, as a node runs it, in
namespaces of its own, so that a judge is tested on the facts a real probe gives on a node with
that fault.

    facts = base_facts("gpu-07", hosts="10.77.0.9 node3", names=["node3"])

- network: an interface ``eth0`` with the given addresses (its veth peer ``veth0`` beside it,
  no route out, no IPv6 link-local address: the facts are the same on every run): ``ip -o
  addr/link`` and ``hostname -I`` as on a node;
- UTS: its hostname;
- mount: its /etc/hosts (with ``127.0.0.1 localhost``), an empty /etc/resolv.conf (a name not in
  the hosts file is not found, at once) and its /etc/ssh/ssh_config (``ssh -G``).

Nothing of the machine changes: the namespaces end with the probe. Needs root and unshare(1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cluster_tests import node
from cluster_tests.core.cluster import BOOTSTRAP, PROBE_MARK
from cluster_tests.judge.common.basefacts import BaseFacts

#: the namespace's setup; "$@" is then the probe's command line
_SETUP = """set -e
echo 1 > /proc/sys/net/ipv6/conf/default/addr_gen_mode
ip link add eth0 type veth peer name veth0
for a in $CT_ADDRS; do ip addr add "$a" dev eth0; done
ip link set eth0 up; ip link set veth0 up; ip link set lo up
hostname "$CT_HOSTNAME"
mount --bind "$CT_DIR/hosts" /etc/hosts
mount --bind "$CT_DIR/resolv.conf" /etc/resolv.conf
mount --bind "$CT_DIR/ssh_config" /etc/ssh/ssh_config
exec "$@"
"""


def probe(section: str, hostname: str = "node3", addresses: Sequence[str] = ("10.77.0.3/24",),
          hosts: str = "", ssh_config: str = "", **params: object) -> object:
    """node/probe.py's answer for `section` on a node called `hostname` with `addresses` on
    eth0, the lines `hosts` in its /etc/hosts and `ssh_config` as its ssh client's config."""
    with tempfile.TemporaryDirectory(prefix="ct-probenode-") as tmp:
        d = Path(tmp)
        (d / "hosts").write_text(f"127.0.0.1 localhost\n{hosts}\n")
        (d / "resolv.conf").write_text("")
        (d / "ssh_config").write_text(ssh_config)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CT_DIR": tmp, "CT_HOSTNAME": hostname,
               "CT_ADDRS": " ".join(addresses)}
        proc = subprocess.run(
            ["unshare", "--net", "--mount", "--uts", "--propagation", "private",
             "sh", "-c", _SETUP, "sh", sys.executable, "-c", BOOTSTRAP,
             json.dumps({"sections": [section], **params})],
            input=node.source("probe.py"), capture_output=True, timeout=60, env=env, check=True)
    line = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith(PROBE_MARK)][-1]
    return json.loads(line[len(PROBE_MARK):])[section]


def base_facts(hostname: str = "node3", addresses: Sequence[str] = ("10.77.0.3/24",),
               hosts: str = "", names: Sequence[str] = (), ssh_config: str = "",
               ssh_all: bool = False) -> BaseFacts:
    """The base facts of such a node, as Cluster.base reads them (`names`: the hostfile's
    names it resolves; `ssh_all`: it asks `ssh -G` of each, as the rank-0 node does)."""
    return BaseFacts.read(probe("base", hostname, addresses, hosts, ssh_config,
                                names=list(names), ssh_all=ssh_all))
