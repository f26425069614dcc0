"""H5 and T2: DeepSpeed's ``--include`` / ``--exclude`` filter over the hostfile's hosts and slots,
with DeepSpeed 0.19's results and failures (``parse_inclusion_exclusion`` /
``parse_resource_filter``). Pure."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from cluster_tests.judge.hostfile.hostparse import _show


class ResourceFilterError(ValueError):
    """An ``--include``/``--exclude`` spec that DeepSpeed would refuse."""


SlotSpec = int | Sequence[int]


def _parse_node_config(node_config: str) -> tuple[str, list[int]]:
    if ":" not in node_config:
        return node_config, []
    pieces = node_config.split(":")
    if len(pieces) != 2:
        raise ResourceFilterError(
            f"node spec {_show(node_config)} has {len(pieces) - 1} ':'; "
            "write NAME or NAME:SLOT[,SLOT...]"
        )
    hostname, slot_text = pieces
    slots: list[int] = []
    for piece in slot_text.split(","):
        try:
            slots.append(int(piece))
        except ValueError:
            raise ResourceFilterError(
                f"slot {_show(piece)} in {_show(node_config)} is not a slot index (0, 1, ...)"
            ) from None
    return hostname, slots


def parse_resource_filter(
    hosts: Mapping[str, SlotSpec], include: str = "", exclude: str = ""
) -> OrderedDict[str, list[int]]:
    """DeepSpeed 0.19 ``parse_inclusion_exclusion`` / ``parse_resource_filter``.

    ``hosts`` maps host -> slot count (as the hostfile gives it; DeepSpeed turns n into slots
    ``[0, n)``) or host -> list of slot indices. Same results and same failures as DeepSpeed,
    raised as ResourceFilterError (a ValueError) naming the bad host or slot. DeepSpeed
    quirks kept on purpose: a host given both whole and with slots (``a@a:0``) means only
    those slots; slots are sorted and de-duplicated; the result follows the hostfile order;
    hosts left with no slots are dropped, so the result may be empty.
    """
    host_info: OrderedDict[str, list[int]] = OrderedDict(
        (h, list(range(s)) if isinstance(s, int) else list(s)) for h, s in hosts.items()
    )
    if include != "" and exclude != "":
        raise ResourceFilterError(
            "--include and --exclude are mutually exclusive; give only one of them"
        )
    if include == "" and exclude == "":
        return host_info
    option = "--include" if include else "--exclude"
    spec = include if include else exclude

    merged: dict[str, list[int]] = {}
    for node_config in spec.split("@"):
        hostname, slots = _parse_node_config(node_config)
        merged.setdefault(hostname, []).extend(slots)
    node_configs = {k: sorted(set(v)) for k, v in merged.items()}

    filtered: dict[str, list[int]] = {h: list(s) for h, s in host_info.items()} if exclude else {}
    for hostname, slots in node_configs.items():
        if hostname not in host_info:
            raise ResourceFilterError(
                f"{option} names host {_show(hostname)}, which is not in the hostfile "
                f"(hosts: {', '.join(host_info) or 'none'})"
            )
        if slots:
            for slot in slots:
                if slot not in host_info[hostname]:
                    raise ResourceFilterError(
                        f"{option} names slot {slot} on host {_show(hostname)}, which has slots "
                        f"{_slot_range(host_info[hostname])}"
                    )
            if include:
                filtered[hostname] = slots
            else:
                for slot in slots:
                    filtered[hostname].remove(slot)
        elif include:
            filtered[hostname] = host_info[hostname]
        else:
            filtered[hostname] = []

    ordered: OrderedDict[str, list[int]] = OrderedDict()
    for host in host_info:
        if host in filtered:
            kept = list(dict.fromkeys(filtered[host]))
            if kept:
                ordered[host] = kept
    return ordered


def _slot_range(slots: Sequence[int]) -> str:
    if not slots:
        return "none (slots=0)"
    if list(slots) == list(range(len(slots))):
        return f"0..{len(slots) - 1}"
    return ", ".join(str(s) for s in slots)
