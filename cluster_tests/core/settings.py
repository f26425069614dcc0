"""Options of the suite: one declaration each, grouped by checklist section, read from the command
line, the environment or the ini file into frozen dataclasses (`settings.network.port_timeout`).

An option is a dataclass field declared with `option(flag, help, default, type)`, or
`flag(flag, help)` for an on/off one (off unless given): its ini key (`cluster_<name>`),
environment variable (`CLUSTER_TESTS_<NAME>`) and `config.option` dest (`ct_<name>`) follow from
the flag.  The run-wide options are the fields of `Settings` itself; each section's are the
fields of its own dataclass, reached as `settings.<section>.<field>`.

Precedence, highest first: command line, environment variable, ini (pytest.ini / pyproject
`[tool.pytest.ini_options]`), built-in default.  Every bad value is reported as a usage error that
names where it came from.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cluster_tests.core import pairs as pairs_mod
from cluster_tests.judge.collective import collopts as copts
from cluster_tests.judge.hostfile import launchargs as la

T = TypeVar("T")


@dataclass(frozen=True)
class Option:
    flag: str  # command-line flag
    dest: str  # attribute on config.option
    ini: str  # ini key
    env: str  # environment variable
    help: str
    default: object = None
    type: Callable[[str], object] = str
    #: the flag belongs to another plugin (testinfra's --ssh-config): only added when it is absent
    foreign: bool = False


def option(flag: str, help: str, default: object = None, type: Callable[[str], Any] = str, *,
           dest: str | None = None, foreign: bool = False) -> Any:
    """A settings field that is an option of the suite (see the module docstring)."""
    name = flag.lstrip("-").replace("-", "_")
    opt = Option(flag, dest or f"ct_{name}", f"cluster_{name}", f"CLUSTER_TESTS_{name.upper()}",
                 help, default, type, foreign)
    return field(default=default, metadata={"option": opt})


def _checked(convert: Callable[[str], T], ok: Callable[[T], bool], message: str
             ) -> Callable[[str], T]:
    """An option type: `convert`, then ValueError(message) unless `ok`."""

    def parse(value: str) -> T:
        x = convert(value)
        if not ok(x):
            raise ValueError(message)
        return x

    return parse


_positive_float = _checked(float, lambda f: f > 0, "must be > 0")
_port = _checked(int, lambda p: 1 <= p <= 65535, "must be a TCP port, 1-65535")
_positive_int = _checked(int, lambda i: i >= 1, "must be >= 1")


def _flag(value: str) -> bool:
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


def flag(flag: str, help: str) -> Any:
    """A settings field that is an on/off option of the suite: off unless given (`--quick`, or
    true/false in its environment variable or ini key)."""
    return option(flag, help, False, _flag)


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        v = value.strip().lower()
        if v not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return v

    return parse


# --- the sections ------------------------------------------------------------------------------
# (Declarations only: the section classes are alike in shape, as the rows of a table are;
# `duplicates` pairs some of them.)


# One frozen dataclass per section, each a list of option() declarations: `duplicates` pairs two
# of them by shape (the end of one section, the next one's header and first option); there
# is no shared logic to factor out.
@dataclass(frozen=True)
class NodeListSettings:
    """H: the node-list sources besides --hostfile (cluster_tests.core.nodelist)."""

    mpi_hostfile: str | None = option(
        "--mpi-hostfile",
        "take the nodes from an Open MPI ('host slots=N') or MPICH/Intel MPI ('host:N') hostfile")
    nodes_from: str | None = option(
        "--nodes-from",
        "take the nodes from this environment when both are set: slurm (SLURM_JOB_NODELIST) or "
        "skypilot (SKYPILOT_NODE_IPS); without --hostfile either one is used by itself",
        None, _choice("slurm", "skypilot"))
    slots: int | None = option(
        "--slots",
        "slots per node for node lists that carry none (Slurm, SkyPilot, MPI lines without a "
        "count); overrides SLURM_GPUS_ON_NODE / SKYPILOT_NUM_GPUS_PER_NODE", None, _positive_int)
    write_hostfile: str | None = option(
        "--write-hostfile",
        "write the DeepSpeed hostfile this run checked (rank 0 first) to this path, for the "
        "launch (default for Slurm/MPI/SkyPilot lists: hostfile beside the JUnit report)")


@dataclass(frozen=True)
class SshSettings:
    """S."""

    slow_login: float = option(
        "--slow-login", "seconds above which an SSH login counts as slow (reverse DNS, GSSAPI)",
        2.0, _positive_float)


@dataclass(frozen=True)
class NamesSettings:
    """N."""

    slow_resolve: float = option(
        "--slow-resolve", "seconds above which resolving one name counts as slow", 0.5,
        _positive_float)


@dataclass(frozen=True)
class NetworkSettings:
    """F (cluster_tests.judge.network.portjudge)."""

    port_timeout: float = option(
        "--port-timeout",
        "seconds one TCP connect between nodes may take before the port counts as dropped (F2/F3)",
        3.0, _positive_float)
    probe_ports: int = option(
        "--probe-ports", "how many ephemeral high ports each node opens for the port matrix (F3)",
        2, _positive_int)
    rtt_samples: int = option(
        "--rtt-samples", "TCP handshakes timed per pair for RTT and jitter (F1)", 5, _positive_int)


@dataclass(frozen=True)
class EnvSettings:
    """E."""

    required_env: str = option(
        "--required-env",
        "comma-separated variables a non-interactive ssh shell must have on every node (E1)", "")
    launch_dir: str | None = option(
        "--launch-dir",
        "directory the launch starts in, as it is on every node: DeepSpeed's runner cd's every "
        "rank there, puts it first on PYTHONPATH and reads its .deepspeed_env (default: the "
        "current directory, as DeepSpeed's runner takes it)")


@dataclass(frozen=True)
class HealthSettings:
    """R: RDMA, limits and device health (cluster_tests.judge.health.rdma / gpuhealth)."""

    shm_per_rank_mb: float = option(
        "--shm-per-rank-mb",
        "free /dev/shm each local rank needs, MiB (R6; NVIDIA's containers use --shm-size=1g "
        "for 8 GPUs)", 128.0, _positive_float)
    min_memlock_kb: int | None = option(
        "--min-memlock-kb",
        "lowest acceptable max locked memory (ulimit -l, KB) on nodes with RDMA devices "
        "(R4; default: unlimited, as RDMA stacks ask)", None, _positive_int)
    dcgm_level: int = option(
        "--dcgm-level",
        "run level of DCGM's diagnostic on nodes with dcgmi (R9: dcgmi diag -r N): 1 quick "
        "(seconds; the default), 2 medium (minutes), 3 long (about 30 min), 4 extended (hours)",
        1, _checked(int, lambda i: 1 <= i <= 4, "must be 1, 2, 3 or 4"))


@dataclass(frozen=True)
class StorageSettings:
    """D."""

    output_dir: str | None = option(
        "--output-dir", "checkpoint/output directory that every node must see, shared")
    min_free_gb: float = option(
        "--min-free-gb", "free space the output directory needs on every node, in GB (D1)", 10.0,
        _positive_float)


@dataclass(frozen=True)
class CollectiveSettings:
    """C: all-reduce through torch.distributed; option types in
    cluster_tests.judge.collective.collopts."""

    backend: str = option(
        "--backend",
        "torch.distributed backend of the all-reduce checks: auto (CUDA -> nccl, torch_npu -> "
        "hccl, else gloo; gloo on a node with /dev/nvidia* or /dev/davinci* is an error), "
        "nccl, hccl or gloo", "auto", copts.parse_backend)
    sizes: str | None = option(
        "--sizes",
        "all-reduce message sizes in bytes, K/M/G = 2^10/2^20/2^30 (default: 1K..4G x4 with an "
        "accelerator, 1K..16M x4 on CPU)", None, copts.parse_sizes_option)
    iters: int = option("--iters", "timed all-reduce calls per size", 20, _positive_int)
    warmup: int = option(
        "--warmup", "untimed all-reduce calls per size before timing", 5, copts.parse_count)
    min_busbw: float | None = option(
        "--min-busbw",
        "lowest acceptable all-reduce busbw at the largest size, GB/s (1 GB = 1e9 B)", None,
        _positive_float)
    busbw_baseline: str | None = option(
        "--busbw-baseline",
        "JSON of a previous run (written by --busbw-record) that busbw must keep up with")
    busbw_tolerance: float = option(
        "--busbw-tolerance", "how far below the baseline busbw may fall, as a fraction", 0.2,
        copts.parse_fraction)
    busbw_record: str | None = option(
        "--busbw-record",
        "write this run's all-reduce results as JSON to this file (a future --busbw-baseline)")
    connect_timeout: float = option(
        "--collective-connect-timeout",
        "seconds for every rank to reach the rendezvous store and join", 20.0, _positive_float)
    init_timeout: float = option(
        "--collective-init-timeout",
        "seconds for communicator init (init_process_group + a first tiny all-reduce)", 30.0,
        _positive_float)
    op_timeout: float = option(
        "--collective-op-timeout", "seconds for the whole all-reduce size sweep", 120.0,
        _positive_float)
    size_seconds: float = option(
        "--collective-size-seconds",
        "seconds at most per message size: on a slow link fewer timed calls (at least one), and "
        "a size whose single call takes longer ends the sweep (C1's busbw check then fails)",
        10.0, _positive_float)
    budget: float = option(
        "--collective-budget",
        "seconds of all-reduce sweep for C1 and C2 together: C1 gets half, each C2 round an "
        "equal share of the other half, each size of a sweep an equal share of its run's (at "
        "most --collective-size-seconds); a sweep stops before the first size that would "
        "exceed its share, and says so", 40.0, _positive_float)
    pair_slow_ratio: float = option(
        "--pair-slow-ratio",
        "a node pair is slow below this fraction of the typical good pair's busbw (C2)", 0.5,
        copts.parse_fraction)
    confirm_pause: float = option(
        "--confirm-pause",
        "seconds to wait before C2 measures its slow pairs again (the confirmation pass: a "
        "suspect node against two fast ones, each other slow pair once), so that a passing "
        "burst of traffic can end", 2.0, _checked(float, lambda f: f >= 0, "must be >= 0"))


@dataclass(frozen=True)
class TrainingSettings:
    """T1, T2 (cluster_tests.measure.trainruns, which checks zero_stage and deepspeed_args)."""

    steps: int = option(
        "--training-steps", "optimizer steps of the training smoke job (T1, T2)", 20,
        _positive_int)
    deadline: float = option(
        "--training-deadline",
        "seconds one training smoke job may run (each rank's watchdog; the launch gets a grace "
        "on top for pdsh, ssh and imports)", 300.0, _positive_float)
    zero_stage: int = option(
        "--zero-stage", "DeepSpeed ZeRO stage of the training smoke job, 0-3", 0, int)
    deepspeed_args: str = option(
        "--deepspeed-args",
        "extra deepspeed launcher arguments for T1/T2, one shell-quoted string, given as "
        "--deepspeed-args='--ssh_port 2222' (not --include/--exclude: see --launch-include)", "")


@dataclass(frozen=True)
class AfterSettings:
    """After the verdict: Slurm (core/slurmctl.py), the history of runs (report/history.py) and
    the metrics textfile (report/metrics.py)."""

    slurm_drain: bool = flag(
        "--slurm-drain",
        "drain in Slurm each node hostfile.healthy leaves out for a cause of its own (scontrol "
        "update State=DRAIN Reason=\"cluster-tests: <check id>: <cause>\"); never a node Slurm "
        "holds for another reason. Without it the summary prints the lines")
    slurm_resume: bool = flag(
        "--slurm-resume",
        "resume in Slurm each node drained by the suite (its reason starts with "
        "\"cluster-tests:\") that is green now, the check its reason names included")
    history: str | None = option(
        "--history",
        "the SQLite file that keeps every run's outcomes and figures (default: history.sqlite "
        "beside the JUnit file, reports/ by default)")
    no_history: bool = flag(
        "--no-history", "record nothing in the history file, and read no trend from it")
    history_drop: float = option(
        "--history-drop",
        "warn when a pair's C2 busbw, or C1's, is below this fraction of its own median over "
        "its last --history-window passing runs", 0.7,
        _checked(float, lambda f: 0 < f <= 1, "must be > 0 and <= 1"))
    history_window: int = option(
        "--history-window", "how many earlier passing runs a figure's median is taken over", 10,
        _positive_int)
    history_show: bool = flag(
        "--history-show",
        "print the recent runs of the history file (per node and per pair) and exit "
        "(cluster-tests history)")
    metrics_textfile: str | None = option(
        "--metrics-textfile",
        "write the run's outcomes and figures in node_exporter's textfile format to this path "
        "(name it *.prom in the textfile collector's directory)")


def _section(cls: type) -> Any:
    return field(default_factory=cls, metadata={"section": cls})


@dataclass(frozen=True)
class Settings:
    """Every option of a run: the run-wide ones as fields, each section's in its own dataclass
    (change one with dataclasses.replace)."""

    hostfile: Path | None = option(
        "--hostfile", "DeepSpeed hostfile ('host slots=N' lines) naming the nodes to check")
    #: where the node list came from: the flag/variable/ini key, or a node-list source's name
    hostfile_source: str = "default"
    # testinfra (a required dependency, itself a pytest plugin) already defines --ssh-config with
    # the meaning of `ssh -F`; defining it again is an argparse conflict (PITFALLS 2), so we read
    # its value.
    ssh_config: str | None = option(
        "--ssh-config",
        "ssh config file, like ssh -F (default: none, ssh's own ~/.ssh/config and "
        "/etc/ssh/ssh_config, as the launch reads them)", None, dest="ssh_config", foreign=True)
    ssh_user: str | None = option(
        "--ssh-user",
        "user to log in as on every node (default: the ssh config's User, else the local user)")
    remote_python: str = option(
        "--remote-python",
        "Python interpreter on the nodes, as a non-interactive ssh shell finds it",
        "python3")
    master_port: int = option(
        "--master-port", "rendezvous port the launch will use (deepspeed --master_port)", 29500,
        _port)
    master_addr: str | None = option(
        "--master-addr", "--master_addr the launch will use, if given (must be the first host)")
    timeout_connect: float = option(
        "--timeout-connect", "seconds to wait for a TCP connect / SSH login", 10.0, _positive_float)
    timeout_command: float = option(
        "--timeout-command", "seconds any one remote command may run", 60.0, _positive_float)
    fanout: int = option(
        "--fanout",
        "how many nodes the launcher talks to at once, "
        "and how many targets one node probes at once",
        32, _positive_int)
    transport: str = option(
        "--transport",
        "how the probes of each node's hardware and state reach the nodes: ssh, or srun (inside "
        "a Slurm allocation whose node list the run uses: one job step on all nodes at once); "
        "what the launch does through ssh is always checked through ssh (README: Transports)",
        "ssh", _choice("ssh", "srun"))
    #: --transport srun: the `srun` found on PATH (set when the run starts)
    srun_path: str = "srun"
    include: str = option(
        "--launch-include", "the --include spec the launch will use (host:0,1@host2)", "",
        dest="ct_include")
    exclude: str = option(
        "--launch-exclude", "the --exclude spec the launch will use", "", dest="ct_exclude")
    launch: str = option(
        "--launch",
        "the launch command itself, one shell-quoted string: --launch 'deepspeed --hostfile H "
        "train.py --deepspeed ds_config.json' (cluster-tests takes it after --), read with "
        "DeepSpeed's own parser: its hostfile, --include/--exclude, --master_addr/--master_port "
        "and --ssh_port are the run's, its script and the files it names are checked on every "
        "node (E8), and the launch line printed is it with only --hostfile changed", "")
    then_launch: bool = flag(
        "--then-launch",
        "run the launch command (--launch) when the run is green, in the launch directory with "
        "this environment, its exit status passed through; on red launch nothing")
    #: --launch, read (judge/hostfile/launchargs.py: LaunchCommand); None without --launch
    launch_command: la.LaunchCommand | None = None
    launch_args: str = option(
        "--launch-args",
        "the flags you give deepspeed, one shell-quoted string (--launch-args='--master_port 29600 "
        "--include node1@node2 --ssh_port 2222'), read with DeepSpeed's own argument parser: H3, "
        "F2, the rehearsal and T2 use what they resolve to", "")
    #: resolved from --launch / --launch-args (DeepSpeed's --ssh_port, --num_nodes)
    ssh_port: int | None = None
    num_nodes: int = -1
    #: the --launch-args flags the suite does not resolve itself, passed on to T2's deepspeed
    launch_passthrough: tuple[str, ...] = ()
    accept_new_host_keys: bool = flag(
        "--accept-new-host-keys",
        "accept (and record) host keys of nodes not yet in known_hosts; a changed key is always "
        "refused")
    # Scale: which ordered node pairs the pair checks run over (cluster_tests.core.pairs).
    pairs: str = option(
        "--pairs",
        "node pairs the pair checks cover: all, ring (each node to both ring neighbours), "
        "sample:K[:SEED] (the ring plus K random pairs), matrix (the ring, but F1/F3 measure "
        "every pair and report per node: node->*, *->node), or auto "
        f"(all up to {pairs_mod.AUTO_ALL_MAX} nodes, matrix beyond)", "auto", pairs_mod.normalize)
    # Reports and run modes (cluster_tests.plugin, cluster_tests.core.site).
    html_report: str | None = option(
        "--html-report",
        "where to write the self-contained HTML report (default: cluster_report.html beside "
        "the JUnit file, reports/ by default)")
    world_multiple: int = option(
        "--world-multiple",
        "keep the node count of hostfile.healthy a multiple of N (tensor x pipeline parallel "
        "sizes), dropping the slowest extra nodes by the run's own measurements", 1,
        _positive_int)
    quick: bool = flag(
        "--quick",
        "fast pre-flight: deselect the collective and training checks, connect timeout at most "
        "5 s and remote commands at most 30 s")
    site_checks: str | None = option(
        "--site-checks",
        "comma-separated test files or directories of your own site checks (using the "
        "cluster_host fixture), run with the checklist")

    nodelist: NodeListSettings = _section(NodeListSettings)
    ssh: SshSettings = _section(SshSettings)
    names: NamesSettings = _section(NamesSettings)
    network: NetworkSettings = _section(NetworkSettings)
    env: EnvSettings = _section(EnvSettings)
    health: HealthSettings = _section(HealthSettings)
    storage: StorageSettings = _section(StorageSettings)
    collective: CollectiveSettings = _section(CollectiveSettings)
    training: TrainingSettings = _section(TrainingSettings)
    after: AfterSettings = _section(AfterSettings)


def _fields(cls: type) -> Iterator[tuple[str, Option]]:
    for f in dataclasses.fields(cls):
        if "option" in f.metadata:
            yield f.name, f.metadata["option"]


def _sections() -> Iterator[tuple[str | None, type]]:
    """(attribute on Settings or None for the run-wide options, dataclass), in --help order."""
    yield None, Settings
    for f in dataclasses.fields(Settings):
        if "section" in f.metadata:
            yield f.name, f.metadata["section"]


#: every option, run-wide first, then by section
OPTIONS = [opt for _, cls in _sections() for _, opt in _fields(cls)]
#: the flags that take a value (`--hostfile PATH`; not `--quick`)
VALUE_FLAGS = frozenset(opt.flag for opt in OPTIONS if opt.type is not _flag)


def add_options(parser: pytest.Parser, have_ssh_config_flag: bool) -> None:
    group = parser.getgroup("cluster_tests", "cluster pre-launch checks")
    for opt in OPTIONS:
        if opt.foreign and have_ssh_config_flag:
            continue
        if opt.type is _flag:
            group.addoption(opt.flag, dest=opt.dest, action="store_const", const="true",
                            default=None,
                            help=f"{opt.help} [env {opt.env}, ini {opt.ini}]")
        else:
            group.addoption(opt.flag, dest=opt.dest, default=None,
                            help=f"{opt.help} [env {opt.env}, ini {opt.ini}; "
                                 f"default {opt.default}]")
    for opt in OPTIONS:
        parser.addini(opt.ini, opt.help, default=None)


def _read(config: pytest.Config, opt: Option) -> tuple[object, str]:
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


def _parse(config: pytest.Config, opt: Option) -> tuple[object, str]:
    raw, source = _read(config, opt)
    if raw is None or source == "default" or opt.type is str:
        return raw, source
    try:
        return opt.type(str(raw)), source
    except ValueError as exc:
        raise pytest.UsageError(f"{source}: bad value {raw!r}: {exc}") from None


def _resolve_launch_args(run: dict[str, Any], sources: dict[str, str], given: la.LaunchArgs,
                         what: str) -> None:
    """The launch's flags, parsed as DeepSpeed parses them (`given`, from `what`: --launch or
    --launch-args), into the run's master address and port, include/exclude and ssh port (the
    suite's own options, if also given, must agree)."""
    try:
        for name, dest, flag in (("master_addr", "master_addr", "--master-addr"),
                                 ("master_port", "master_port", "--master-port"),
                                 ("include", "include", "--launch-include"),
                                 ("exclude", "exclude", "--launch-exclude")):
            run[name] = la.merge(flag, run[name], sources[name] != "default",
                                 getattr(given, dest), dest in given.given)
    except la.LaunchArgsError as exc:
        raise pytest.UsageError(f"{what}: {exc}") from None
    if given.launcher != la.PDSH:
        raise pytest.UsageError(
            f"{what}: --launcher {given.launcher}: the suite checks the launch through pdsh, "
            f"DeepSpeed's default launcher (its ssh legs, its exports, its rehearsal); a launch "
            f"through {given.launcher} is not checked")
    run["ssh_port"] = given.ssh_port
    run["num_nodes"] = given.num_nodes
    run["launch_passthrough"] = given.passthrough


