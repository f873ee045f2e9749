"""flo-redis beside its baselines: each figure as a ratio of a raw redis-py baseline.

Every measurement is its own subprocess (benchmarks/baselines.py, or the idle flo worker
of benchmarks/_flo_worker.py for pickup) on database 1, flushed before each run. In each
repeat a baseline and its flo-redis counterpart run back to back, so both see the same
machine; the medians over the repeats are compared with the targets of :data:`TARGETS`
and reported as PASS or MISS (reported, never asserted).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from flo_redis import ActionRegisterOptions, FloClient

from ._common import percentile, progress, summary, text_table, with_db
from ._procs import Child

DB = 1


@dataclass(frozen=True)
class Sizes:
    """How big each measurement is (``--quick`` and ``--targets-n`` shrink them)."""

    n: int = 20000  # tasks per throughput run
    seconds: float = 2.0  # per one-at-a-time rate run
    pickup_seconds: float = 4.0  # at PICKUP_RATE invokes/s
    concurrency: int = 100


PICKUP_RATE = 100


@dataclass(frozen=True)
class Run:
    """One measurement: ``name`` of benchmarks/baselines.py with a handler, or pickup."""

    key: str
    label: str
    kind: str  # "throughput", "rate" or "pickup"
    name: str
    handler: str = "roundtrip"


RUNS = [
    Run("floor", "raw BLMPOP COUNT 100 + one pipeline per batch (handlers' INCRs)", "throughput",
        "floor"),
    Run("floor_own", "raw BLMPOP COUNT 100, each handler its own round trip", "throughput",
        "floor-own"),
    Run("bare_loop", "bare asyncio loop, no queue, round-trip handler", "throughput",
        "bare-loop"),
    Run("flo_noop", "flo ActionWorker, no-op handler", "throughput", "flo-action", "noop"),
    Run("flo_rt", "flo ActionWorker, round-trip handler", "throughput", "flo-action"),
    Run("xreadgroup", "raw XREADGROUP COUNT 100 + one XACK per batch", "throughput",
        "xreadgroup", "noop"),
    Run("flo_stream", "flo StreamWorker, batch 100", "throughput", "flo-stream", "noop"),
    Run("evalsha", "bare EVALSHA of `return 1`, one at a time", "rate", "evalsha"),
    Run("flo_invoke", "flo invoke, one at a time", "rate", "flo-invoke"),
    Run("invoke_cmds", "the invoke's Redis commands alone, kept connection", "rate",
        "invoke-commands"),
    Run("keys_return", "`return 1` with the invoke's KEYS and ARGV, kept connection", "rate",
        "keys-return"),
    Run("blmove", "raw BLMOVE consumer, idle", "pickup", "blmove"),
    Run("flo_pickup", "flo ActionWorker, idle", "pickup", "flo"),
]  # fmt: skip
BY_KEY = {r.key: r for r in RUNS}


@dataclass(frozen=True)
class Target:
    """``flo`` / ``base`` on ``metric``, against ``bound`` (``at_most``: lower is better)."""

    title: str
    flo: str
    base: str
    metric: str
    bound: float | None
    at_most: bool = False


TARGETS = [
    Target("pickup p50 (idle, one at a time)", "flo_pickup", "blmove", "p50_ms", 1.3, True),
    Target("pickup p99 (idle, one at a time)", "flo_pickup", "blmove", "p99_ms", 2.0, True),
    Target("ActionWorker no-op vs the floor", "flo_noop", "floor", "rate", 1.0),
    Target("ActionWorker round-trip handler vs bare loop", "flo_rt", "bare_loop", "rate", 0.85),
    Target("ActionWorker round-trip handler vs the floor", "flo_rt", "floor", "rate", None),
    Target("ActionWorker no-op vs BLMPOP, own round trips", "flo_noop", "floor_own", "rate", None),
    Target("StreamWorker vs XREADGROUP + XACK", "flo_stream", "xreadgroup", "rate", 1.0),
    Target("single invoke vs bare EVALSHA", "flo_invoke", "evalsha", "rate", 0.9),
    Target("the invoke's commands alone vs bare EVALSHA", "invoke_cmds", "evalsha", "rate", None),
    Target("single invoke vs its commands alone", "flo_invoke", "invoke_cmds", "rate", None),
]

# Each repeat runs these groups in order; within a group the baseline goes first on odd
# repeats and last on even ones, so a drift in the machine's load does not favour a side.
GROUPS = [
    ["blmove", "flo_pickup"],
    ["floor", "floor_own", "bare_loop", "flo_noop", "flo_rt"],
    ["xreadgroup", "flo_stream"],
    ["evalsha", "keys_return", "invoke_cmds", "flo_invoke"],
]


async def _flush(url: str) -> None:
    async with aioredis.Redis.from_url(url) as r:
        await r.flushdb()


async def _result(child: Child, timeout: float) -> dict[str, Any]:
    while True:
        event = await child.event(timeout)
        if event.get("event") == "result":
            return event


async def _measured(run: Run, url: str, sizes: Sizes) -> dict[str, Any]:
    if run.kind == "pickup":
        return await _pickup(run, url, sizes)
    args = ["--url", url, "--n", str(sizes.n), "--concurrency", str(sizes.concurrency)]
    args += ["--handler", run.handler, "--seconds", str(sizes.seconds)]
    child = await Child.start("benchmarks.baselines", run.name, *args, label=run.key)
    child.sample_rss()
    try:
        event = await _result(child, 180)
    finally:
        await child.close()
    got = {"rate": float(event["rate"]), "rss_mb": child.peak_rss / 2**20}
    if event.get("user_us") is not None:  # throughput: the process's CPU time per task
        got["cpu_us"] = float(event["user_us"]) + float(event["sys_us"])
    return got


async def _pickup(run: Run, url: str, sizes: Sizes) -> dict[str, Any]:
    n = int(PICKUP_RATE * sizes.pickup_seconds)
    if run.name == "blmove":
        child = await Child.start(
            "benchmarks.baselines", "blmove", "--url", url, "--n", str(n), label=run.key
        )
        raw = aioredis.Redis.from_url(url)

        async def push() -> None:
            await raw.lpush("bench:queue", repr(time.time()).encode())
    else:
        client = FloClient(url, namespace="bench")
        await client.connect()
        await client.action.register("ping", options=ActionRegisterOptions())
        args = ["--url", url, "--namespace", "bench", "--name", "ping", "--n", str(n)]
        child = await Child.start("benchmarks._flo_worker", "latency", *args, label=run.key)

        async def push() -> None:
            await client.action.invoke("ping", repr(time.time()).encode())

    try:
        await child.event(30)  # ready
        await asyncio.sleep(1.0)  # connected and idle, waiting for work
        began = time.perf_counter()
        for i in range(n):
            delay = began + i / PICKUP_RATE - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await push()
        event = await _result(child, 60)
    finally:
        await child.close()
        if run.name == "blmove":
            await raw.aclose()
        else:
            await client.close()
    lat = [float(x) for x in event["latencies_ms"]]
    return {"p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "max_ms": max(lat)}


async def run_targets(url: str, repeats: int, sizes: Sizes) -> dict[str, Any]:
    """Every run of :data:`RUNS` ``repeats`` times; medians, ratios and PASS/MISS."""
    db_url = with_db(url, DB)
    samples: dict[str, list[dict[str, Any]]] = {r.key: [] for r in RUNS}
    errors: dict[str, str] = {}
    for rep in range(repeats):
        for group in GROUPS:
            order = group if rep % 2 == 0 else list(reversed(group))
            for key in order:
                if key in errors:
                    continue
                run = BY_KEY[key]
                await _flush(db_url)
                progress(f"targets: {key} run {rep + 1}/{repeats} ...")
                try:
                    got = await _measured(run, db_url, sizes)
                except Exception as exc:  # a failed run is reported, not fatal
                    errors[key] = f"{type(exc).__name__}: {exc}"[-400:]
                    progress(f"targets: {key} FAILED: {errors[key]}")
                    continue
                samples[key].append(got)
                progress(f"targets: {key}: " + ", ".join(f"{k} {v:,.2f}" for k, v in got.items()))
    await _flush(db_url)
    figures: dict[str, Any] = {}
    for run in RUNS:
        metrics = {
            m: summary([float(s[m]) for s in samples[run.key]])
            for m in (samples[run.key][0] if samples[run.key] else {})
        }
        figures[run.key] = {"label": run.label, "handler": run.handler, "metrics": metrics}
        if run.key in errors:
            figures[run.key]["error"] = errors[run.key]
    return {"figures": figures, "targets": [_judge(t, figures) for t in TARGETS]}


def _judge(t: Target, figures: dict[str, Any]) -> dict[str, Any]:
    flo = figures[t.flo]["metrics"].get(t.metric, {}).get("median")
    base = figures[t.base]["metrics"].get(t.metric, {}).get("median")
    ratio = flo / base if flo is not None and base else None
    verdict = "info"
    if t.bound is not None:
        if ratio is None:
            verdict = "n/a"
        elif t.at_most:
            verdict = "PASS" if ratio <= t.bound else "MISS"
        else:
            verdict = "PASS" if ratio >= t.bound else "MISS"
    bound = None if t.bound is None else ("≤ " if t.at_most else "≥ ") + f"{t.bound:g}x"
    return {
        "title": t.title,
        "flo": t.flo,
        "base": t.base,
        "metric": t.metric,
        "flo_value": flo,
        "base_value": base,
        "ratio": ratio,
        "target": bound,
        "verdict": verdict,
    }


def _figure(value: float | None, metric: str) -> str:
    if value is None:
        return "n/a"
    if metric.endswith("_ms"):
        return f"{value:.2f} ms"
    if metric.endswith("_us"):
        return f"{value:.1f} us"
    return f"{value:,.0f}/s"


def table(result: dict[str, Any], repeats: int) -> list[str]:
    """The targets table and every figure behind it, as printed lines."""
    figures = result["figures"]
    lines = [
        f"flo-redis beside its baselines (medians of {repeats} run(s), each run its own "
        "process; ratio = flo-redis / baseline)"
    ]
    rows = [("measure", "baseline", "flo-redis", "ratio", "target", "")]
    for t in result["targets"]:
        ratio = f"{t['ratio']:.2f}x" if t["ratio"] is not None else "n/a"
        rows.append(
            (
                t["title"],
                _figure(t["base_value"], t["metric"]),
                _figure(t["flo_value"], t["metric"]),
                ratio,
                t["target"] or "",
                t["verdict"] if t["verdict"] != "info" else "(info)",
            )
        )
    lines += text_table(rows)
    lines.append("")
    rows = [("run", "handler", "figure", "median", "range (min-max)")]
    for key, fig in figures.items():
        run = BY_KEY[key]
        if fig.get("error"):
            rows.append((fig["label"], "", "error", fig["error"][:60], ""))
            continue
        handler = run.handler if run.kind == "throughput" else ""
        for metric, stat in fig["metrics"].items():
            if metric in ("rss_mb", "max_ms"):
                continue
            spread = f"{_figure(stat['min'], metric)} - {_figure(stat['max'], metric)}"
            rows.append((fig["label"], handler, metric, _figure(stat["median"], metric), spread))
    lines += text_table(rows)
    return lines
