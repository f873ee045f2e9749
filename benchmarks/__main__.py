"""``python -m benchmarks``: measure flo-redis; ``--compare`` adds peers side by side.

Starts a private redis-server on a free port unless ``REDIS_URL`` is set, runs each
workload ``--repeats`` times (default 3; ``--quick``: one short run), shows progress on
stderr, prints medians and ranges, and writes ``benchmarks/results/latest.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from . import checks
from ._common import machine_info, private_redis, progress, summary
from .compare import ORDER, run_compare
from .durability import TITLE as DURABILITY_TITLE
from .durability import run_durability
from .failover import TITLE as FAILOVER_TITLE
from .failover import run_failover
from .fanout import TITLE as FANOUT_TITLE
from .fanout import run_fanout
from .flood import TITLE as FLOOD_TITLE
from .flood import run_flood
from .process import TITLE as PROCESS_TITLE
from .process import run_process
from .scale import run_scale
from .scale import table as scale_table
from .targets import Sizes, run_targets
from .targets import table as targets_table
from .workloads import SINGLE_SHOT, Settings
from .workloads import WORKLOADS as FLO_WORKLOADS

# The workloads, then a failover under load and the cost of a durability level (each on
# servers of its own), fairness under a flood, and plain handlers in processes beside
# Celery's prefork pool, and a fan-out and fan-in of dependent runs.
WORKLOADS = {
    **FLO_WORKLOADS,
    "failover": (run_failover, FAILOVER_TITLE),
    "durability": (run_durability, DURABILITY_TITLE),
    "flood": (run_flood, FLOOD_TITLE),
    "process": (run_process, PROCESS_TITLE),
    "fanout": (run_fanout, FANOUT_TITLE),
}

RESULTS = Path(__file__).resolve().parent / "results"

UNITS = {
    "runs_per_s": "runs/s",
    "single_per_s": "invokes/s",
    "batch_per_s": "invokes/s",
    "ping_floor_per_s": "PINGs/s",
    "records_per_s": "records/s",
    "worker_rss_mb": "MB",
    "duplicates": "",
}


def unit_of(metric: str) -> str:
    if metric in UNITS:
        return UNITS[metric]
    if metric.endswith("runs_per_s"):
        return "runs/s"
    if metric.endswith("_ms"):
        return "ms"
    if metric.startswith("redis_bytes"):
        return "bytes"
    return ""


def fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if value == int(value) and abs(value) < 100:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


# What --compare runs: flo-redis beside its baselines, the no-regression checks, the
# scale-out curve and the peers. Plain ``python -m benchmarks`` runs the workloads.
EXTRA = ["targets", "scale", "compare"]
COMPARE_SET = ["targets", "crash", "memory", "backlog", "scale", "compare"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    names = [*WORKLOADS, *EXTRA]
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure flo-redis (and, with --compare, peers side by side).",
    )
    parser.add_argument("--quick", action="store_true", help="one short repeat of each")
    parser.add_argument("--repeats", type=int, default=None, help="repeats (default 3)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these (repeatable or comma-separated): {', '.join(names)}",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run the side-by-side action workload on the raw floor and peers",
    )
    parser.add_argument(
        "--compare-n", type=int, default=None, help="tasks per side-by-side run (default 10000)"
    )
    parser.add_argument(
        "--targets-n",
        type=int,
        default=None,
        help="tasks per throughput run beside the baselines (default 20000)",
    )
    parser.add_argument(
        "--peer-repeats",
        type=int,
        default=1,
        help="runs of each peer in the side-by-side table (default 1)",
    )
    parser.add_argument(
        "--scale-n",
        type=int,
        default=None,
        help="tasks per point of the scale-out curve (default 10000)",
    )
    parser.add_argument(
        "--process-concurrency",
        type=int,
        default=2,
        help="the process workload's concurrency, every system alike (default 2)",
    )
    parser.add_argument(
        "--celery-python",
        default=None,
        metavar="PATH",
        help="the interpreter the process workload runs Celery from; 'none' leaves Celery "
        "out (default: this one if it has Celery, else benchmarks/.celery-venv, made once)",
    )
    parser.add_argument(
        "--flush-ok",
        action="store_true",
        help="with REDIS_URL and --compare: allow flushing databases 1-9 of that Redis",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "latest.json", help="where the JSON goes"
    )
    args = parser.parse_args(argv)
    only = [x.strip() for item in args.only for x in item.split(",") if x.strip()]
    unknown = [x for x in only if x not in names]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {names}")
    if only:
        args.selected = [w for w in names if w in only]
    elif args.compare:
        args.selected = COMPARE_SET
    else:
        args.selected = list(WORKLOADS)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.compare_n is None:
        args.compare_n = 2000 if args.quick else 10000
    if args.targets_n is None:
        args.targets_n = 3000 if args.quick else 20000
    if args.scale_n is None:
        args.scale_n = 2000 if args.quick else 10000
    return args


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


async def run_workloads(args: argparse.Namespace, url: str) -> dict[str, Any]:
    settings = Settings(
        url=url,
        quick=args.quick,
        repeats=args.repeats,
        process_concurrency=args.process_concurrency,
        celery_python=args.celery_python,
    )
    out: dict[str, Any] = {}
    for name in args.selected:
        if name in EXTRA:
            continue
        fn, title = WORKLOADS[name]
        repeats = 1 if name in SINGLE_SHOT else args.repeats
        runs: list[dict[str, Any]] = []
        error = None
        for rep in range(repeats):
            progress(f"{name}: {title} run {rep + 1}/{repeats} ...")
            began = time.monotonic()
            try:
                metrics = await fn(settings)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                progress(f"{name}: FAILED: {error}")
                traceback.print_exc(file=sys.stderr)
                break
            runs.append(metrics)
            shown = ", ".join(
                f"{k} {fmt(v)}"
                for k, v in metrics.items()
                if not k.startswith("_") and isinstance(v, int | float)
            )
            progress(f"{name}: {shown or 'done'} ({time.monotonic() - began:.1f} s)")
        entry: dict[str, Any] = {"title": title, "repeats": len(runs), "metrics": {}}
        if error:
            entry["error"] = error
        keys = [k for k in (runs[0] if runs else {}) if not k.startswith("_")]
        for key in keys:
            values = [r.get(key) for r in runs]
            nums = [float(v) for v in values if isinstance(v, int | float)]
            entry["metrics"][key] = {"unit": unit_of(key), **summary(nums)}
        notes = sorted({str(r[k]) for r in runs for k in r if k in ("_note", "_check")})
        if notes:
            entry["notes"] = notes
        extra = {k: r[k] for r in runs for k in r if k.startswith("_") and k not in ("_note",)}
        if extra:
            entry["detail"] = extra
        out[name] = entry
    return out


def print_workloads(workloads: dict[str, Any]) -> None:
    print()
    rows = [("workload", "metric", "median", "range (min-max)", "unit")]
    for name, entry in workloads.items():
        if entry.get("error"):
            rows.append((name, "error", entry["error"][:60], "", ""))
        for metric, stat in entry["metrics"].items():
            spread = f"{fmt(stat['min'])}-{fmt(stat['max'])}" if entry["repeats"] > 1 else "(1 run)"
            if stat["median"] is None:
                spread = ""
            rows.append((name, metric, fmt(stat["median"]), spread, stat["unit"]))
    widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
    for i, row in enumerate(rows):
        print("  ".join(str(c).ljust(widths[j]) for j, c in enumerate(row)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for name, entry in workloads.items():
        for note in entry.get("notes", []):
            print(f"  {name}: {note}")


def print_table(results: dict[str, Any]) -> None:
    m = results["machine"]
    print()
    print(
        f"flo-redis benchmarks — {m['nproc']} cores, {m['cpu_model']}, Python {m['python']}, "
        f"Redis {m['redis']}; load average at start {m['loadavg_start']}"
    )
    if results.get("targets"):
        print()
        for line in targets_table(results["targets"], results["settings"]["repeats"]):
            print(line)
    if results["checks"]:
        print()
        for line in checks.table(results["checks"]):
            print(line)
    if results.get("scale"):
        print()
        for line in scale_table(results["scale"]):
            print(line)
    if results["workloads"]:
        print_workloads(results["workloads"])
    compare = results.get("compare")
    if compare:
        print()
        print(
            "side by side: N pre-enqueued no-op tasks, one worker process, "
            "first to N-th handler call"
        )
        rows = [("queue", "tasks/s (median)", "range", "x flo-redis", "notes")]
        for name in ORDER:
            info = compare.get(name)
            if info is None:
                continue
            stat = info.get("tasks_per_s")
            if stat:
                ratio = info.get("ratio_to_flo")
                note = f"{info.get('version')}; {info.get('note')}; n={info.get('n')}"
                if info.get("duplicates"):
                    note += f"; {info['duplicates']} duplicate(s)"
                if info.get("failures"):
                    note += f"; {len(info['failures'])} run(s) failed or hung"
                rows.append(
                    (
                        name,
                        fmt(stat["median"]),
                        f"{fmt(stat['min'])}-{fmt(stat['max'])}",
                        f"{ratio:.2f}" if ratio else "n/a",
                        note,
                    )
                )
            else:
                detail = str(info.get("detail", "")).splitlines()
                rows.append((name, info.get("status", "?"), "", "", detail[-1] if detail else ""))
        widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
        for i, row in enumerate(rows):
            print("  ".join(str(c).ljust(widths[j]) for j, c in enumerate(row)).rstrip())
            if i == 0:
                print("  ".join("-" * w for w in widths))


async def amain(args: argparse.Namespace) -> int:
    external = os.environ.get("REDIS_URL")
    flushes = {"compare", "targets", "scale"} & set(args.selected)
    if external and flushes and not args.flush_ok:
        print(
            f"{', '.join(sorted(flushes))} flush databases 1-9 of the Redis they use; with "
            "REDIS_URL set, pass --flush-ok to allow that",
            file=sys.stderr,
        )
        return 2
    server = None
    if external:
        url = external
        progress(f"using REDIS_URL {url}")
    else:
        server = private_redis()
        url = server.url
        progress(f"started redis-server on {url}")
    try:
        async with aioredis.Redis.from_url(url) as r:
            version = str((await r.info("server"))["redis_version"])
        results: dict[str, Any] = {
            "machine": {**machine_info(version), "loadavg_start": loadavg()},
            "settings": {"quick": args.quick, "repeats": args.repeats, "redis_url": url},
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        load = results["machine"]["loadavg_start"]
        if load and load[0] > 0.5:
            progress(f"note: load average {load[0]:.2f} at start; figures may be low")
        if "targets" in args.selected:
            sizes = Sizes(n=args.targets_n)
            if args.quick:
                sizes = Sizes(n=args.targets_n, seconds=0.3, pickup_seconds=0.5)
            results["targets"] = await run_targets(url, args.repeats, sizes)
        results["workloads"] = await run_workloads(args, url)
        results["checks"] = checks.judge(results)
        if "scale" in args.selected:
            results["scale"] = await run_scale(url, args.scale_n)
        if "compare" in args.selected:
            results["compare"] = await run_compare(url, args.peer_repeats, args.compare_n)
        results["machine"]["loadavg_end"] = loadavg()
    finally:
        if server is not None:
            server.discard()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    print(f"\nwritten: {args.out}")
    failed = [n for n, e in results["workloads"].items() if e.get("error")]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