def _launch_command(run: dict[str, Any], sources: dict[str, str], launch_dir: Path) -> None:
    """--launch: the command read with DeepSpeed's parser; its hostfile (relative to the launch
    directory, where the runner reads it) becomes the run's, and its flags the run's values."""
    if run["launch_args"]:
        raise pytest.UsageError("--launch and --launch-args: give one (the launch command holds "
                                "its flags)")
    try:
        cmd = la.parse_command(shlex.split(run["launch"]))
    except (ValueError, la.LaunchArgsError) as exc:
        raise pytest.UsageError(f"the launch command {run['launch']!r}: {exc}") from None
    run["launch_command"] = cmd
    _resolve_launch_args(run, sources, cmd.args, "the launch command")
    theirs = (launch_dir / Path(cmd.args.hostfile).expanduser()).absolute()
    ours = run["hostfile"]
    if ours is not None and sources["hostfile"] != "default":
        if ours.resolve() != theirs.resolve():
            raise pytest.UsageError(
                f"{sources['hostfile']} {ours} and the launch command's hostfile {theirs} "
                f"disagree: give one (the launch's is enough)")
        return
    written = run["nodelist"].write_hostfile
    if written and Path(written).expanduser().absolute() == theirs:
        return  # the node list comes from another source and is written where the launch reads
    if not theirs.is_file():
        said = ("names no hostfile, and DeepSpeed's default" if "hostfile" not in cmd.args.given
                else "names the hostfile")
        raise pytest.UsageError(
            f"the launch command {said} {theirs} does not exist (deepspeed would then run on "
            f"this machine alone): give --hostfile in the launch command")
    run["hostfile"] = theirs
    run["hostfile_source"] = "the launch command"


