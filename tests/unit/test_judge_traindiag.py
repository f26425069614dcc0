"""Tests of judge/trainargv, trainresult, traindiag, fixtures/localtrain and node/train_smoke.py
(checklist T1, T2).

Real runs use the deepspeed launcher on this machine, on CPU (DS_ACCELERATOR=cpu, gloo), with
2 local ranks. Run:
.venv/bin/python -m pytest tests/unit/test_judge_traindiag.py -p no:cacheprovider -q
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster_tests.judge.training import trainargv as targv
from cluster_tests.judge.training import traindiag as tdiag
from cluster_tests.judge.training import trainresult as tres
from fixtures import localtrain as local

pytest.importorskip("torch")
pytest.importorskip("deepspeed")

EXT_DIR = "/tmp/ct_torch_extensions"
#: these tests are about the harness, not the JIT build of DeepSpeed's CPU shm op (the shipped
#: job builds it, as the user's does; E7 and tests/e2e/test_e2e_jit.py cover that path)
NO_JIT = ["--no-jit-shm"]
CPU_ENV = {"DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": EXT_DIR, "OMP_NUM_THREADS": "1"}


def _kinds(diags: list[tdiag.Diagnosis]) -> dict[str, tdiag.Diagnosis]:
    return {d.kind: d for d in diags}


def _group_gone(pgid: int) -> bool:
    return not local._group_alive(pgid)


# --------------------------------------------------------------------------- real runs


def test_real_two_rank_cpu_run_learns_and_agrees() -> None:
    t0 = time.monotonic()
    res, log = local.run_local_single_node(2, 10, 120, CPU_ENV, extra=NO_JIT)
    elapsed = time.monotonic() - t0
    assert res.launch is not None
    assert res.launch.returncode == 0, log[-3000:]
    assert res.ok, res.summary() + "\n" + log[-3000:]
    assert sorted(res.ranks) == [0, 1]
    for rr in res.ranks.values():
        assert rr.done and rr.started
        assert rr.start.backend == "gloo"
        assert rr.start.world_size == 2
        assert rr.last_loss is not None and rr.first_loss is not None
        assert rr.last_loss < rr.first_loss * 0.75
        assert len(rr.losses) == 10
    assert res.hashes_identical and len(res.hashes) == 2
    assert _group_gone(res.launch.pgid)
    # No JIT build of DeepSpeed's shm op: the job marks it unavailable.
    assert "deepspeed_shm_comm_op built successfully" not in log
    assert tdiag.diagnose(log, expected_ranks=2) == []
    print(f"2-rank CPU run: {elapsed:.1f} s")


def test_deadline_too_short_is_diagnosed_and_leaves_no_process() -> None:
    res, log = local.run_local_single_node(
        2, 5, 4, CPU_ENV, extra=["--sleep-before-init", "60"], launch_grace=30
    )
    assert res.launch is not None
    assert res.launch.returncode == tres.EXIT_DEADLINE, log[-3000:]
    assert not res.launch.timed_out
    assert not res.ok
    assert _group_gone(res.launch.pgid)
    diags = _kinds(tdiag.diagnose(log, expected_ranks=2))
    assert "deadline" in diags, diags
    assert diags["deadline"].node == os.uname().nodename
    assert "deadline" in diags["deadline"].cause


def test_outer_timeout_kills_the_whole_process_group() -> None:
    # The job's own watchdog is pushed out (last --deadline wins), so the launch-level
    # timeout (deadline + grace = 4 s) has to kill launcher, launch.py and ranks.
    t0 = time.monotonic()
    res, log = local.run_local_single_node(
        2,
        5,
        2,
        CPU_ENV,
        extra=["--deadline", "300", "--sleep-before-init", "300"],
        launch_grace=2,
    )
    assert time.monotonic() - t0 < 30
    assert res.launch is not None and res.launch.timed_out
    assert _group_gone(res.launch.pgid)
    diags = _kinds(tdiag.diagnose(log, expected_ranks=2))
    assert "launch-timeout" in diags
    assert "rank-not-started" in diags


def test_real_missing_deepspeed_through_launcher() -> None:
    # Ranks started with `python -S` (no site-packages) cannot import deepspeed: the same
    # failure as a node whose interpreter lacks it.
    ds = local.find_deepspeed()
    argv = [
        ds, "--hostfile", targv.NO_HOSTFILE, "--num_gpus", "2", "--master_port",
        str(local.free_port()), "--no_python", "--no_local_rank",
        sys.executable, "-S", str(local.SCRIPT_PATH), "--steps", "3",
    ]  # fmt: skip
    env = dict(os.environ, **CPU_ENV)
    p = subprocess.run(
        argv,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    log = p.stdout + p.stderr
    assert p.returncode == tres.EXIT_ERROR, log[-3000:]
    res = tres.parse_output(log, expected_ranks=2)
    assert not res.ok and res.missing_ranks == [0, 1]
    diags = _kinds(tdiag.diagnose(log, expected_ranks=2))
    assert "no-deepspeed" in diags
    assert "job-error" in diags and "ModuleNotFoundError" in diags["job-error"].cause
    # The same log as pdsh would show it from node3.
    pdsh_log = "\n".join(f"node3: {line}" for line in log.splitlines())
    diags = _kinds(tdiag.diagnose(pdsh_log, expected_ranks=2, hosts=["node1", "node3"]))
    assert diags["no-deepspeed"].node == "node3"
    assert diags["job-error"].node == "node3"


def test_real_launcher_python_without_deepspeed() -> None:
    # What pdsh runs on a node: `<launcher's python> -u -m deepspeed.launcher.launch ...`.
    p = subprocess.run(
        [sys.executable, "-I", "-S", "-u", "-m", "deepspeed.launcher.launch", "--node_rank=1"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode != 0
    log = "\n".join(f"node3: {line}" for line in (p.stdout + p.stderr).splitlines())
    assert "No module named 'deepspeed'" in log
    d = _kinds(tdiag.diagnose(log, hosts=["node1", "node3"]))["no-deepspeed"]
    assert d.node == "node3"
    assert d.evidence and "node3:" in d.evidence[0]


def test_real_rendezvous_timeout_when_a_rank_never_joins() -> None:
    # Rank 0 of a world of 2, alone: the TCPStore waits for the missing client.
    port = local.free_port()
    env = dict(
        os.environ,
        **CPU_ENV,
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    p = subprocess.run(
        [sys.executable, str(local.SCRIPT_PATH), "--steps", "2", "--dist-timeout", "3", *NO_JIT],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    log = p.stdout + p.stderr
    assert p.returncode == tres.EXIT_ERROR, log[-3000:]
    diags = _kinds(tdiag.diagnose(log, expected_ranks=2))
    assert "rendezvous-timeout" in diags, log[-3000:]
    assert "job-error" in diags


# --------------------------------------------------------------------------- parse_output

GOOD_PDSH = """\
node1: [2026-12-02 16:01:55,714] [INFO] [launch.py:169:main] global_rank_mapping=defaultdict(<class 'list'>, {'node1': [0, 1], 'node2': [2, 3]})
node2: [2026-12-02 16:01:55,714] [INFO] [launch.py:169:main] global_rank_mapping=defaultdict(<class 'list'>, {'node1': [0, 1], 'node2': [2, 3]})
node1: CT_SMOKE {"event": "start", "rank": 0, "world_size": 4, "local_rank": 0, "host": "n1"}
node2: CT_SMOKE {"event": "start", "rank": 2, "world_size": 4, "local_rank": 0, "host": "n2"}
node1: CT_SMOKE {"event": "start", "rank": 1, "world_size": 4, "local_rank": 1, "host": "n1"}
node2: CT_SMOKE {"event": "start", "rank": 3, "world_size": 4, "local_rank": 1, "host": "n2"}
node1: CT_SMOKE {"event": "step", "rank": 0, "step": 1, "loss": 1.0}
node2: CT_SMOKE {"event": "step", "rank": 3, "step": 1, "loss": 1.2}
node1: CT_SMOKE {"event": "done", "rank": 0, "first_loss": 1.0, "last_loss": 0.1, "weights_sha256": "aa"}
node1: CT_SMOKE {"event": "done", "rank": 1, "first_loss": 0.9, "last_loss": 0.2, "weights_sha256": "aa"}
node2: CT_SMOKE {"event": "done", "rank": 2, "first_loss": 1.1, "last_loss": 0.1, "weights_sha256": "aa"}
node2: CT_SMOKE {"event": "done", "rank": 3, "first_loss": 1.2, "last_loss": 0.3, "weights_sha256": "aa"}
"""  # noqa: E501 (DeepSpeed's launcher lines and train_smoke's CT_SMOKE lines, unsplittable)


def test_parse_output_pdsh_prefixed_all_good() -> None:
    res = tres.parse_output(GOOD_PDSH)
    assert res.ok, res.problems()
    assert res.expected == 4
    assert res.ranks[2].host == "node2"
    assert res.rank_hosts == {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert "4 ranks done" in res.summary()


def test_parse_output_flags_missing_rank_flat_loss_and_hash_mismatch() -> None:
    text = GOOD_PDSH.replace(
        'node2: CT_SMOKE {"event": "done", "rank": 3, "first_loss": 1.2, "last_loss": 0.3, '
        '"weights_sha256": "aa"}\n',
        "",
    )
    text = text.replace('"last_loss": 0.2, "weights_sha256": "aa"', '"last_loss": 0.85, '
                        '"weights_sha256": "bb"')  # fmt: skip
    res = tres.parse_output(text)
    assert not res.ok
    assert res.missing_ranks == [3]
    assert res.loss_not_falling == [1]
    assert not res.hashes_identical
    problems = " | ".join(res.problems())
    assert "3@node2" in problems and "rank 1 loss did not fall" in problems
    assert "different weights" in problems
    diags = _kinds(tdiag.diagnose(text, hosts=["node1", "node2"]))
    assert diags["rank-not-done"].node == "node2"


def test_parse_output_expected_ranks_and_garbage() -> None:
    text = (
        "noise CT_SMOKE {not json}\n"
        'CT_SMOKE {"event": "done", "rank": 0, "first_loss": 1, "last_loss": 0.1, '
        '"weights_sha256": "x"} trailing\n'
    )
    res = tres.parse_output(text, expected_ranks=2)
    assert res.ranks[0].done
    assert res.missing_ranks == [1]
    assert not res.ok
    assert not tres.parse_output("").ok


# --------------------------------------------------------------------------- diagnose (synthetic)

HOSTS = ["node1", "node2", "node3", "node4"]

SSH_FAILS = """\
[2026-12-02 10:00:00,000] [INFO] [multinode_runner.py:95:get_cmd] Running on the following workers: node1,node2,node3,node4
node3: root@node3: Permission denied (publickey).
pdsh@node1: node3: ssh exited with exit code 255
node2: Host key verification failed.
pdsh@node1: node2: ssh exited with exit code 255
node4: ssh: Could not resolve hostname node4: Name or service not known
pdsh@node1: node4: ssh exited with exit code 255
node1: bash: line 1: deepspeed: command not found
"""  # noqa: E501 (a captured DeepSpeed runner line, unsplittable)


def test_diagnose_pdsh_ssh_failures_name_the_node() -> None:
    diags = tdiag.diagnose(SSH_FAILS, hosts=HOSTS)
    by: dict[tuple[str, str | None], tdiag.Diagnosis] = {(d.kind, d.node): d for d in diags}
    assert ("ssh-publickey", "node3") in by
    assert "publickey" in by[("ssh-publickey", "node3")].cause
    assert "authorized_keys" in by[("ssh-publickey", "node3")].hint
    assert ("ssh-exit", "node3") in by and "255" in by[("ssh-exit", "node3")].cause
    assert ("ssh-hostkey", "node2") in by
    assert ("ssh-resolve", "node4") in by
    assert ("command-not-found", "node1") in by
    for d in diags:
        assert d.evidence and all(len(e) < 300 for e in d.evidence)
        assert str(d)


@pytest.mark.parametrize(
    ("line", "kind", "want_node"),
    [
        ("ssh: connect to host node2 port 22: Connection refused", "ssh-refused", "node2"),
        ("node2: ssh: connect to host node2 port 22: Connection timed out", "ssh-timeout", "node2"),
        ("ssh: connect to host 10.0.0.9 port 22: No route to host", "ssh-timeout", "10.0.0.9"),
        (
            (
                "node2: /usr/bin/python3: Error while finding module specification for "
                "'deepspeed.launcher.launch' (ModuleNotFoundError: No module named 'deepspeed')"
            ),
            "no-deepspeed",
            "node2",
        ),
        (
            "node4: bash: /opt/venv/bin/python3: No such file or directory",
            "command-not-found",
            "node4",
        ),
        ("node4: bash: line 1: cd: /work/run: No such file or directory", "cd-failed", "node4"),
        (
            (
                "node1: torch.distributed.DistStoreError: Timed out after 61 seconds waiting for "
                "clients. 3/4 clients joined."
            ),
            "rendezvous-timeout",
            "node1",
        ),
        (
            (
                "node2: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
                "connect [10.0.0.1]:41234: Connection refused"
            ),
            "dist-refused",
            "node2",
        ),
        (
            (
                "node2: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer"
                ".cc:81] Timed out waiting 60000ms for recv operation to complete"
            ),
            "rendezvous-timeout",
            "node2",
        ),
        (
            "node3: RuntimeError: connect() timed out. Original timeout was 60000 ms.",
            "rendezvous-timeout",
            "node3",
        ),
        (
            (
                "node1: torch.distributed.DistNetworkError: The server socket has failed to listen "
                "on any local network address. port: 29500, useIPv6: 0, code: -98, name: EADDRINUSE"
            ),
            "port-in-use",
            "node1",
        ),
        (
            (
                "RuntimeError: Using hostfile at /job/hostfile but host=node1 was not reachable "
                "via ssh. If you are running with a single node please remove /job/hostfile"
            ),
            "launcher-ssh-check",
            "node1",
        ),
        ("ValueError: Hostname 'node9' not found in hostfile", "resource-pool", None),
        (
            "ValueError: Hostfile contains multiple entries for node2, unable to proceed",
            "hostfile-bad",
            "node2",
        ),
        ("RuntimeError: launcher 'pdsh' not installed.", "pdsh-missing", None),
    ],
)
def test_diagnose_single_lines(line: str, kind: str, want_node: str | None) -> None:
    diags = tdiag.diagnose(line + "\n", hosts=HOSTS)
    match = [d for d in diags if d.kind == kind]
    assert match, [(d.kind, d.node) for d in diags]
    assert match[0].node == want_node
    assert match[0].hint and match[0].cause


def test_diagnose_hostfile_missing_only_for_multi_node() -> None:
    line = "[..] [WARNING] [runner.py:214:fetch_hostfile] Unable to find hostfile, will proceed\n"
    assert not tdiag.diagnose(line)
    assert _kinds(tdiag.diagnose(line, hosts=HOSTS))["hostfile-missing"].node is None


def test_diagnose_ranks_never_started_are_located_by_rank_mapping() -> None:
    # node2's pdsh leg failed: ranks 2, 3 never started, rank 0, 1 hung in rendezvous.
    text = "\n".join(
        [
            GOOD_PDSH.splitlines()[0],
            (
                'node1: CT_SMOKE {"event": "error", "rank": 0, "kind": "deadline", "phase": '
                '"dist-init", "host": "n1", "message": "deadline of 60 s exceeded"}'
            ),
            "node2: root@node2: Permission denied (publickey,password).",
            "pdsh@node1: node2: ssh exited with exit code 255",
        ]
    )
    diags = tdiag.diagnose(text, expected_ranks=4, hosts=["node1", "node2"])
    by: dict[tuple[str, str | None], tdiag.Diagnosis] = {(d.kind, d.node): d for d in diags}
    assert ("ssh-publickey", "node2") in by
    assert ("rank-not-started", "node2") in by
    assert "[2, 3]" in by[("rank-not-started", "node2")].cause
    assert ("deadline", "node1") in by


def test_script_is_standalone() -> None:
    src = Path(local.SCRIPT_PATH).read_text()
    assert "import cluster_tests" not in src and "from cluster_tests" not in src
    p = subprocess.run(
        [sys.executable, str(local.SCRIPT_PATH), "--help"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and "--zero-stage" in p.stdout and "--deadline" in p.stdout
