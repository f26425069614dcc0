"""Options of the suite: one table, read from the command line, the environment or the ini file.

Precedence, highest first: command line, environment variable, ini (pytest.ini / pyproject
`[tool.pytest.ini_options]`), built-in default.  Every bad value is reported as a usage error that
names where it came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from cluster_tests.core import pairs as _pairs
from cluster_tests.judge import collective as _coll


@dataclass(frozen=True)
class Option:
    flag: str  # command-line flag
    dest: str  # attribute on config.option
    ini: str  # ini key
    env: str  # environment variable
    help: str
    default: Any = None
    type: Callable[[str], Any] = str


def _positive_float(value: str) -> float:
    f = float(value)
    if f <= 0:
        raise ValueError("must be > 0")
    return f


def _port(value: str) -> int:
    p = int(value)
    if not 1 <= p <= 65535:
        raise ValueError("must be a TCP port, 1-65535")
    return p


def _positive_int(value: str) -> int:
    i = int(value)
    if i < 1:
        raise ValueError("must be >= 1")
    return i


def _flag(value: str) -> bool:
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


OPTIONS = [
    Option("--hostfile", "ct_hostfile", "cluster_hostfile", "CLUSTER_TESTS_HOSTFILE",
           "DeepSpeed hostfile ('host slots=N' lines) naming the nodes to check"),
    Option("--ssh-user", "ct_ssh_user", "cluster_ssh_user", "CLUSTER_TESTS_SSH_USER",
           "user to log in as on every node (default: the ssh config's User, else the local user)"),
    Option("--remote-python", "ct_remote_python", "cluster_remote_python", "CLUSTER_TESTS_REMOTE_PYTHON",
           "Python interpreter on the nodes, as a non-interactive ssh shell finds it", "python3"),
    Option("--master-port", "ct_master_port", "cluster_master_port", "CLUSTER_TESTS_MASTER_PORT",
           "rendezvous port the launch will use (deepspeed --master_port)", 29500, _port),
    Option("--master-addr", "ct_master_addr", "cluster_master_addr", "CLUSTER_TESTS_MASTER_ADDR",
           "--master_addr the launch will use, if given (must be the first host)"),
    Option("--output-dir", "ct_output_dir", "cluster_output_dir", "CLUSTER_TESTS_OUTPUT_DIR",
           "checkpoint/output directory that every node must see, shared"),
    Option("--timeout-connect", "ct_timeout_connect", "cluster_timeout_connect", "CLUSTER_TESTS_TIMEOUT_CONNECT",
           "seconds to wait for a TCP connect / SSH login", 10.0, _positive_float),
    Option("--timeout-command", "ct_timeout_command", "cluster_timeout_command", "CLUSTER_TESTS_TIMEOUT_COMMAND",
           "seconds any one remote command may run", 60.0, _positive_float),
    Option("--fanout", "ct_fanout", "cluster_fanout", "CLUSTER_TESTS_FANOUT",
           "how many nodes the launcher talks to at once, and how many targets one node probes at once",
           32, _positive_int),
    Option("--launch-include", "ct_include", "cluster_launch_include", "CLUSTER_TESTS_LAUNCH_INCLUDE",
           "the --include spec the launch will use (host:0,1@host2)", ""),
    Option("--launch-exclude", "ct_exclude", "cluster_launch_exclude", "CLUSTER_TESTS_LAUNCH_EXCLUDE",
           "the --exclude spec the launch will use", ""),
    Option("--accept-new-host-keys", "ct_accept_new", "cluster_accept_new_host_keys",
           "CLUSTER_TESTS_ACCEPT_NEW_HOST_KEYS",
           "accept (and record) host keys of nodes not yet in known_hosts; a changed key is always refused",
           False, _flag),
    Option("--slow-login", "ct_slow_login", "cluster_slow_login", "CLUSTER_TESTS_SLOW_LOGIN",
           "seconds above which an SSH login counts as slow (reverse DNS, GSSAPI)", 2.0, _positive_float),
    Option("--slow-resolve", "ct_slow_resolve", "cluster_slow_resolve", "CLUSTER_TESTS_SLOW_RESOLVE",
           "seconds above which resolving one name counts as slow", 0.5, _positive_float),
    Option("--port-timeout", "ct_port_timeout", "cluster_port_timeout", "CLUSTER_TESTS_PORT_TIMEOUT",
           "seconds one TCP connect between nodes may take before the port counts as dropped (F2/F3)",
           3.0, _positive_float),
    Option("--probe-ports", "ct_probe_ports", "cluster_probe_ports", "CLUSTER_TESTS_PROBE_PORTS",
           "how many ephemeral high ports each node opens for the port matrix (F3)", 2, _positive_int),
    Option("--rtt-samples", "ct_rtt_samples", "cluster_rtt_samples", "CLUSTER_TESTS_RTT_SAMPLES",
           "TCP handshakes timed per pair for RTT and jitter (F1)", 5, _positive_int),
    Option("--required-env", "ct_required_env", "cluster_required_env", "CLUSTER_TESTS_REQUIRED_ENV",
           "comma-separated variables a non-interactive ssh shell must have on every node (E1)", ""),
    Option("--launch-dir", "ct_launch_dir", "cluster_launch_dir", "CLUSTER_TESTS_LAUNCH_DIR",
           "directory deepspeed will be started in (where it also reads .deepspeed_env; default: home)"),
    Option("--min-free-gb", "ct_min_free_gb", "cluster_min_free_gb", "CLUSTER_TESTS_MIN_FREE_GB",
           "free space the output directory needs on every node, in GB (D1)", 10.0, _positive_float),
]

# Scale: which ordered node pairs the pair checks run over (cluster_tests.core.pairs).
OPTIONS += [
    Option("--pairs", "ct_pairs", "cluster_pairs", "CLUSTER_TESTS_PAIRS",
           "node pairs the pair checks cover: all, ring (each node to both ring neighbours), "
           "sample:K[:SEED] (the ring plus K random pairs), or auto "
           f"(all up to {_pairs.AUTO_ALL_MAX} nodes, ring beyond)", "auto", _pairs.normalize),
]

# C. Collective (all-reduce through torch.distributed); parsers in cluster_tests.judge.collective.
OPTIONS += [
    Option("--backend", "ct_backend", "cluster_backend", "CLUSTER_TESTS_BACKEND",
           "torch.distributed backend of the all-reduce checks: auto (CUDA -> nccl, torch_npu -> "
           "hccl, else gloo; gloo on a node with /dev/nvidia* or /dev/davinci* is an error), "
           "nccl, hccl or gloo", "auto", _coll.parse_backend),
    Option("--sizes", "ct_sizes", "cluster_sizes", "CLUSTER_TESTS_SIZES",
           "all-reduce message sizes in bytes, K/M/G = 2^10/2^20/2^30 (default: 1K..4G x4 with an "
           "accelerator, 1K..16M x4 on CPU)", None, _coll.parse_sizes_option),
    Option("--iters", "ct_iters", "cluster_iters", "CLUSTER_TESTS_ITERS",
           "timed all-reduce calls per size", 20, _positive_int),
    Option("--warmup", "ct_warmup", "cluster_warmup", "CLUSTER_TESTS_WARMUP",
           "untimed all-reduce calls per size before timing", 5, _coll.parse_count),
    Option("--min-busbw", "ct_min_busbw", "cluster_min_busbw", "CLUSTER_TESTS_MIN_BUSBW",
           "lowest acceptable all-reduce busbw at the largest size, GB/s (1 GB = 1e9 B)", None,
           _positive_float),
    Option("--busbw-baseline", "ct_busbw_baseline", "cluster_busbw_baseline",
           "CLUSTER_TESTS_BUSBW_BASELINE",
           "JSON of a previous run (written by --busbw-record) that busbw must keep up with"),
    Option("--busbw-tolerance", "ct_busbw_tolerance", "cluster_busbw_tolerance",
           "CLUSTER_TESTS_BUSBW_TOLERANCE",
           "how far below the baseline busbw may fall, as a fraction", 0.2, _coll.parse_fraction),
    Option("--busbw-record", "ct_busbw_record", "cluster_busbw_record", "CLUSTER_TESTS_BUSBW_RECORD",
           "write this run's all-reduce results as JSON to this file (a future --busbw-baseline)"),
    Option("--collective-connect-timeout", "ct_coll_connect_timeout", "cluster_collective_connect_timeout",
           "CLUSTER_TESTS_COLLECTIVE_CONNECT_TIMEOUT",
           "seconds for every rank to reach the rendezvous store and join", 20.0, _positive_float),
    Option("--collective-init-timeout", "ct_coll_init_timeout", "cluster_collective_init_timeout",
           "CLUSTER_TESTS_COLLECTIVE_INIT_TIMEOUT",
           "seconds for communicator init (init_process_group + a first tiny all-reduce)", 30.0,
           _positive_float),
    Option("--collective-op-timeout", "ct_coll_op_timeout", "cluster_collective_op_timeout",
           "CLUSTER_TESTS_COLLECTIVE_OP_TIMEOUT",
           "seconds for the whole all-reduce size sweep", 120.0, _positive_float),
    Option("--collective-size-seconds", "ct_coll_size_seconds", "cluster_collective_size_seconds",
           "CLUSTER_TESTS_COLLECTIVE_SIZE_SECONDS",
           "seconds at most per message size: on a slow link fewer timed calls (at least one), and "
           "a size whose single call takes longer ends the sweep (C1's busbw check then fails)",
           10.0, _positive_float),
    Option("--pair-slow-ratio", "ct_pair_slow_ratio", "cluster_pair_slow_ratio",
           "CLUSTER_TESTS_PAIR_SLOW_RATIO",
           "a node pair is slow below this fraction of the typical good pair's busbw (C2)", 0.5,
           _coll.parse_fraction),
]

# T. Training smoke (T1, T2); used by cluster_tests.measure.training.
OPTIONS += [
    Option("--training-steps", "ct_training_steps", "cluster_training_steps",
           "CLUSTER_TESTS_TRAINING_STEPS", "optimizer steps of the training smoke job (T1, T2)",
           20, _positive_int),
    Option("--training-deadline", "ct_training_deadline", "cluster_training_deadline",
           "CLUSTER_TESTS_TRAINING_DEADLINE",
           "seconds one training smoke job may run (each rank's watchdog; the launch gets a grace "
           "on top for pdsh, ssh and imports)", 300.0, _positive_float),
    Option("--zero-stage", "ct_zero_stage", "cluster_zero_stage", "CLUSTER_TESTS_ZERO_STAGE",
           "DeepSpeed ZeRO stage of the training smoke job, 0-3", 0, int),
    Option("--deepspeed-args", "ct_deepspeed_args", "cluster_deepspeed_args",
           "CLUSTER_TESTS_DEEPSPEED_ARGS",
           "extra deepspeed launcher arguments for T1/T2, one shell-quoted string, given as "
           "--deepspeed-args='--ssh_port 2222' (not --include/--exclude: see --launch-include)", ""),
]

# Reports and run modes; used by cluster_tests.core.plugin / html_report.
OPTIONS += [
    Option("--html-report", "ct_html_report", "cluster_html_report", "CLUSTER_TESTS_HTML_REPORT",
           "where to write the self-contained HTML report (default: cluster_report.html beside "
           "the JUnit file, reports/ by default)"),
    Option("--quick", "ct_quick", "cluster_quick", "CLUSTER_TESTS_QUICK",
           "fast pre-flight: deselect the collective and training checks, connect timeout at most "
           "5 s and remote commands at most 30 s", False, _flag),
]

# R. RDMA, limits and device health; judged in cluster_tests.judge.rdma / gpuhealth.
OPTIONS += [
    Option("--shm-per-rank-mb", "ct_shm_per_rank_mb", "cluster_shm_per_rank_mb",
           "CLUSTER_TESTS_SHM_PER_RANK_MB",
           "free /dev/shm each local rank needs, MiB (R6; NVIDIA's containers use --shm-size=1g "
           "for 8 GPUs)", 128.0, _positive_float),
    Option("--min-memlock-kb", "ct_min_memlock_kb", "cluster_min_memlock_kb",
           "CLUSTER_TESTS_MIN_MEMLOCK_KB",
           "lowest acceptable max locked memory (ulimit -l, KB) on nodes with RDMA devices "
           "(R4; default: unlimited, as RDMA stacks ask)", None, _positive_int),
]

# Node-list sources besides --hostfile, and the checked hostfile; used by cluster_tests.core.nodelist.
OPTIONS += [
    Option("--mpi-hostfile", "ct_mpi_hostfile", "cluster_mpi_hostfile", "CLUSTER_TESTS_MPI_HOSTFILE",
           "take the nodes from an Open MPI ('host slots=N') or MPICH/Intel MPI ('host:N') hostfile"),
    Option("--nodes-from", "ct_nodes_from", "cluster_nodes_from", "CLUSTER_TESTS_NODES_FROM",
           "take the nodes from this environment when both are set: slurm (SLURM_JOB_NODELIST) or "
           "skypilot (SKYPILOT_NODE_IPS); without --hostfile either one is used by itself",
           None, lambda v: _choice(v, ("slurm", "skypilot"))),
    Option("--slots", "ct_slots", "cluster_slots", "CLUSTER_TESTS_SLOTS",
           "slots per node for node lists that carry none (Slurm, SkyPilot, MPI lines without a "
           "count); overrides SLURM_GPUS_ON_NODE / SKYPILOT_NUM_GPUS_PER_NODE", None, _positive_int),
    Option("--write-hostfile", "ct_write_hostfile", "cluster_write_hostfile",
           "CLUSTER_TESTS_WRITE_HOSTFILE",
           "write the DeepSpeed hostfile this run checked (rank 0 first) to this path, for the "
           "launch (default for Slurm/MPI/SkyPilot lists: hostfile beside the JUnit report)"),
]

# Site checks (pytest-testinfra), see cluster_tests.core.site.
OPTIONS += [
    Option("--site-checks", "ct_site_checks", "cluster_site_checks", "CLUSTER_TESTS_SITE_CHECKS",
           "comma-separated test files or directories of your own site checks (using the "
           "cluster_host fixture), run with the checklist"),
]


def _choice(value: str, choices: tuple[str, ...]) -> str:
    v = value.strip().lower()
    if v not in choices:
        raise ValueError(f"must be one of {', '.join(choices)}")
    return v


# testinfra (a required dependency, itself a pytest plugin) already defines --ssh-config with the
# meaning of `ssh -F`; defining it again is an argparse conflict (PITFALLS 2), so we read its value.
SSH_CONFIG = Option("--ssh-config", "ssh_config", "cluster_ssh_config", "CLUSTER_TESTS_SSH_CONFIG",
                    "ssh config file, like ssh -F (default ~/.ssh/config)", "~/.ssh/config")


def add_options(parser: pytest.Parser, have_ssh_config_flag: bool) -> None:
    group = parser.getgroup("cluster_tests", "cluster pre-launch checks")
    options = OPTIONS if have_ssh_config_flag else [*OPTIONS, SSH_CONFIG]
    for opt in options:
        if opt.type is _flag:
            group.addoption(opt.flag, dest=opt.dest, action="store_const", const="true", default=None,
                            help=f"{opt.help} [env {opt.env}, ini {opt.ini}]")
        else:
            group.addoption(opt.flag, dest=opt.dest, default=None,
                            help=f"{opt.help} [env {opt.env}, ini {opt.ini}; default {opt.default}]")
    for opt in [*OPTIONS, SSH_CONFIG]:
        parser.addini(opt.ini, opt.help, default=None)


def _read(config: pytest.Config, opt: Option) -> tuple[Any, str]:
    cli = getattr(config.option, opt.dest, None)
    if cli not in (None, ""):
        return cli, opt.flag
    env = os.environ.get(opt.env)
    if env not in (None, ""):
        return env, f"environment variable {opt.env}"
    try:
        ini = config.getini(opt.ini)
    except ValueError:
        ini = None
    if ini not in (None, "", []):
        return ini, f"ini setting {opt.ini}"
    return opt.default, "default"


@dataclass(frozen=True)
class Settings:
    hostfile: Path | None
    hostfile_source: str
    ssh_config: str | None
    ssh_user: str | None
    remote_python: str
    master_port: int
    master_addr: str | None
    output_dir: str | None
    timeout_connect: float
    timeout_command: float
    fanout: int
    include: str
    exclude: str
    accept_new_host_keys: bool
    slow_login: float
    slow_resolve: float
    values: dict[str, Any]  # every option by its dest, for options without a field of their own

    def value(self, dest: str) -> Any:
        """An option's value by its dest (e.g. "ct_min_busbw")."""
        return self.values[dest]