def read_settings(config: pytest.Config) -> Settings:
    run: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for section, cls in _sections():
        values = {}
        for name, opt in _fields(cls):
            values[name], source = _parse(config, opt)
            if cls is Settings:
                sources[name] = source
            if name == "hostfile" and cls is Settings:
                values["hostfile_source"] = source
        if section is None:
            run.update(values)
        else:
            run[section] = cls(**values)
    hostfile = run["hostfile"]
    run["hostfile"] = Path(hostfile).expanduser().absolute() if hostfile else None
    ssh_config = run["ssh_config"]
    run["ssh_config"] = str(Path(ssh_config).expanduser()) if ssh_config else None
    if ssh_config and not Path(run["ssh_config"]).is_file():
        raise pytest.UsageError(f"--ssh-config {ssh_config}: no such file")
    output_dir = run["storage"].output_dir
    if output_dir and not str(output_dir).startswith(("/", "~")):
        raise pytest.UsageError(
            f"--output-dir {output_dir}: give an absolute path, as the nodes see it (a relative "
            f"path would be read from each node's home directory)"
        )
    params = getattr(config, "invocation_params", None)  # (a stand-in config has none)
    invoked = Path(params.dir) if params is not None else Path.cwd()
    launch_dir = Path(run["env"].launch_dir or invoked).expanduser()
    launch_dir = launch_dir if launch_dir.is_absolute() else invoked / launch_dir
    run["env"] = dataclasses.replace(run["env"], launch_dir=os.path.normpath(launch_dir))
    if run["launch"]:
        _launch_command(run, sources, Path(run["env"].launch_dir))
    elif run["launch_args"]:
        try:
            given = la.parse(run["launch_args"])
        except la.LaunchArgsError as exc:
            raise pytest.UsageError(f"--launch-args {run['launch_args']!r}: {exc}") from None
        _resolve_launch_args(run, sources, given, f"--launch-args {run['launch_args']!r}")
    if run["then_launch"] and run.get("launch_command") is None:
        raise pytest.UsageError("--then-launch needs the launch command: cluster-tests "
                                "--then-launch -- deepspeed --hostfile H train.py ...")
    return Settings(**run)
