"""F7's own address, for real on this machine, against what torch's gloo reads (issue 24: "with
*_SOCKET_IFNAME and MASTER_ADDR honoured where set").  torch's ProcessGroupGloo
(init.cpp; ProcessGroupGloo::createDefaultDevice) reads GLOO_SOCKET_IFNAME and otherwise
gethostname() + getaddrinfo; MASTER_ADDR only names the TCPStore every rank dials (H3/F2 judge
it), never the address a rank binds and advertises.  So MASTER_ADDR set in a rank's environment
must not move F7's address, and GLOO_SOCKET_IFNAME must."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cluster_tests import node

MARK = "CT_PROBE_JSON:"


def _listen(env: dict[str, str], **params) -> dict:
    argv = [sys.executable, "-c", node.source("netprobe.py").decode(),
            json.dumps({"sections": ["listen"], "token": "t", "ports": 1, "hold": 0,
                        "own_address": True, **params})]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **env})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(lines[-1][len(MARK):])["listen"]["own"]


def test_master_addr_does_not_move_a_ranks_own_gloo_address():
    plain = _listen({})
    with_master = _listen({"MASTER_ADDR": "192.0.2.77"})
    keys = ("how", "hostname", "candidates", "addr", "family")
    assert {k: with_master.get(k) for k in keys} == {k: plain.get(k) for k in keys}
    assert with_master["addr"] != "192.0.2.77"


def test_gloo_socket_ifname_names_the_interface_whose_address_is_bound():
    own = _listen({}, gloo_ifname="lo")
    assert own["how"] == "GLOO_SOCKET_IFNAME=lo" and own["addr"] == "127.0.0.1", own
