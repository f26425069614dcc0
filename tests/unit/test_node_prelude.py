"""The node-side parts (node.PARTS: the prelude, versions.py): every script sent with parts
compiles as Python 3.6 together with them, defines none of their names (nor do two parts of one
script share a name), uses no name that what is sent does not define, and the probe family runs
locally from the combined source."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys

import pytest

from cluster_tests import node
from cluster_tests.core.cluster import PROBE_MARK

ALL = sorted(p.name for p in node.DIR.glob("*.py")
             if p.name != "__init__.py" and p.name not in node.PART_FILES)


def _top_names(tree: ast.Module) -> set[str]:
    names = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return names


def _names(filename: str) -> set[str]:
    return _top_names(ast.parse((node.DIR / filename).read_text()))


def test_every_script_sent_with_parts_is_there() -> None:
    assert set(node.PARTS) <= set(ALL) and node.PART_FILES <= {p.name for p in node.DIR.iterdir()}


@pytest.mark.parametrize("name", ALL)
def test_combined_source_is_python36(name: str) -> None:
    ast.parse(node.source(name), filename=name, feature_version=(3, 6))


@pytest.mark.parametrize("name", sorted(node.PARTS))
def test_no_script_shadows_its_parts(name: str) -> None:
    seen = _names(name)
    for part in node.PARTS[name]:
        assert not _names(part) & seen, part
        seen |= _names(part)


@pytest.mark.parametrize("name", sorted(node.PRELUDED))
def test_probe_runs_from_combined_source(name: str) -> None:
    args = json.dumps({"sections": ["no-such-section"]})
    proc = subprocess.run([sys.executable, "-", args], input=node.source(name),
                          capture_output=True, timeout=60, check=True)
    line = proc.stdout.decode().strip().splitlines()[-1]
    assert line.startswith(PROBE_MARK)
    assert json.loads(line[len(PROBE_MARK):]) == {"no-such-section": {"error": "unknown section"}}


@pytest.mark.parametrize("name", sorted(node.PARTS))
def test_combined_source_defines_every_name(name: str, tmp_path) -> None:
    """The scripts use their parts' names unseen (ruff ignores F821 in them): what is sent,
    prelude and script together, must define every name it uses."""
    path = tmp_path / name
    path.write_bytes(node.source(name))
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821",
                           "--output-format", "concise", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_section_is_a_function_named_after_it(tmp_path) -> None:
    """probe_main finds `section_<name>` in the script's globals: no table to keep in step."""
    script = node.source("storeprobe.py").replace(
        b'\nif __name__ == "__main__":', b'\ndef section_extra(params):\n    return params["x"]\n\n'
        b'\nif __name__ == "__main__":')
    args = json.dumps({"sections": ["extra", "dir"], "x": 7, "path": str(tmp_path)})
    proc = subprocess.run([sys.executable, "-", args], input=script, capture_output=True,
                          timeout=60, check=True)
    got = json.loads(proc.stdout.decode().strip().splitlines()[-1][len(PROBE_MARK):])
    assert got["extra"] == 7 and got["dir"].get("error") is None


def test_admin_tools_are_found_off_a_regular_users_path() -> None:
    """A regular user's PATH on Debian and Ubuntu has no /usr/sbin: F4 looked for iptables on
    it, found none, and said no firewall tool was installed. The prelude's admin_tool also
    looks where the administration tools live (the sim's iptables is /usr/sbin's)."""
    expected = shutil.which("iptables", path="/usr/sbin:/sbin")
    assert expected is not None  # installed by `make setup` (the sim's faults need it)
    code = (node.source("netprobe.py").split(b'\nif __name__ == "__main__":')[0]
            + b"\nprint(admin_tool('iptables'), admin_tool('ct-no-such-tool'))\n")
    proc = subprocess.run([sys.executable, "-"], input=code, capture_output=True, timeout=60,
                          check=True, env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
    assert proc.stdout.decode().split() == [expected, "None"]
