"""judge/common/netfacts.py: interfaces and addresses as `ip -o link` / `ip -o addr` print them
(a real node's capture, tests/data/samples), and what counts as an address."""

from __future__ import annotations

import json

from paths import SAMPLES

from cluster_tests.judge.common import netfacts

_IP = json.loads((SAMPLES / "ip-o-addr-link-docker0-dualstack.json").read_text())[
    "captures"]["eth0, eth1 and docker0"]


def test_interfaces_of_a_real_node() -> None:
    ifaces = netfacts.parse_interfaces(_IP["link"], _IP["addr"])
    assert {"lo", "eth0", "eth1", "docker0"} <= set(ifaces)
    assert "10.137.169.3" in ifaces["eth0"].ips and ifaces["eth0"].mtu
    ips = netfacts.all_ips(ifaces)
    assert {"10.137.169.3", "172.17.0.1", "127.0.0.1"} <= ips


def test_what_is_an_address() -> None:
    assert netfacts.is_ip("10.0.0.1") and netfacts.is_ip("fe80::1")
    assert not netfacts.is_ip("node1") and not netfacts.is_ip("10.0.0")
    assert netfacts.is_loopback("127.0.1.1") and netfacts.is_loopback("::1")
    assert not netfacts.is_loopback("10.0.0.1") and not netfacts.is_loopback("localhost")


def test_a_route_names_its_device() -> None:
    line = "10.0.0.2 dev eth0 src 10.0.0.1 uid 0 \n    cache "
    assert netfacts.route_device(line) == "eth0"
    assert netfacts.route_device("RTNETLINK answers: Network is unreachable") is None
