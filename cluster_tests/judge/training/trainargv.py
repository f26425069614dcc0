"""Training smoke (checklist T1, T2): the real DeepSpeed launcher's command lines.

The job itself is ``node/train_smoke.py`` (standalone; torch + deepspeed only); how its output
is judged: ``judge/training/trainresult.py``; why a launch failed: ``judge/training/traindiag.py``.

Single node (T1). DeepSpeed's runner, without a hostfile, takes the local slots from the
accelerator's device count; ``--num_gpus K`` overrides it with ``range(K)`` on every
accelerator, CPU included (the CPU accelerator would otherwise count NUMA nodes or read
``LOCAL_SIZE``). An explicit ``--hostfile`` that does not exist keeps a cluster's
``/job/hostfile`` (the runner's default path) from turning a single-node run into a pdsh launch
of the whole cluster; the runner only warns "Unable to find hostfile". The master address is
then 127.0.0.1 and no ssh is used::

    deepspeed --hostfile /nonexistent/ct-no-hostfile --num_gpus K --master_port P \
        train_smoke.py --steps 20 --deadline 300

On CPU set ``DS_ACCELERATOR=cpu``: the backend is gloo unless oneCCL's
``oneccl_bindings_for_pytorch`` is importable (then ccl). As the user's job, the CPU backend
JIT-builds (or loads) DeepSpeed's ``deepspeed_shm_comm`` op in ``init_distributed``, in the
extensions directory the node's environment names (about 30 s on 2 cores the first time; a stale
build lock there hangs it, which E7 reports first); ``--no-jit-shm`` is a testing aid that skips
it.

Multi node (T2)::

    deepspeed --hostfile H [--master_addr A] --master_port P [--include S] [--exclude S] \
        [the user's other --launch-args] train_smoke.py --steps 20 --deadline 300

``--master_addr`` only when the user gives one: without it DeepSpeed derives it (``ssh <first
host> hostname -I``), as it will in the user's launch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

NO_HOSTFILE = "/nonexistent/ct-no-hostfile"

__all__ = ["NO_HOSTFILE", "multi_node_argv", "single_node_argv"]


def single_node_argv(
    python_or_deepspeed: str,
    script: str | os.PathLike[str],
    slots: int,
    master_port: int,
    extra: Sequence[str] = (),
    launcher_args: Sequence[str] = (),
    include: str | None = None,
) -> list[str]:
    """The command line that runs the job on this node alone, on ``slots`` local ranks.

    ``launcher_args`` go to the launcher (before the script), ``extra`` to the job.
    ``include`` (``localhost:4,5,6,7``) replaces ``--num_gpus``: the launch's own slot ids, when
    --launch-include/--launch-exclude leave this node other devices than 0..slots-1 (launch.py
    then sets CUDA_VISIBLE_DEVICES/ASCEND_RT_VISIBLE_DEVICES to them).

    ``python_or_deepspeed`` is either the ``deepspeed`` launcher script or a Python interpreter
    (then ``python -u -m deepspeed.launcher.runner`` is used: same launcher, useful when the
    ``deepspeed`` entry point is not on PATH in a non-interactive shell).
    """
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    which = ["--include", include] if include else ["--num_gpus", str(slots)]
    return _launcher(python_or_deepspeed) + [
        "--hostfile",
        NO_HOSTFILE,
        *which,
        "--master_port",
        str(master_port),
        *launcher_args,
        str(script),
        *extra,
    ]


def multi_node_argv(
    deepspeed: str,
    hostfile: str | os.PathLike[str],
    master_addr: str | None,
    master_port: int,
    script: str | os.PathLike[str],
    include: str | None = None,
    exclude: str | None = None,
    extra: Sequence[str] = (),
    launcher_args: Sequence[str] = (),
) -> list[str]:
    """``deepspeed --hostfile H [--master_addr A] --master_port P [--include ..] [--exclude ..]``
    (no ``--master_addr`` when ``master_addr`` is None: DeepSpeed derives it).

    ``deepspeed`` may also be a Python interpreter (``python -u -m deepspeed.launcher.runner``,
    as in :func:`single_node_argv`). ``launcher_args`` go to the launcher, ``extra`` to the job.
    """
    if include and exclude:
        raise ValueError("--include and --exclude are mutually exclusive in DeepSpeed")
    argv = [
        *_launcher(deepspeed),
        "--hostfile",
        str(hostfile),
        *(["--master_addr", master_addr] if master_addr else []),
        "--master_port",
        str(master_port),
    ]
    if include:
        argv += ["--include", include]
    if exclude:
        argv += ["--exclude", exclude]
    return argv + [*launcher_args, str(script), *extra]


def _launcher(python_or_deepspeed: str) -> list[str]:
    if re.fullmatch(r"python(\d+(\.\d+)*)?", Path(python_or_deepspeed).name):
        return [str(python_or_deepspeed), "-u", "-m", "deepspeed.launcher.runner"]
    return [str(python_or_deepspeed)]