"""Fixtures of the project's own tests.

`sim` is one healthy 3-node simulated cluster for the whole test session (fixtures/sim/);
every test that injects faults gets it through `healthy_sim`, which undoes that test's faults
afterwards (`sim.restore()`), so the next test starts from a healthy cluster again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fixtures.sim import SimCluster  # noqa: E402

#: a build cache kept between sessions (gitignored, like the sims of `make demo`); one per
#: pytest-xdist worker: E7 judges the build locks it finds in it, and the other worker's sim
#: builds and loads there too (a lock it holds, or one a test leaves stale on purpose). The
#: first worker shares the one of a session without workers (make test runs its `alone` tests
#: after the workers' session, one build fewer).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
EXTENSIONS_ROOT = Path(__file__).resolve().parent.parent / ".sim" / "torch_extensions"
SIM_EXTENSIONS = EXTENSIONS_ROOT / ("main" if _WORKER == "gw0" else _WORKER)
#: a copy of the first build that nobody loads or tests against: the other workers start from
#: it instead of compiling the same op again (a minute of both cores, at the start of every run)
SEED_EXTENSIONS = EXTENSIONS_ROOT / "seed"
SHM_OP = Path("deepspeed_shm_comm") / "deepspeed_shm_comm.so"


@pytest.fixture(scope="session", autouse=True)
def _suite_tmp(tmp_path_factory: pytest.TempPathFactory):
    """Reports of the suite runs (tests/suite.py) go under pytest's own temporary directory."""
    import os

    path = tmp_path_factory.mktemp("suite-runs")
    old = os.environ.get("CT_SUITE_TMP")
    os.environ["CT_SUITE_TMP"] = str(path)
    yield path
    if old is None:
        os.environ.pop("CT_SUITE_TMP", None)
    else:
        os.environ["CT_SUITE_TMP"] = old


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory):
    state = tmp_path_factory.mktemp("sim3")
    # the nodes' TORCH_EXTENSIONS_DIR outlives the session (PITFALLS 11): DeepSpeed's CPU shm
    # op, which T1/T2 and tests/e2e/test_e2e_jit.py JIT-load as a user's job does, is built once
    with SimCluster(state, nodes=3, slots=1, torch_extensions_dir=SIM_EXTENSIONS) as cluster:
        with _extensions_locked():
            _copy_build(SEED_EXTENSIONS, SIM_EXTENSIONS)
            _build_shm_op(cluster)
            _copy_build(SIM_EXTENSIONS, SEED_EXTENSIONS)
        yield cluster


@contextmanager
def _extensions_locked() -> Iterator[None]:
    """One worker at a time builds or copies (the others wait for the first build, then copy)."""
    EXTENSIONS_ROOT.mkdir(parents=True, exist_ok=True)
    with open(EXTENSIONS_ROOT / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _copy_build(src: Path, dst: Path) -> None:
    """``src``'s build into ``dst`` where ``dst`` has none or an older one. Modification times
    are kept, so ninja finds the copy up to date (it was built by the same tools and flags: a
    copy loads in a second, a build takes a minute); a build lock is never copied."""
    built = src / SHM_OP
    if not built.exists():
        return
    have = dst / SHM_OP
    if have.exists() and have.stat().st_mtime >= built.stat().st_mtime:
        return
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("lock"))


def _build_shm_op(cluster: SimCluster) -> None:
    """DeepSpeed's CPU shm comm op, JIT-built (or found built) in the nodes' extensions directory
    before any test: T1/T2 and the real launches load it as a user's job does, and its first
    build (30 s or more on 2 cores) would otherwise fall inside whichever test happens to run
    first, against that test's deadlines."""
    code = ("from deepspeed.accelerator import get_accelerator; "
            "get_accelerator().create_op_builder('ShareMemCommBuilder').load()")
    res = cluster.ssh("node1", f"python3 -c {code!r}", timeout=900)
    assert res.returncode == 0, (f"the shm op did not build:\n{res.stdout[-2000:]}"
                                 f"{res.stderr[-3000:]}")


@pytest.fixture
def healthy_sim(sim):
    sim.restore()
    yield sim
    sim.restore()


@pytest.fixture(scope="session")
def healthy_fast_run(sim):
    """The fast checklist, run once (per xdist worker) on the healthy sim: one suite run (about
    20 CPU s) that the end-to-end tests of a healthy cluster's fast checks read, each asserting
    its own part (tests/e2e: foundation's green, the launch's green before its real launch, E's
    and the health checks' green), instead of one such run each."""
    from suite import FAST, run_suite

    sim.restore()
    return run_suite(sim, *FAST)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "alone: the test needs the machine to itself (it loads both cores, or "
        "measures time): `make test` runs these after the others, one at a time")


#: the end-to-end modules, the longest first (seconds of their tests on 2 cores, measured with
#: `--durations=0`; the history test alone runs five suites). `make test` hands the tests out
#: with `--dist worksteal`: each worker starts on its half in this order and, once idle, takes
#: the other's last (shortest) tests, so the two end together instead of one waiting out a long
#: module alone. Modules not listed come last, in file order. The Ctrl-C tests come first: they
#: need a loaded machine, and at the start the other worker has half the tests ahead of it.
HEAVY_FIRST = ("interrupt", "history", "launch", "collective", "training", "ssh_names",
               "nodelist", "one_cause", "jit", "env", "network", "fixes", "accel_storage",
               "reliability", "foundation")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {f"test_e2e_{name}.py": i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept
