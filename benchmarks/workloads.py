"""The flo-redis workloads. Each ``run_*`` is one repeat and returns its metrics."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from flo_redis import ActionRegisterOptions, FloClient
from flo_redis._wire.lua import load_all

from ._common import percentile, progress
from ._procs import Child

WORKER = "benchmarks._flo_worker"


@dataclass
class Settings:
    url: str
    quick: bool
    repeats: int = 3  # for the workloads that alternate their passes inside one call
    process_concurrency: int = 2  # the process workload's (benchmarks/process.py)
    celery_python: str | None = None  # the interpreter it runs Celery from (None: find one)

    @property
    def action_n(self) -> int:
        return 3000 if self.quick else 20000

    @property
    def stream_n(self) -> int:
        return 3000 if self.quick else 20000

    @property
    def invoke_seconds(self) -> float:
        return 0.5 if self.quick else 2.0

    @property
    def batch_invoke_n(self) -> int:
        return 10000 if self.quick else 50000

    @property
    def latency_seconds(self) -> float:
        return 1.0 if self.quick else 5.0

    @property
    def crash_trials(self) -> int:
        return 1 if self.quick else 5

    @property
    def memory_n(self) -> int:
        return 2000 if self.quick else 10000

    @property
    def backlog_n(self) -> int:
        return 20000 if self.quick else 200_000


# A metric is (value, unit); NaN or None means "not measured" (with a note).
Metrics = dict[str, Any]


def _namespace() -> str:
    return f"bench-{uuid.uuid4().hex[:10]}"


async def invoke_all(client: FloClient, name: str, n: int, payload: bytes = b"{}") -> list[str]:
    """Create ``n`` runs of ``name`` as fast as the client allows (batch API if present)."""
    ids: list[str] = []
    many = getattr(client.action, "invoke_many", None)
    for start in range(0, n, 1000):
        k = min(1000, n - start)
        if many is not None:
            results = await many(name, [payload] * k)
        else:
            results = []
            for sub in range(0, k, 100):
                results += await asyncio.gather(
                    *(client.action.invoke(name, payload) for _ in range(min(100, k - sub)))
                )
        ids += [r.run_id for r in results]
    return ids


def worker_args(mode: str, url: str, ns: str, name: str, n: int, **extra: Any) -> list[str]:
    args = [mode, "--url", url, "--namespace", ns, "--name", name, "--n", str(n)]
    for key, value in extra.items():
        args += [f"--{key}", str(value)]
    return args


async def _worker_result(child: Child, timeout: float) -> dict[str, Any]:
    while True:
        event = await child.event(timeout)
        if event.get("event") == "result":
            return event


async def run_action(s: Settings) -> Metrics:
    """N pre-invoked runs, one worker process (concurrency 100, no-op handler)."""
    ns, name, n = _namespace(), "noop", s.action_n
    async with FloClient(s.url, namespace=ns) as client:
        await client.action.register(name, options=ActionRegisterOptions())
        ids = await invoke_all(client, name, n)
        child = await Child.start(
            WORKER, *worker_args("action", s.url, ns, name, n), label="worker"
        )
        try:
            await child.event(30)  # ready
            child.sample_rss()
            res = await _worker_result(child, 180)
        finally:
            await child.close()
        last = await client.action.status(ids[-1])
        await client.action.delete(name)
    elapsed = res["end"] - res["first"]
    return {
        "runs_per_s": n / elapsed if elapsed > 0 else float("nan"),
        "worker_rss_mb": child.peak_rss / 2**20,
        "duplicates": res["calls"] - res["unique"],
        "_check": f"last run {last.status.name}; handler calls {res['calls']} for {n} runs",
    }


async def run_invoke(s: Settings) -> Metrics:
    """Invokes one at a time from one client; and the batch API if there is one."""
    ns, name = _namespace(), "noop"
    out: Metrics = {}
    async with FloClient(s.url, namespace=ns) as client:
        await client.action.register(name, options=ActionRegisterOptions())
        for _ in range(200):  # warm the scripts and the connection
            await client.action.invoke(name, b"{}")
        count = 0
        began = time.perf_counter()
        deadline = began + s.invoke_seconds
        while True:
            for _ in range(50):
                await client.action.invoke(name, b"{}")
            count += 50
            now = time.perf_counter()
            if now >= deadline:
                break
        out["single_per_s"] = count / (now - began)
        # The floor for one-at-a-time calls: plain PINGs on the same client's connection.
        count = 0
        began = time.perf_counter()
        deadline = began + s.invoke_seconds / 2
        while True:
            for _ in range(50):
                await client.redis.ping()
            count += 50
            now = time.perf_counter()
            if now >= deadline:
                break
        out["ping_floor_per_s"] = count / (now - began)
        many: Callable[..., Awaitable[Any]] | None = getattr(client.action, "invoke_many", None)
        if many is None:
            out["batch_per_s"] = None
            out["_note"] = "batch invoke: n/a (client.action has no invoke_many)"
        else:
            await many(name, [b"{}"] * 100)
            total = s.batch_invoke_n
            began = time.perf_counter()
            for start in range(0, total, 1000):
                await many(name, [b"{}"] * min(1000, total - start))
            out["batch_per_s"] = total / (time.perf_counter() - began)
        await client.action.delete(name)
    return out


async def run_stream(s: Settings) -> Metrics:
    """A StreamWorker (batch 100, concurrency 100) acking N pre-appended records."""
    ns, name, n = _namespace(), "events", s.stream_n
    async with FloClient(s.url, namespace=ns) as client:
        for start in range(0, n, 100):
            await asyncio.gather(
                *(client.stream.append(name, b"{}") for _ in range(min(100, n - start)))
            )
        child = await Child.start(
            WORKER, *worker_args("stream", s.url, ns, name, n, batch=100), label="stream worker"
        )
        try:
            await child.event(30)
            child.sample_rss()
            res = await _worker_result(child, 180)
        finally:
            await child.close()
    async with aioredis.Redis.from_url(s.url) as raw:  # the stream's keys share its tag
        keys = [k async for k in raw.scan_iter(match=f"*{{{ns}:*", count=1000)]
        if keys:
            await raw.delete(*keys)
    elapsed = res["end"] - res["first"]
    return {
        "records_per_s": n / elapsed if elapsed > 0 else float("nan"),
        "worker_rss_mb": child.peak_rss / 2**20,
        "duplicates": res["calls"] - res["unique"],
    }


async def run_latency(s: Settings) -> Metrics:
    """Idle worker (another process), invokes at 100/s: handler start - invoke call."""
    ns, name = _namespace(), "ping"
    rate = 100
    n = int(rate * s.latency_seconds)
    async with FloClient(s.url, namespace=ns) as client:
        await client.action.register(name, options=ActionRegisterOptions())
        child = await Child.start(
            WORKER, *worker_args("latency", s.url, ns, name, n), label="latency worker"
        )
        try:
            await child.event(30)
            await asyncio.sleep(1.0)  # registered and idle, waiting for work
            began = time.perf_counter()
            for i in range(n):
                due = began + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await client.action.invoke(name, repr(time.time()).encode())
            res = await _worker_result(child, 60)
        finally:
            await child.close()
        await client.action.delete(name)
    lat = res["latencies_ms"]
    return {
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "max_ms": max(lat) if lat else float("nan"),
    }


async def run_crash(s: Settings) -> Metrics:
    """SIGKILL a worker holding runs (timeout 300 s); time until a waiting worker has them."""
    k = 20
    trials: list[float] = []
    per_run: list[float] = []
    note = ""
    for trial in range(s.crash_trials):
        ns, name = _namespace(), "hold"
        async with FloClient(s.url, namespace=ns) as client:
            await client.action.register(
                name, options=ActionRegisterOptions(timeout_ms=300_000, max_retries=3)
            )
            holder = await Child.start(WORKER, *worker_args("hold", s.url, ns, name, k))
            taker: Child | None = None
            try:
                await holder.event(30)
                await invoke_all(client, name, k)
                await holder.event(30)  # held
                taker = await Child.start(
                    WORKER, *worker_args("take", s.url, ns, name, k, timeout=10)
                )
                await taker.event(30)
                await asyncio.sleep(0.5)  # registered and polling
                killed = time.time()
                holder.kill()
                res = await _worker_result(taker, 40)
            finally:
                holder.kill()
                await holder.close()
                if taker is not None:
                    taker.kill()  # its figures are in; the action is deleted next
                    await taker.close()
            with_runs = len(res["arrivals"])
            await client.action.delete(name)
        if res["timed_out"]:
            note = (
                f"not available (liveness not active): trial {trial + 1}, {with_runs} of {k} "
                "runs redelivered within 10 s of the SIGKILL"
            )
            progress(f"crash: {note}")
            break
        delays = [(t - killed) * 1000.0 for t in res["arrivals"]]
        trials.append(max(delays))
        per_run += delays
    if note:
        return {"all_redelivered_p50_ms": None, "all_redelivered_p99_ms": None, "_note": note}
    return {
        "all_redelivered_p50_ms": percentile(trials, 50),
        "all_redelivered_p99_ms": percentile(trials, 99),
        "per_run_p50_ms": percentile(per_run, 50),
        "per_run_p99_ms": percentile(per_run, 99),
        "_trials_ms": trials,
    }


async def _used_memory(raw: aioredis.Redis) -> int:
    info = await raw.info("memory")
    return int(info["used_memory"])


async def run_memory(s: Settings) -> Metrics:
    """Redis bytes per pending and per finished (retained) run; worker RSS under load."""
    ns, name, n = _namespace(), "mem", s.memory_n
    payload = b'{"order": 123456}'
    async with FloClient(s.url, namespace=ns) as client, aioredis.Redis.from_url(s.url) as raw:
        await client.action.register(name, options=ActionRegisterOptions())
        await client.action.invoke(name, payload)  # the queue's keys exist before the baseline
        await asyncio.sleep(0.2)
        child = await Child.start(WORKER, *worker_args("action", s.url, ns, name, 1))
        await child.event(30)
        await _worker_result(child, 60)
        await child.close()
        base = await _used_memory(raw)
        await invoke_all(client, name, n, payload)
        pending = await _used_memory(raw)
        child = await Child.start(WORKER, *worker_args("action", s.url, ns, name, n))
        try:
            await child.event(30)
            child.sample_rss(0.02)
            await _worker_result(child, 180)
        finally:
            await child.close()
        await asyncio.sleep(0.2)
        finished = await _used_memory(raw)
        await client.action.delete(name)
    return {
        "redis_bytes_per_pending_run": (pending - base) / n,
        "redis_bytes_per_finished_run": (finished - base) / n,
        "worker_rss_mb": child.peak_rss / 2**20,
        "_note": f"{len(payload)}-byte input, empty result, default retention (10 000 kept)",
    }


# SLOWLOG keeps calls slower than this (µs) while the backlog workload runs.
SLOWLOG_US = 1000


async def run_backlog(s: Settings) -> Metrics:
    """The slowest script call (SLOWLOG: server time) with N runs waiting: the
    ``invoke_many`` calls that build the backlog, single invokes, a worker claiming and
    completing 5 000 runs on top of it, status, counts and a page of 1 024 pending runs."""
    ns, name, n = _namespace(), "backlog", s.backlog_n
    async with FloClient(s.url, namespace=ns) as client, aioredis.Redis.from_url(s.url) as raw:
        saved = await raw.config_get("slowlog-*")
        await raw.config_set("slowlog-log-slower-than", SLOWLOG_US)
        await raw.config_set("slowlog-max-len", 1024)
        await raw.slowlog_reset()
        client_max = 0.0
        try:
            await client.action.register(name, options=ActionRegisterOptions())
            for start in range(0, n, 1000):
                began = time.perf_counter()
                await client.action.invoke_many(name, [b"{}"] * min(1000, n - start))
                client_max = max(client_max, time.perf_counter() - began)
            ids = []
            for _ in range(200):
                began = time.perf_counter()
                ids.append((await client.action.invoke(name, b"{}")).run_id)
                client_max = max(client_max, time.perf_counter() - began)
            worked = min(5000, n)
            child = await Child.start(WORKER, *worker_args("action", s.url, ns, name, worked))
            try:
                await child.event(30)
                await _worker_result(child, 120)
            finally:
                await child.close()
            for run_id in ids[:50]:
                await client.action.status(run_id)
            await client.action.counts(name)
            await client.action.runs(name, limit=1024)
            slow = await raw.slowlog_get(1024)
        finally:
            for key, value in saved.items():
                await raw.config_set(key, value)
        keys = [k async for k in raw.scan_iter(match=f"*{{{ns}:*", count=1000)]
        if keys:
            await raw.unlink(*keys)
    scripts = [e for e in slow if bytes(e["command"]).upper().startswith((b"EVAL", b"FCALL"))]
    slowest = max(scripts, key=lambda e: int(e["duration"]), default=None)
    names = {lua.sha: name for name, lua in load_all().items()}
    which = "none"
    if slowest is not None:
        # EVALSHA names the SHA; FCALL a function whose name ends in it.
        sha = bytes(slowest["command"]).split()[1].decode(errors="replace")[-40:]
        which = names.get(sha, sha[:12])
    return {
        "slowest_script_ms": int(slowest["duration"]) / 1000.0 if slowest else 0.0,
        "client_slowest_call_ms": client_max * 1000.0,
        "_note": f"{n:,} runs waiting; SLOWLOG (calls over {SLOWLOG_US / 1000:g} ms) holds "
        f"{len(scripts)} script call(s); the slowest: {which}.lua",
    }


WORKLOADS: dict[str, tuple[Callable[[Settings], Awaitable[Metrics]], str]] = {
    "action": (run_action, "action throughput (1 worker process, concurrency 100)"),
    "invoke": (run_invoke, "invoke rate (one client)"),
    "stream": (run_stream, "stream group throughput (StreamWorker, batch 100)"),
    "latency": (run_latency, "pickup latency at 100 invokes/s (idle worker)"),
    "crash": (run_crash, "crash redelivery (SIGKILL -> second worker has all runs)"),
    "memory": (run_memory, "memory (worker RSS, Redis bytes per run)"),
    "backlog": (run_backlog, "slowest script with a 200,000-run backlog"),
}

# Workloads measured once however many repeats are asked for (they repeat inside).
SINGLE_SHOT = {"crash", "backlog", "failover", "flood", "process"}
