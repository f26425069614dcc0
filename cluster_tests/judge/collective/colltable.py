"""The all-reduce tables (pure), as nccl-tests prints them: C1's per-size table with the notes of a
slowed or stopped sweep and the verdict, and C2's per-pair table with its slow pairs marked.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping

from cluster_tests.judge.collective.collopts import UNITS_LEGEND, format_size
from cluster_tests.judge.collective.collverdict import CollectiveReport
from cluster_tests.judge.collective.pairbw import SlowPairs, pair_id


def _header_line(*cols: str) -> str:
    widths = (11, 12, 8, 6, 10, 8, 8, 7)
    return "#" + " ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=False))


def format_table(report: CollectiveReport) -> str:
    """nccl-tests-style table, with a units legend and a line stating what was timed."""
    lines = [
        (f"# all_reduce: {report.world_size} ranks, backend {report.backend}, "
        f"versions {json.dumps(report.versions, sort_keys=True)}"),
        f"# timed: {report.timed or 'unknown'}",
        UNITS_LEGEND,
        _header_line("size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"),
        _header_line("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]
    for row in report.rows:
        lines.append(
            f"{row.size_bytes:12d} {row.count:12d} {row.dtype:>8} {'sum':>6} {row.time_us:10.2f}"
            f" {row.algbw_GBps:8.2f} {row.busbw_GBps:8.2f} {row.wrong:7d}")
    if report.rows:
        avg = statistics.fmean(row.busbw_GBps for row in report.rows)
        lines.append(f"# Avg bus bandwidth    : {avg:.3f} GB/s")
    fewer = [row for row in report.rows
             if row.iters is not None and report.iters is not None and row.iters < report.iters]
    if fewer:
        lines.append("# slow link: fewer timed calls at " + ", ".join(
            f"{format_size(row.size_bytes)}B ({row.iters})" for row in fewer)
            + " to stay within --collective-size-seconds (or its share of --collective-budget)")
    if report.stopped is not None:
        lines.append(f"# {report.stopped.describe()}")
    if report.capped:
        skipped = ", ".join(format_size(x) + "B" for x in report.capped.skipped)
        lines.append(f"# not run for lack of memory: {skipped} (largest buffer every rank can "
                     f"hold: {report.capped.cap_bytes} B; {report.capped.where})")
    from cluster_tests.judge.collective import nccllog

    lines += nccllog.table_lines(report.transport_lines, report.ranks)
    lines.append(f"# verdict: {report.verdict}: {report.message}")
    return "\n".join(lines)


def format_pairs_table(reports: Mapping[tuple[str, str], CollectiveReport],
                       errors: Mapping[tuple[str, str], str] | None = None,
                       slow: SlowPairs | None = None) -> str:
    """C2 table: one line per pair, busbw at the pair's (single) size, slow pairs marked."""
    slow_pairs = {p for p, _ in slow.slow} if slow else set()
    lines = ["# C2: all-reduce per node pair, 1 rank per node, largest size only; "
             + UNITS_LEGEND[2:],
             f"#{'pair':>27} {'size':>12} {'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}"
             "  verdict",
             f"#{'':>27} {'(B)':>12} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}"]
    for pair in sorted(set(reports) | set(errors or {})):
        rep = reports.get(pair)
        if rep is None or not rep.rows:
            why = (errors or {}).get(pair) or (rep.message if rep else "no result")
            lines.append(f"{pair_id(pair):>28} {'-':>12} {'-':>10} {'-':>8} {'-':>8} {'-':>7}  "
                         f"{rep.verdict if rep else 'error'}: {why[:100]}")
            continue
        row = rep.rows[-1]
        verdict = ("SLOW (sweep stopped)" if rep.stopped is not None
                   else "SLOW" if pair in slow_pairs else rep.verdict)
        lines.append(f"{pair_id(pair):>28} {row.size_bytes:12d} {row.time_us:10.2f} "
                     f"{row.algbw_GBps:8.2f} {row.busbw_GBps:8.2f} {row.wrong:7d}  {verdict}")
    if slow and slow.reference_GBps:
        ref = slow.reference.replace("_", " ")
        lines.append(f"# slow = busbw below {slow.threshold_GBps:.3f} GB/s "
                     f"({slow.threshold_GBps / slow.reference_GBps:g} x the {ref} "
                     f"{slow.reference_GBps:.3f} GB/s); suspect node: {slow.suspect or 'none'}")
    return "\n".join(lines)
