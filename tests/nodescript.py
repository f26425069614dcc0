"""A node script's section run here, as a node runs it (`python -c BOOTSTRAP` with the script on
standard input), with vendor tools of a test's own on its PATH: the facts a judge's unit test
reads are what the node script really answers, from real captured tool output
(tests/data/samples), not JSON written by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from paths import SAMPLES

from cluster_tests import node
from cluster_tests.core.cluster import BOOTSTRAP, PROBE_MARK


def fake_tools(bindir: Path, tools: Mapping[str, str]) -> Path:
    """Vendor tools (nvidia-smi, npu-smi, hccn_tool, dcgmi...) in `bindir`: each its /bin/sh
    body, where `{NAME}` stands for the quoted path of the sample NAME."""
    import shlex

    bindir.mkdir(parents=True, exist_ok=True)
    for tool, body in tools.items():
        path = bindir / tool
        for sample in sorted(SAMPLES.rglob("*.txt")):
            body = body.replace("{" + sample.name + "}", shlex.quote(str(sample)))
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return bindir


def answer(script: str, section: str, bindir: Path | None = None,
           env: Mapping[str, str] | None = None, **params: object) -> object:
    """node/`script`'s answer for `section`, run here with `bindir` first on its PATH (None: a
    PATH with no vendor tool on it) and `env` on top of this environment."""
    path = [str(bindir)] if bindir is not None else []
    run_env = {**os.environ, "PATH": os.pathsep.join([*path, "/usr/bin", "/bin"]), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", BOOTSTRAP,
                           json.dumps({"sections": [section], **params})],
                          input=node.source(script), capture_output=True, timeout=120,
                          check=True, env=run_env)
    line = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith(PROBE_MARK)][-1]
    return json.loads(line[len(PROBE_MARK):])[section]
