"""The scripts that run on the nodes (sent over SSH, run by the node's own Python 3.6+ with the
standard library only). This package only says where they are; nothing here is imported there."""

import functools
from pathlib import Path

DIR = Path(__file__).resolve().parent


def script(name: str) -> Path:
    """The path of one node-side script, e.g. ``script("allreduce.py")``."""
    return DIR / name


#: The parts sent before a script, in this order (each a file here that defines names the script
#: uses unseen); a script not named here is sent as it is.  prelude.py: the probe protocol and
#: capped commands; versions.py: E3's versions, for envprobe.py and the rehearsal alike;
#: tmpdirs.py: E6's temporary directories, likewise;
#: allreduce_pattern.py and allreduce_stacks.py: the all-reduce worker's pattern and stacks.
PARTS: dict[str, tuple[str, ...]] = {
    "probe.py": ("prelude.py",),
    "envprobe.py": ("prelude.py", "versions.py", "tmpdirs.py"),
    "netprobe.py": ("prelude.py",),
    "healthprobe.py": ("prelude.py",),
    "storeprobe.py": ("prelude.py",),
    "rehearse.py": ("versions.py", "tmpdirs.py"),
    "allreduce.py": ("allreduce_pattern.py", "allreduce_stacks.py"),
}
#: The (script, section)s that import installed packages (torch, torch_npu): their interpreter
#: starts with its site-packages.  Every other section is standard library only, and its
#: interpreter starts without them (`python -S`: no .pth files, editable finders or
#: sitecustomize to run first, 5-50 ms fewer per start on every node, depending on the
#: environment; the facts are the same).
SITE_SECTIONS = frozenset({("envprobe.py", "versions"), ("envprobe.py", "devices")})
#: The scripts sent with the prelude (prelude.py) prepended.
PRELUDED = frozenset(name for name, parts in PARTS.items() if "prelude.py" in parts)
#: The parts themselves (never sent alone).
PART_FILES = frozenset(part for parts in PARTS.values() for part in parts)


@functools.lru_cache(maxsize=None)
def source(name: str) -> bytes:
    """The bytes to send (or write to a node) to run one node-side script: its parts (PARTS)
    followed by the script. The files on disk without their parts are never what runs."""
    parts = [(DIR / part).read_bytes() for part in PARTS.get(name, ())]
    return b"\n\n".join([*parts, script(name).read_bytes()])


@functools.lru_cache(maxsize=None)
def bundle_source(scripts: tuple[str, ...]) -> bytes:
    """What to send to run several scripts' sections in one interpreter (bundle.py): the runner,
    then ``bundle_main(SOURCES)`` with each script's `source` as a Python literal."""
    sources = {name: source(name).decode("utf-8") for name in scripts}
    return script("bundle.py").read_bytes() + f"\n\nbundle_main({sources!r})\n".encode()
