"""Run the cluster_tests suite as a user would (a `pytest` subprocess) and read its JUnit report.

Used by the project's end-to-end tests against the simulated cluster:

    result = run_suite(sim, "-m", "ssh")
    assert result.failed == {"test_login[node3]", ...}
    assert "connection refused" in result.message("test_login[node3]")
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from paths import REPO

#: `pytest` as a user runs it, less the plugins of this project's own development (hypothesis:
#: a quarter of a CPU second at every start, and the end-to-end tests start the suite about 150
#: times on a 2-core CI machine)
PYTEST = (sys.executable, "-m", "pytest", "-p", "no:hypothesispytest")

#: the fast checklist: every check but the all-reduces and the training jobs
FAST = ("-m", "not collective and not training")


@dataclass
class SuiteResult:
    returncode: int
    output: str
    seconds: float
    outcomes: dict[str, str] = field(default_factory=dict)  # test id -> passed/failed/error/skipped
    messages: dict[str, str] = field(default_factory=dict)  # test id -> failure/skip text
    properties: dict[str, dict[str, str]] = field(default_factory=dict)
    classnames: dict[str, str] = field(default_factory=dict)  # test id -> JUnit classname
    junit: Path = field(kw_only=True)  # kept: reports written beside it (summary.json) can be read

    def ids(self, outcome: str, prefix: str = "") -> set[str]:
        return {t for t, o in self.outcomes.items() if o == outcome and t.startswith(prefix)}

    @property
    def failed(self) -> set[str]:
        return self.ids("failed") | self.ids("error")

    @property
    def passed(self) -> set[str]:
        return self.ids("passed")

    def message(self, test_id: str) -> str:
        return self.messages.get(test_id, "")

    def describe(self) -> str:
        """For assertion messages: what failed, with the messages, and the tail of the output."""
        lines = [f"exit {self.returncode} in {self.seconds:.1f}s"]
        for t in sorted(self.failed):
            lines.append(f"FAILED {t}: {self.message(t)[:600]}")
        lines.append(self.output[-3000:])
        return "\n".join(lines)


#: the title of the section a red run ends with (report/terminal.py's verdict)
VERDICT = "verdict: causes and launch now"


def verdict_of(output: str) -> list[str]:
    """The lines of a run's closing section (the causes, the checks each red blocks, the fix
    script, the launch), without pytest's final count."""
    at = output.rfind(VERDICT)
    if at < 0:
        return []
    lines = output[at:].splitlines()[1:]
    return [ln for ln in lines if not (ln.startswith("=") and ln.endswith("="))]


