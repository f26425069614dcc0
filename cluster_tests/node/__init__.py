"""The scripts that run on the nodes (sent over SSH, run by the node's own Python 3.6+ with the
standard library only). This package only says where they are; nothing here is imported there."""

from pathlib import Path

DIR = Path(__file__).resolve().parent


def script(name: str) -> Path:
    """The path of one node-side script, e.g. ``script("allreduce.py")``."""
    return DIR / name
