"""Typed settings (cluster_tests.core.settings): defaults, precedence, bad values, the markers."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from paths import REPO

from cluster_tests.core import sections
from cluster_tests.core import settings as S


def _config(cli: dict | None = None,
            ini: dict | None = None) -> Any:  # a stand-in for pytest.Config
    """What read_settings asks of a pytest.Config: the parsed options and the ini values."""
    option = SimpleNamespace(**{opt.dest: None for opt in S.OPTIONS})
    for dest, value in (cli or {}).items():
        setattr(option, dest, value)
    ini = ini or {}
    return SimpleNamespace(option=option, getini=lambda name: ini.get(name))


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for opt in S.OPTIONS:
        monkeypatch.delenv(opt.env, raising=False)


def test_every_option_is_declared_once_with_names_from_its_flag() -> None:
    flags = [o.flag for o in S.OPTIONS]
    assert len(flags) == len(set(flags)) == len({o.dest for o in S.OPTIONS})
    port = next(o for o in S.OPTIONS if o.flag == "--port-timeout")
    assert (port.dest, port.ini, port.env) == (
        "ct_port_timeout", "cluster_port_timeout", "CLUSTER_TESTS_PORT_TIMEOUT")
    include = next(o for o in S.OPTIONS if o.flag == "--launch-include")
    assert (include.ini, include.env) == ("cluster_launch_include", "CLUSTER_TESTS_LAUNCH_INCLUDE")
    assert [o.flag for o in S.OPTIONS if o.foreign] == ["--ssh-config"]


def test_defaults_typed_per_section() -> None:
    s = S.read_settings(_config())
    # no ssh config of the suite's own: ssh reads its own files, as the launch's ssh does;
    # the launch starts where the suite runs, as DeepSpeed's runner takes its directory
    assert s == dataclasses.replace(S.Settings(), env=dataclasses.replace(
        S.EnvSettings(), launch_dir=str(Path.cwd())))
    assert s.ssh_config is None and s.launch_command is None
    assert s.hostfile is None and s.hostfile_source == "default"
    assert s.network.port_timeout == 3.0 and s.network.probe_ports == 2
    assert s.network.rtt_samples == 5
    assert s.collective.backend == "auto" and s.collective.iters == 20
    assert s.collective.warmup == 5 and s.collective.sizes is None
    assert s.training.steps == 20 and s.training.zero_stage == 0
    assert s.training.deepspeed_args == ""
    assert s.health.shm_per_rank_mb == 128.0 and s.health.min_memlock_kb is None
    assert s.storage.min_free_gb == 10.0 and s.storage.output_dir is None
    assert s.env.required_env == "" and s.env.launch_dir == str(Path.cwd())
    assert s.ssh.slow_login == 2.0 and s.names.slow_resolve == 0.5
    assert s.nodelist.slots is None and s.pairs == "auto" and s.quick is False
    assert s.master_port == 29500 and s.timeout_connect == 10.0 and s.include == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.network.port_timeout = 1.0  # type: ignore[misc]


def test_precedence_command_line_then_environment_then_ini(monkeypatch) -> None:
    ini = {"cluster_port_timeout": "4", "cluster_iters": "7", "cluster_training_steps": "3"}
    monkeypatch.setenv("CLUSTER_TESTS_PORT_TIMEOUT", "5.5")
    monkeypatch.setenv("CLUSTER_TESTS_ITERS", "8")
    s = S.read_settings(_config(cli={"ct_port_timeout": "6"}, ini=ini))
    assert s.network.port_timeout == 6.0  # command line over environment and ini
    assert s.collective.iters == 8  # environment over ini
    assert s.training.steps == 3  # ini over the default
    assert s.network.rtt_samples == 5  # default
    # an empty value counts as not given
    monkeypatch.setenv("CLUSTER_TESTS_ITERS", "")
    assert S.read_settings(_config(cli={"ct_iters": ""}, ini=ini)).collective.iters == 7


def test_flags_strings_and_the_hostfile_source(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CLUSTER_TESTS_QUICK", "yes")
    monkeypatch.setenv("CLUSTER_TESTS_HOSTFILE", str(tmp_path / "hf"))
    s = S.read_settings(_config(cli={"ct_accept_new_host_keys": "true", "ct_include": "node1"}))
    assert s.quick is True and s.accept_new_host_keys is True and s.include == "node1"
    assert s.hostfile == tmp_path / "hf"
    assert s.hostfile_source == "environment variable CLUSTER_TESTS_HOSTFILE"
    assert S.read_settings(_config(cli={"ct_hostfile": "h"})).hostfile_source == "--hostfile"


@pytest.mark.parametrize("where, message", [
    ("cli", "--port-timeout: bad value '0': must be > 0"),
    ("env", "environment variable CLUSTER_TESTS_PORT_TIMEOUT: bad value '0': must be > 0"),
    ("ini", "ini setting cluster_port_timeout: bad value '0': must be > 0"),
])
def test_a_bad_value_names_where_it_came_from(monkeypatch, where, message) -> None:
    cli = {"ct_port_timeout": "0"} if where == "cli" else None
    ini = {"cluster_port_timeout": "0"} if where == "ini" else None
    if where == "env":
        monkeypatch.setenv("CLUSTER_TESTS_PORT_TIMEOUT", "0")
    with pytest.raises(pytest.UsageError) as err:
        S.read_settings(_config(cli=cli, ini=ini))
    assert str(err.value) == message


@pytest.mark.parametrize("cli, message", [
    ({"ct_master_port": "70000"}, "--master-port: bad value '70000': must be a TCP port, 1-65535"),
    ({"ct_warmup": "-1"}, "--warmup: bad value '-1': must be >= 0"),
    ({"ct_backend": "mpi"}, "--backend: bad value 'mpi': must be one of auto, nccl, hccl, gloo"),
    ({"ct_nodes_from": "pbs"}, "--nodes-from: bad value 'pbs': must be one of slurm, skypilot"),
    ({"ct_quick": "maybe"}, "--quick: bad value 'maybe': must be true or false"),
    ({"ct_fanout": "x"}, "--fanout: bad value 'x': invalid literal for int() with base 10: 'x'"),
    ({"ct_output_dir": "rel/dir"}, "--output-dir rel/dir: give an absolute path, as the nodes "
     "see it (a relative path would be read from each node's home directory)"),
    ({"ssh_config": "/nonexistent/ssh_config"},
     "--ssh-config /nonexistent/ssh_config: no such file"),
])
def test_bad_values_keep_their_messages(cli, message) -> None:
    with pytest.raises(pytest.UsageError) as err:
        S.read_settings(_config(cli=cli))
    assert str(err.value) == message


def test_markers_come_from_the_plugin_alone(tmp_path) -> None:
    assert "\nmarkers =" not in (REPO / "pyproject.toml").read_text()
    out = subprocess.run([sys.executable, "-m", "pytest", "--markers", "-p", "no:cacheprovider"],
                         check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for section in sections.SECTIONS:
        assert f"@pytest.mark.{sections.marker_line(section)}" in out.stdout
    # -m selects by them under --strict-markers, with no ini file naming them
    (tmp_path / "test_m.py").write_text(
        "import pytest\n\n@pytest.mark.network\ndef test_a():\n    pass\n\n"
        "@pytest.mark.storage\ndef test_b():\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "--strict-markers", "-m", "network",
                          "-p", "no:cacheprovider", "-q", "test_m.py"],
                         check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "1 passed, 1 deselected" in out.stdout, out.stdout + out.stderr


def test_launch_args_feed_the_resolved_values() -> None:
    s = S.read_settings(_config(cli={"ct_launch_args": "--master_port 29600 -e node3 --ssh_port "
                                                       "2222"}))
    assert (s.master_port, s.exclude, s.master_addr, s.ssh_port) == (29600, "node3", None, 2222)
    assert s.launch_passthrough == ("--ssh_port", "2222")
    # the suite's own options still work, and agree or are refused
    s = S.read_settings(_config(cli={"ct_launch_args": "--master_addr node1",
                                     "ct_master_port": "29700"}))
    assert (s.master_addr, s.master_port) == ("node1", 29700)
    with pytest.raises(pytest.UsageError,
                       match="--master-port 29700 and --launch-args' 29600 disagree"):
        S.read_settings(_config(cli={"ct_launch_args": "--master_port 29600",
                                     "ct_master_port": "29700"}))
    with pytest.raises(pytest.UsageError, match="--launch-args '--master_port x'"):
        S.read_settings(_config(cli={"ct_launch_args": "--master_port x"}))