def sigint_as_at_a_terminal() -> None:
    """`preexec_fn` for a suite run that a test interrupts: SIGINT back to its default.

    A shell without job control starts its background jobs with SIGINT ignored, and that
    disposition survives exec; Python then keeps ignoring SIGINT instead of installing its
    KeyboardInterrupt handler. So `make test &` (or nohup'd CI wrappers) would hand every
    suite run a deaf ear, and a test of Ctrl-C would wait for an interrupt that never comes."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def parse_junit(path: Path):
    """(outcomes, messages, properties, classnames), each keyed by test id."""
    outcomes: dict[str, str] = {}
    classnames: dict[str, str] = {}
    messages: dict[str, str] = {}
    props: dict[str, dict[str, str]] = {}
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = case.get("name", "")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                messages[name] = (child.get("message") or "") + "\n" + (child.text or "")
            if child.tag == "properties":
                props[name] = {p.get("name", ""): p.get("value", "") for p in child}
        outcomes[name] = outcome
        classnames[name] = case.get("classname", "")
    return outcomes, messages, props, classnames


def run_suite(sim, *args: str, timeout: float = 600, env: dict[str, str] | None = None,
              hostfile: Path | str | None = None, equals_form: bool = False,
              ssh_config: Path | str | None = None,
              on_line: Callable[[str], None] | None = None) -> SuiteResult:
    """`pytest --hostfile <sim hostfile> --ssh-config <sim ssh_config> ARGS` from the repo root.
    ``on_line``: called with each line of output as the suite prints it (stdout and stderr
    merged, unbuffered), to act on the cluster while the run goes on."""
    # kept after the run (beside the JUnit file lie the other reports); under the session's
    # temporary directory when tests/conftest.py sets CT_SUITE_TMP
    tmp = tempfile.mkdtemp(prefix="ct-suite-", dir=os.environ.get("CT_SUITE_TMP"))
    junit = Path(tmp) / "junit.xml"
    argv = [
        *PYTEST,
        *([f"--hostfile={hostfile or sim.hostfile}"] if equals_form
          else ["--hostfile", str(hostfile or sim.hostfile)]),
        "--ssh-config", str(ssh_config or sim.ssh_config),
        "-p", "no:cacheprovider",
        f"--junitxml={junit}",
        "-q", "-rA",
        *args,
    ]
    run_env = dict(os.environ)
    run_env.pop("PYTEST_ADDOPTS", None)
    run_env.pop("PYTEST_XDIST_WORKER", None)
    run_env.update(env or {})
    start = time.monotonic()
    if on_line is None:
        proc = subprocess.run(argv, cwd=REPO, env=run_env, capture_output=True, text=True,
                              errors="replace", timeout=timeout, check=False)
        rc, output = proc.returncode, proc.stdout + proc.stderr
    else:
        rc, output = _streamed(argv, run_env, timeout, on_line)
    seconds = time.monotonic() - start
    _log_run(args, seconds, rc)
    result = SuiteResult(rc, output, seconds, junit=junit)
    if junit.exists():
        (result.outcomes, result.messages, result.properties,
         result.classnames) = parse_junit(junit)
    return result


def run_suite_on(sim, node: str, cwd: str, *args: str, launch: tuple[str, ...] = (),
                 timeout: float = 600) -> SuiteResult:
    """`cluster-tests ARGS [-- LAUNCH]` as a user runs it (its header shown): logged in to
    `node` (root, its own ssh setup: no ssh option), in the project directory `cwd` there. The
    JUnit report goes under the sim's shared directory, which this machine and every node see
    alike."""
    import shlex

    junit = Path(tempfile.mkdtemp(prefix="ct-on-node-", dir=sim.state_dir / "shared")) / \
        "junit.xml"
    words = ["cluster-tests", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
             f"--junitxml={junit}", "-rA", *args, *(("--", *launch) if launch else ())]
    start = time.monotonic()
    res = sim.ssh(node, f"cd {shlex.quote(cwd)} && {shlex.join(words)}", timeout=timeout)
    seconds = time.monotonic() - start
    _log_run(("on", node, *args, "--", *launch), seconds, res.returncode)
    result = SuiteResult(res.returncode, res.stdout + res.stderr, seconds, junit=junit)
    if junit.exists():
        (result.outcomes, result.messages, result.properties,
         result.classnames) = parse_junit(junit)
    return result


def _log_run(args: tuple[str, ...], seconds: float, rc: int) -> None:
    """With CT_SUITE_LOG set, one JSON line per suite run (the test that ran it, its arguments,
    its seconds): where the end-to-end tests' time goes, run by run (bench/e2e_profile.py)."""
    path = os.environ.get("CT_SUITE_LOG")
    if not path:
        return
    import json

    line = {"test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0],
            "worker": os.environ.get("PYTEST_XDIST_WORKER", ""), "args": list(args),
            "seconds": round(seconds, 2), "rc": rc, "end": round(time.time(), 2)}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def _streamed(argv: list[str], env: dict[str, str], timeout: float,
              on_line: Callable[[str], None]) -> tuple[int, str]:
    """Run the suite with its output read line by line as it comes (see run_suite)."""
    env = {**env, "PYTHONUNBUFFERED": "1"}
    lines: list[str] = []
    with subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                on_line(line.rstrip("\n"))
            rc = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
    return rc, "".join(lines)


def fake_tool(sim, node: str, tool: str, script: str) -> None:
    """A vendor tool (nvidia-smi, npu-smi, hccn_tool...) on one node's non-interactive PATH:
    `script` is its /bin/sh body. A directory of its own per call: the session's sim outlives
    the test, and a tool left in a shared directory by another test would make the node look
    like a GPU or NPU node."""
    import shlex

    bindir = Path(tempfile.mkdtemp(prefix=f"fakebin-{node}-", dir=sim.state_dir))
    path = bindir / tool
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    sim.append_bashrc(node, f"export PATH={shlex.quote(str(bindir))}:$PATH\n")


def accepted_logins(sim, node: str) -> list[str]:
    """The ssh logins into `node` so far, oldest first, as its sshd logged them (LogLevel
    VERBOSE): `Accepted publickey for USER from ADDRESS port ...` lines."""
    text = sim.node(node).paths["sshd_log"].read_text(errors="replace")
    return [line for line in text.splitlines() if "Accepted publickey" in line]


def logins_from(sim, node: str, address: str) -> int:
    """ssh logins into `node` from `address` so far (:func:`accepted_logins`)."""
    return sum(1 for line in accepted_logins(sim, node) if f" from {address} port " in line)