def read_settings(config: pytest.Config) -> Settings:
    values: dict[str, Any] = {}
    for opt in [*OPTIONS, SSH_CONFIG]:
        raw, source = _read(config, opt)
        if raw is None or source == "default" or opt.type is str:
            values[opt.dest] = raw
        else:
            try:
                values[opt.dest] = opt.type(str(raw))
            except ValueError as exc:
                raise pytest.UsageError(f"{source}: bad value {raw!r}: {exc}") from None
        if opt.dest == "ct_hostfile":
            values["hostfile_source"] = source
    hostfile = values["ct_hostfile"]
    ssh_config = values["ssh_config"]
    ssh_config_path = str(Path(ssh_config).expanduser()) if ssh_config else None
    if ssh_config and values["ssh_config"] != SSH_CONFIG.default and not Path(ssh_config_path).is_file():
        raise pytest.UsageError(f"--ssh-config {ssh_config}: no such file")
    output_dir = values["ct_output_dir"]
    if output_dir and not str(output_dir).startswith(("/", "~")):
        raise pytest.UsageError(
            f"--output-dir {output_dir}: give an absolute path, as the nodes see it (a relative "
            f"path would be read from each node's home directory)"
        )
    return Settings(
        hostfile=Path(hostfile).expanduser().absolute() if hostfile else None,
        hostfile_source=values["hostfile_source"],
        ssh_config=ssh_config_path,
        ssh_user=values["ct_ssh_user"],
        remote_python=values["ct_remote_python"],
        master_port=values["ct_master_port"],
        master_addr=values["ct_master_addr"],
        output_dir=values["ct_output_dir"],
        timeout_connect=values["ct_timeout_connect"],
        timeout_command=values["ct_timeout_command"],
        fanout=values["ct_fanout"],
        include=values["ct_include"] or "",
        exclude=values["ct_exclude"] or "",
        accept_new_host_keys=bool(values["ct_accept_new"]),
        slow_login=values["ct_slow_login"],
        slow_resolve=values["ct_slow_resolve"],
        values=values,
    )
