"""The scripts that run on the nodes (sent over SSH, run by the node's own Python 3.6+ with the
standard library only). This package only says where they are; nothing here is imported there."""

from pathlib import Path

DIR = Path(__file__).resolve().parent


def script(name: str) -> Path:
    """The path of one node-side script, e.g. ``script("allreduce.py")``."""
    return DIR / name


#: The scripts sent with the prelude (prelude.py) prepended; the others share nothing with it.
PRELUDED = frozenset({"probe.py", "envprobe.py", "netprobe.py", "healthprobe.py", "storeprobe.py"})


def source(name: str) -> bytes:
    """The bytes to send (or write to a node) to run one node-side script: prelude.py followed
    by the script for the probe family, the script alone otherwise. The files on disk without
    the prelude are never what runs."""
    text = script(name).read_bytes()
    if name in PRELUDED:
        return (DIR / "prelude.py").read_bytes() + b"\n\n" + text
    return text
