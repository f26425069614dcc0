"""H5 and T2: DeepSpeed's ``--include`` / ``--exclude`` filter over the hostfile's hosts and slots,
with DeepSpeed 0.19's results and failures (``parse_inclusion_exclusion`` /
``parse_resource_filter``). Pure."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from cluster_tests.core import testids as ids
from cluster_tests.judge.hostfile.hostmodel import HostfileCause, show
from cluster_tests.judge.problem import Problem


class ResourceFilterError(ValueError):
    """An ``--include``/``--exclude`` spec that DeepSpeed would refuse."""


SlotSpec = int | Sequence[int]


def _parse_node_config(node_config: str) -> tuple[str, list[int]]:
    if ":" not in node_config:
        return node_config, []
    pieces = node_config.split(":")
    if len(pieces) != 2:
        raise ResourceFilterError(
            f"node spec {show(node_config)} has {len(pieces) - 1} ':'; "
            "write NAME or NAME:SLOT[,SLOT...]"
        )
    hostname, slot_text = pieces
    slots: list[int] = []
    for piece in slot_text.split(","):
        try:
            slots.append(int(piece))
        except ValueError:
            raise ResourceFilterError(
                f"slot {show(piece)} in {show(node_config)} is not a slot index (0, 1, ...)"
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

    filtered = _filtered(host_info, _node_configs(spec), option, keep=bool(include))
    ordered: OrderedDict[str, list[int]] = OrderedDict()
    for host in host_info:
        if host in filtered:
            kept = list(dict.fromkeys(filtered[host]))
            if kept:
                ordered[host] = kept
    return ordered


def _node_configs(spec: str) -> dict[str, list[int]]:
    """``a:0,1@b`` -> {host: its slots, sorted, each once (empty: the whole host)}."""
    merged: dict[str, list[int]] = {}
    for node_config in spec.split("@"):
        hostname, slots = _parse_node_config(node_config)
        merged.setdefault(hostname, []).extend(slots)
    return {k: sorted(set(v)) for k, v in merged.items()}


def _filtered(host_info: Mapping[str, list[int]], node_configs: Mapping[str, list[int]],
              option: str, keep: bool) -> dict[str, list[int]]:
    """The slots left of each host: those named (`keep`, --include), or all but those named
    (--exclude); ResourceFilterError naming a host or a slot that is not in the hostfile."""
    filtered: dict[str, list[int]] = {} if keep else {h: list(s) for h, s in host_info.items()}
    for hostname, slots in node_configs.items():
        if hostname not in host_info:
            raise ResourceFilterError(
                f"{option} names host {show(hostname)}, which is not in the hostfile "
                f"(hosts: {', '.join(host_info) or 'none'})"
            )
        for slot in slots:
            if slot not in host_info[hostname]:
                raise ResourceFilterError(
                    f"{option} names slot {slot} on host {show(hostname)}, which has slots "
                    f"{_slot_range(host_info[hostname])}"
                )
        if keep:
            filtered[hostname] = slots if slots else host_info[hostname]
        elif slots:
            for slot in slots:
                filtered[hostname].remove(slot)
        else:
            filtered[hostname] = []
    return filtered


def _slot_range(slots: Sequence[int]) -> str:
    if not slots:
        return "none (slots=0)"
    if list(slots) == list(range(len(slots))):
        return f"0..{len(slots) - 1}"
    return ", ".join(str(s) for s in slots)


def judge_filter(hosts: Mapping[str, SlotSpec], include: str = "",
                 exclude: str = "") -> Problem | None:
    """H5: the launch's ``--include`` / ``--exclude`` names only hostfile hosts and slot
    indices that exist, and leaves a slot to launch on (None: DeepSpeed takes it)."""
    try:
        active = parse_resource_filter(hosts, include=include, exclude=exclude)
    except ResourceFilterError as exc:
        return Problem((), HostfileCause.FILTER_REFUSED,
                       f"the launch's resource filter will be refused by DeepSpeed: {exc}",
                       fix="name only the hostfile's hosts and their slot indices in "
                           "--launch-include / --launch-exclude (and the launch's --include / "
                           "--exclude)", item=ids.INCLUDE_EXCLUDE.item)
    if not active:
        return Problem((), HostfileCause.FILTER_EMPTY,
                       "the include/exclude filters leave no slot to launch on",
                       fix="include at least one host with slots, or exclude fewer",
                       item=ids.INCLUDE_EXCLUDE.item)
    return None
