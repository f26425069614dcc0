"""node/bundle.py: a node's prefetch probes as one command (one channel, one shell, one Python
start-up per node instead of one per section), run for real with this machine's interpreter:
each section answers on its own line as soon as it ends, one that raises or hangs costs only its
own answer, and the facts are those the scripts give when run alone."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import time
from typing import Any

import pytest

from cluster_tests import node
from cluster_tests.core import memokey
from cluster_tests.core.cluster import BOOTSTRAP, BUNDLE_MARK, PROBE_MARK, needs_site, probe_command
from cluster_tests.core.transport import quote_argv

TOY = """\
import time

def section_quick(params):
    return {"n": params["n"], "sections": params["sections"]}

def section_slow(params):
    time.sleep(params["sleep"])
    return {"slept": params["sleep"]}

def section_boom(params):
    raise ValueError("no such file")

if __name__ == "__main__":
    raise SystemExit("a bundled script must not start its own protocol")
"""


def _bundle(sources: dict[str, str], wanted: list[list], timeout: float = 30):
    program = node.script("bundle.py").read_text() + f"\nbundle_main({sources!r})\n"
    proc = subprocess.Popen([sys.executable, "-c", BOOTSTRAP,
                             json.dumps({"bundle": wanted, "timeout": timeout})],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(program)
    proc.stdin.close()
    lines = []  # (seconds since start, index, data), in the order they arrived
    start = time.monotonic()
    for line in proc.stdout:
        if line.startswith(BUNDLE_MARK):
            index, data = json.loads(line[len(BUNDLE_MARK):])
            lines.append((time.monotonic() - start, index, data))
    assert proc.wait(timeout=60) == 0
    return lines


def test_each_section_answers_alone_and_a_hang_costs_only_its_own_answer():
    lines = _bundle({"toy.py": TOY}, [
        ["toy.py", "slow", {"sleep": 600, "timeout": 2}],  # hangs past its own deadline
        ["toy.py", "quick", {"n": 7}],
        ["toy.py", "boom", {}],
        ["toy.py", "nope", {}],
        ["toy.py", "slow", {"sleep": 0.5}],
    ])
    got = {index: data for _, index, data in lines}
    assert sorted(got) == [0, 1, 2, 3, 4] and len(lines) == 5  # each answered once
    assert got[1] == {"n": 7, "sections": ["quick"]}
    assert got[2] == {"error": "ValueError: no such file"}
    assert got[3] == {"error": "unknown section"}
    assert got[4] == {"slept": 0.5}
    assert got[0] == {"error": "did not finish within 2s"}
    order = [index for _, index, _ in lines]
    assert order.index(1) < order.index(4) < order.index(0)  # as each ended, the hang last


def test_a_script_that_does_not_load_fails_its_own_sections_only():
    lines = _bundle({"toy.py": TOY, "bad.py": "def section_x(params):\n  return (\n"},
                    [["bad.py", "x", {}], ["toy.py", "quick", {"n": 1}]])
    got = {index: data for _, index, data in lines}
    assert got[0]["error"].startswith("SyntaxError")
    assert got[1] == {"n": 1, "sections": ["quick"]}


#: the probes of the comparisons below run in a network namespace of their own: they report
#: this machine's interfaces and addresses (`ip`, `hostname -I`), which the simulated clusters
#: of tests running beside these ones (make test's -n 2) add and remove at any moment
ISOLATED = ["unshare", "--net"]


def _alone(script: str, section: str, params: dict) -> dict:
    proc = subprocess.run([*ISOLATED, sys.executable, "-c", BOOTSTRAP,
                           json.dumps({"sections": [section], **params})],
                          input=node.source(script), capture_output=True, timeout=120, check=True)
    line = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith(PROBE_MARK)][-1]
    return json.loads(line[len(PROBE_MARK):])[section]


def test_the_real_probes_give_in_a_bundle_what_they_give_alone(tmp_path):
    wanted: list[tuple[str, str, dict]] = [
        ("probe.py", "sshd", {}), ("envprobe.py", "envfiles", {"launch_dir": str(tmp_path)}),
        ("probe.py", "base", {"names": ["localhost"]}), ("netprobe.py", "firewall", {})]
    proc = subprocess.run([*ISOLATED, sys.executable, "-c", BOOTSTRAP,
                           json.dumps({"bundle": wanted, "timeout": 60})],
                          input=node.bundle_source(("envprobe.py", "netprobe.py", "probe.py")),
                          capture_output=True, timeout=120, check=True)
    got = {}
    for line in proc.stdout.decode().splitlines():
        if line.startswith(BUNDLE_MARK):
            index, data = json.loads(line[len(BUNDLE_MARK):])
            got[index] = data
    assert sorted(got) == [0, 1, 2, 3]
    for index, (script, section, params) in enumerate(wanted):
        alone = _alone(script, section, params)
        assert "error" not in got[index], got[index]
        assert _facts(got[index]) == _facts(alone), section


def test_standard_library_probes_start_without_site_packages_with_the_same_facts(tmp_path):
    """The probes that import nothing installed start with `-S` (no .pth files, no editable
    finders: 21 -> 7 ms a start in this project's venv), and give the same facts; E3's
    versions and A1's devices import torch, and keep the site-packages that hold it."""
    wanted: list[tuple[str, str, dict]] = [
        ("probe.py", "sshd", {}), ("envprobe.py", "envfiles", {"launch_dir": str(tmp_path)}),
        ("probe.py", "base", {"names": ["localhost"]}), ("netprobe.py", "firewall", {})]
    assert not needs_site(wanted)
    assert needs_site([*wanted, ("envprobe.py", "versions", {})])
    assert needs_site([("envprobe.py", "envfiles", {"python": "/opt/launch/bin/python"})])
    args = json.dumps({"bundle": wanted, "timeout": 60})
    source = node.bundle_source(("envprobe.py", "netprobe.py", "probe.py"))
    runs = {}
    for site in (True, False):
        argv, stdin = probe_command(sys.executable, args, source, site=site)
        assert ("-S" in argv) is not site
        proc = subprocess.run([*ISOLATED, *argv], input=stdin, capture_output=True,
                              timeout=120, check=True)
        runs[site] = {i: d for i, d in (json.loads(ln[len(BUNDLE_MARK):])
                                        for ln in proc.stdout.decode().splitlines()
                                        if ln.startswith(BUNDLE_MARK))}
    assert sorted(runs[False]) == [0, 1, 2, 3]
    assert _facts(runs[False]) == _facts(runs[True])
    # and why the others keep it: torch is found only through the site-packages
    versions: list[tuple[str, str, dict[str, Any]]] = [("envprobe.py", "versions", {})]
    for site in (True, False):
        argv, stdin = probe_command(sys.executable, json.dumps({"sections": ["versions"]}),
                                    node.source("envprobe.py"), site=site)
        proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=120, check=True)
        line = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith(PROBE_MARK)][-1]
        torch = json.loads(line[len(PROBE_MARK):])["versions"].get("torch")
        assert (torch is not None) is site and needs_site(versions)


