"""Where every rank was when a deadline passed: the dumps written into the run's report
directory and told in the red (the parsing, grouping and words are judge/common/stacks.py; the
dumps come from the workers' faulthandler, see node/allreduce.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from cluster_tests.judge.common import stacks as S

#: pytest's record_property fixture
RecordProperty = Callable[[str, object], None]


def report_dir(config: pytest.Config) -> Path:
    """The run's report directory: beside the JUnit file (reports/ by default)."""
    xml = getattr(config.option, "xmlpath", None)
    if xml:
        return Path(xml).expanduser().resolve().parent
    return Path(config.invocation_params.dir) / "reports"


def write(folder: Path, stacks: Mapping[int, str], native: Mapping[int, str],
          hosts: Mapping[int, str]) -> Path:
    """rank<R>-<node>.txt per rank (and rank<R>-<node>.native.txt from py-spy) under folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, text in stacks.items():
        (folder / f"rank{rank}-{hosts.get(rank, 'unknown')}.txt").write_text(text)
    for rank, text in native.items():
        (folder / f"rank{rank}-{hosts.get(rank, 'unknown')}.native.txt").write_text(text)
    return folder


def safe_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "run"


def tell(config: pytest.Config, label: str, stacks: Mapping[int, str],
         native: Mapping[int, str], hosts: Mapping[int, str], ranks: Sequence[int],
         record_property: RecordProperty | None = None,
         sockets: Mapping[int, S.Sockets] | None = None,
         owners: Mapping[str, str] | None = None, nodes: Sequence[str] = (),
         store_port: int | None = None) -> list[str]:
    """The red's lines on where the ranks were ([] with no dump), the dumps written under
    <report dir>/stacks/<label>/, and the groups in the ``stack_groups`` property (the HTML
    report folds them). ``sockets`` (rank -> its TCP connections, ``owners`` naming the
    addresses' nodes, ``nodes`` the run's): when the stacks single out no node, the node in
    every missing connection is the one that differs (judge/common/stacks.py stuck_connects)."""
    if not stacks and not native:
        return []
    g = S.group(stacks, hosts, ranks)
    stuck = S.stuck_connects(sockets or {}, hosts, owners or {}, nodes, store_port)
    by_stacks = list(g.differ)
    if not g.differ and stuck.suspect:
        g.differ = [stuck.suspect]
    try:
        folder = write(report_dir(config) / "stacks" / safe_name(label), stacks, native, hosts)
        for rank, socks in (sockets or {}).items():
            (folder / f"rank{rank}-{hosts.get(rank, 'unknown')}.sockets.json").write_text(
                json.dumps(socks.as_json(), indent=1) + "\n")
        saved = f"every dump in {folder}"
    except OSError as exc:
        saved = f"could not write the dumps: {exc}"
    if record_property is not None:
        record_property("stack_groups", [
            {"label": f"{S.describe(grp.ranks, hosts)} {grp.where}", "where": grp.where,
             "ranks": grp.ranks, "nodes": grp.nodes,
             "differ": any(n in g.differ for n in grp.nodes),
             "text": grp.text,
             "native": next((native[r] for r in grp.ranks if r in native), "")}
            for grp in g.groups])
        if g.differ:
            record_property("stack_differ", ",".join(g.differ))
    return S.where_lines(g, stuck, hosts, by_stacks, saved)
