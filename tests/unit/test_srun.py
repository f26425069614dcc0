"""--transport srun's pure parts: when it may be used, and which probes move to job steps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cluster_tests.core import srun as srun_mod


def _path_with_srun(tmp_path: Path) -> str:
    exe = tmp_path / "srun"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return f"{tmp_path}:{os.defpath}"


def test_srun_needs_srun_an_allocation_and_slurm_names(tmp_path):
    path = _path_with_srun(tmp_path)
    assert srun_mod.check_usable({"PATH": path, "SLURM_JOB_ID": "7"},
                                 "slurm") == str(tmp_path / "srun")
    with pytest.raises(srun_mod.SrunError, match="no `srun` on this PATH"):
        srun_mod.check_usable({"PATH": str(tmp_path / "none"), "SLURM_JOB_ID": "7"}, "slurm")
    with pytest.raises(srun_mod.SrunError, match="not inside a Slurm allocation"):
        srun_mod.check_usable({"PATH": path}, "slurm")
    with pytest.raises(srun_mod.SrunError, match="must come from the allocation"):
        srun_mod.check_usable({"PATH": path, "SLURM_JOBID": "7"}, "--hostfile")


def test_what_the_launch_does_through_ssh_stays_on_ssh():
    assert srun_mod.via_srun("healthprobe.py", "diag")
    assert srun_mod.via_srun("netprobe.py", "firewall")
    for script, section in (("probe.py", "base"), ("probe.py", "sshd"),
                            ("probe.py", "ssh_pairs"), ("envprobe.py", "envfiles"),
                            ("netprobe.py", "listen"), ("netprobe.py", "connect")):
        assert not srun_mod.via_srun(script, section), (script, section)


def test_one_step_on_every_node_with_stdin_for_each_and_labelled_lines():
    argv = srun_mod.Srun("/usr/bin/srun").argv(["a", "b"], ["python3", "-c", "x"])
    assert argv == ["/usr/bin/srun", "--nodelist", "a,b", "--nodes", "2", "--ntasks", "2",
                    "--ntasks-per-node", "1", "--overlap", "--input", "all", "--label",
                    "--kill-on-bad-exit=0", "--quiet", "python3", "-c", "x"]