#: what differs from run to run: timings
VOLATILE = frozenset({"seconds"})


def _facts(data):
    """A probe's facts without what differs from run to run (VOLATILE)."""
    if isinstance(data, dict):
        return {k: _facts(v) for k, v in data.items() if k not in VOLATILE}
    if isinstance(data, list):
        return [_facts(v) for v in data]
    return data


COUNT = """\
import json, sys
params = json.loads(sys.argv[1])
print("CT_PROBE_JSON:" + json.dumps({"count": {"n": len(params["targets"]),
                                               "last": params["targets"][-1]}}))
"""


def test_long_parameters_travel_on_stdin_where_a_command_line_cannot_carry_them():
    # the port matrix's connect at 2000 nodes: every peer's name and ports, 165 KB of JSON
    targets = [{"name": f"node{i}.cluster.example", "ports": [40000 + i, 41000 + i, 42000 + i],
                "master_port": None} for i in range(2000)]
    args = memokey.dumps({"sections": ["count"], "targets": memokey.Encoded(targets)})
    assert json.loads(args)["targets"] == targets  # spliced in as JSON, not as a string
    # sshd runs the command as `$SHELL -c COMMAND`: one argument, which Linux caps at 128 KiB
    with pytest.raises(OSError) as refused:
        subprocess.run(["bash", "-c", quote_argv([sys.executable, "-c", BOOTSTRAP, args])],
                       capture_output=True, check=False)
    assert refused.value.errno == errno.E2BIG
    argv, stdin = probe_command(sys.executable, args, COUNT.encode())
    assert len(argv) == 3 and len(quote_argv(argv)) < 1000
    proc = subprocess.run(["bash", "-c", quote_argv(argv)], input=stdin, capture_output=True,
                          timeout=60, check=True)
    line = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith(PROBE_MARK)][-1]
    assert json.loads(line[len(PROBE_MARK):])["count"] == {"n": 2000, "last": targets[-1]}
    # short ones stay where they were, in the command line
    argv, stdin = probe_command(sys.executable, '{"sections": ["count"]}', b"source")
    assert argv[-1] == '{"sections": ["count"]}' and stdin == b"source"


def test_an_encoded_parameter_keys_the_memo_by_its_content():
    one, same, other = (memokey.Encoded([{"name": n}]) for n in ("a", "a", "b"))
    key = memokey.probe_key("node1", "connect", {"targets": one}, "netprobe.py")
    assert key == memokey.probe_key("node1", "connect", {"targets": same}, "netprobe.py")
    assert key != memokey.probe_key("node1", "connect", {"targets": other}, "netprobe.py")
    assert key != memokey.probe_key("node2", "connect", {"targets": one}, "netprobe.py")
