"""The checklist's sections, one table: letter, pytest marker, check module, judge package,
measure modules, title, run order.

From an item's id to its code in one hop: E7 is section E, whose row names
`cluster_tests/checks/env.py` (the tests, `test_jit_ops`), `cluster_tests/judge/env/` (the
verdicts) and the `cluster_tests/measure/` modules that gather its facts across the cluster.

docs/CHECKLIST.md's sections, in the order the run takes them (H, S, N, F, E, A, R, D, C, T: the
quick checks that explain later failures first, the long phases last). The plugin registers the
markers and sorts the items by it, the plugin's collector collects the modules named here from
`cluster_tests/checks/`, `core.testids` maps a check to its module, and the fix script orders its
blocks by it.

Dependency-free: imports nothing from cluster_tests, so that every layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    letter: str  # "S": docs/CHECKLIST.md's section letter, the first of its items' ids ("S4")
    marker: str  # "ssh": `pytest -m ssh`
    module: str  # "ssh": cluster_tests/checks/ssh.py
    judge: str  # "ssh": cluster_tests/judge/ssh/ (its verdicts; shared ones: judge/common/)
    measure: tuple[str, ...]  # ("sshpairs",): cluster_tests/measure/sshpairs.py
    title: str  # what `pytest --markers` says of it

    @property
    def order(self) -> int:
        """Its place in the run (and in the fix script): 0 for H."""
        return ORDER.index(self.letter)


#: in run order
SECTIONS: tuple[Section, ...] = (
    Section("H", "hostfile", "hostfile", "hostfile", ("masterroute", "launchpy"),
            "the hostfile parses as DeepSpeed parses it, and fits the cluster"),
    Section("S", "ssh", "ssh", "ssh", ("sshpairs", "sshroot"),
            "SSH from the launcher and between every ordered pair of nodes"),
    Section("N", "names", "names", "names", (), "name resolution"),
    Section("F", "network", "network", "network", ("ports", "ifaces"),
            "network reachability and firewall"),
    Section("E", "env", "env", "env", ("envfacts", "rehearsal", "launchref"),
            "environment as non-interactive shells see it"),
    Section("A", "accelerator", "accelerator", "accelerator", ("accel",),
            "accelerators visible and healthy"),
    Section("R", "health", "health", "health", (),
            "RDMA fabric, limits, /dev/shm and GPU/NPU health, as the launch meets them"),
    Section("D", "storage", "storage", "storage", ("share",),
            "checkpoint storage shared and writable"),
    Section("C", "collective", "collective", "collective", ("allreducerun", "stackdump"),
            "all-reduce bandwidth through torch.distributed"),
    Section("T", "training", "training", "training", ("trainruns",),
            "training smoke tests through the real launcher"),
)

ORDER = "".join(s.letter for s in SECTIONS)
BY_LETTER = {s.letter: s for s in SECTIONS}
BY_MODULE = {s.module: s for s in SECTIONS}
BY_MARKER = {s.marker: s for s in SECTIONS}


def marker_line(section: Section) -> str:
    """The `markers` ini line that registers its marker: "ssh: S - SSH from the launcher..."."""
    return f"{section.marker}: {section.letter} - {section.title}"
