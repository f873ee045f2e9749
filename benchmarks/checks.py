"""The no-regression checks: bounds flo-redis must stay within, read from one run's
results and printed PASS or MISS (reported, never asserted)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._common import text_table


@dataclass(frozen=True)
class Check:
    title: str
    source: str  # "workload.metric", or "targets.RUN.metric"
    bound: float
    unit: str
    at_least: bool = False  # the value must reach the bound, not stay under it


CHECKS = [
    Check("SIGKILL -> all 20 runs redelivered, p99", "crash.all_redelivered_p99_ms", 2000, "ms"),
    Check("Redis memory per pending run", "memory.redis_bytes_per_pending_run", 330, "bytes"),
    Check("worker RSS under load (memory workload)", "memory.worker_rss_mb", 60, "MB"),
    Check("worker RSS, ActionWorker round-trip run", "targets.flo_rt.rss_mb", 60, "MB"),
    Check("slowest script call, 200,000-run backlog", "backlog.slowest_script_ms", 50, "ms"),
    Check("failover, primary + replica: work flowing again", "failover.pair_flow_ms", 3000, "ms"),
    Check("failover, cluster: work flowing again", "failover.cluster_flow_ms", 6000, "ms"),
    Check("failover, primary + replica: not done, or misfenced", "failover.pair_stranded", 0, ""),
    Check("failover, cluster: not done, or misfenced", "failover.cluster_stranded", 0, ""),
    Check("failover, lagging replica: not done, or misfenced", "failover.lagging_stranded", 0, ""),
    Check("failover, lagging replica: ids or tokens repeated", "failover.lagging_repeated", 0, ""),
    Check("failover at replicated: acknowledged writes lost", "failover.replicated_lost", 0, ""),
    Check("flood, fair: a new key's first run starts, p99", "flood.fair_first_p99_ms", 250, "ms"),
    Check("flood: throughput fair / not fair", "flood.fair_throughput_ratio", 0.9, "x", True),
    Check("fan-out and fan-in / the same runs plain", "fanout.graph_over_plain", 0.7, "x", True),
    Check(
        "process executor / Celery prefork, no-op", "process.noop_process_over_celery", 2, "x", True
    ),
    Check(
        "process executor / Celery prefork, 1 ms CPU",
        "process.cpu_1ms_process_over_celery",
        2,
        "x",
        True,
    ),
]


def _value(results: dict[str, Any], source: str) -> float | None:
    parts = source.split(".")
    stat: dict[str, Any] | None
    if parts[0] == "targets":
        figures = results.get("targets", {}).get("figures", {})
        stat = figures.get(parts[1], {}).get("metrics", {}).get(parts[2])
    else:
        stat = results.get("workloads", {}).get(parts[0], {}).get("metrics", {}).get(parts[1])
    if not stat:
        return None
    median = stat.get("median")
    return None if median is None else float(median)


def judge(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each check that this run measured, with its value and PASS or MISS."""
    out = []
    for check in CHECKS:
        value = _value(results, check.source)
        if value is None:
            continue
        held = value >= check.bound if check.at_least else value <= check.bound
        out.append(
            {
                "title": check.title,
                "value": value,
                "bound": f"{'≥' if check.at_least else '≤'} {check.bound:g} {check.unit}",
                "unit": check.unit,
                "verdict": "PASS" if held else "MISS",
            }
        )
    return out


def table(checks: list[dict[str, Any]]) -> list[str]:
    rows = [("no-regression check", "measured", "bound", "")]
    for c in checks:
        value = f"{c['value']:,.0f}" if c["value"] >= 100 else f"{c['value']:.1f}"
        if c["value"] < 10:
            value = f"{c['value']:.2f}"
        rows.append((c["title"], f"{value} {c['unit']}", c["bound"], c["verdict"]))
    return text_table(rows)
