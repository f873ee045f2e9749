"""The process workload: plain ``def`` handlers in flo-redis's process executor, its
thread executor and Celery's prefork pool, at the same concurrency.

Two handlers (benchmarks/_process_handlers.py, the same functions for every system): a
no-op, and 1 ms of CPU-bound work (a busy loop until the thread has used 1 ms of CPU).
Each ends with one Redis ``INCR`` that counts it, the same round trip on every system.
For each system and handler: N tasks enqueued first (5,000 no-ops, 3,000 of the 1 ms
handler; ``--quick`` 1,000 and 600), then one worker process started at concurrency C
(``--process-concurrency``, default 2, the machine's cores), and the rate read from the
counter: N-1 runs over the time from the first handler call to the N-th.

- ``process``: ``ActionWorker(client, concurrency=2C, executor=ProcessExecutor(size=C))``:
  C handler processes, as Celery's ``-c C``, and C more runs held ready for them, so a
  process that ends a run starts the next without waiting on Redis (Celery holds 4C
  ahead, its default prefetch)
- ``thread``: ``ActionWorker(client, concurrency=C)``, its default thread executor
- ``celery``: ``celery worker -P prefork -c C`` on a Redis broker, the benchmark's own
  Redis (settings: benchmarks/_process_celery.py)

Each round measures every system once per handler, the order reversed from one round to
the next (``--repeats``, default 3); each figure is the median over the rounds, and the
ratio process / Celery is of the medians, judged against the target of 2x
(benchmarks/checks.py).

Celery runs from this interpreter when it can import Celery; otherwise from a virtual
environment of its own, ``benchmarks/.celery-venv``, made on first use with the Celery pin
of benchmarks/requirements.txt and this interpreter's redis-py and hiredis (its handlers'
counter then costs what flo-redis's does). ``--celery-python PATH`` names another
interpreter; ``--celery-python none`` leaves Celery out.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from flo_redis import ActionRegisterOptions, FloClient

from ._common import progress
from ._process_handlers import HANDLERS, counter_env
from ._procs import Child
from .workloads import invoke_all

TITLE = "plain def handlers: process executor, thread executor, Celery prefork"
NAME = "work"
SIZES = {"noop": 5000, "cpu_1ms": 3000}
QUICK_SIZES = {"noop": 1000, "cpu_1ms": 600}
SYSTEMS = ("process", "thread", "celery")
HERE = Path(__file__).resolve().parent
CELERY_VENV = HERE / ".celery-venv"
PASS_TIMEOUT = 180.0
#: The process executor's runs held per handler process (its own and one ready).
HELD_AHEAD = 2


def celery_pins() -> list[str]:
    """The Celery requirement of benchmarks/requirements.txt, with this interpreter's
    redis-py and hiredis."""
    lines = (HERE / "requirements.txt").read_text().splitlines()
    pins = [x.split("#")[0].strip() for x in lines if x.strip().lower().startswith("celery")]
    if not pins:
        raise RuntimeError("benchmarks/requirements.txt pins no celery")
    return [*pins, f"redis=={version('redis')}", f"hiredis=={version('hiredis')}"]


def _make_celery_venv() -> str:
    python = CELERY_VENV / "bin" / "python"
    if not python.exists():
        progress(f"process: making {CELERY_VENV} for Celery (once)")
        subprocess.run([sys.executable, "-m", "venv", str(CELERY_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *celery_pins()], check=True, stdout=subprocess.DEVNULL)
    return str(python)


def celery_python(choice: str | None) -> tuple[str | None, str]:
    """The interpreter Celery runs from (None: left out), and a note saying which."""
    if choice == "none":
        return None, "celery: left out (--celery-python none)"
    if choice:
        python = choice
    elif importlib.util.find_spec("celery") is not None:
        python = sys.executable
    else:
        try:
            python = _make_celery_venv()
        except (OSError, subprocess.CalledProcessError) as exc:
            return None, f"celery: left out, {CELERY_VENV} could not be made: {exc}"
    code = "import celery, kombu, billiard; print(celery.__version__, kombu.__version__)"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"celery: left out, {python} cannot import it ({why})"
    celery, kombu = out.stdout.split()
    return python, f"celery: Celery {celery}, kombu {kombu}, from {python}"


def _tree_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by process ``pid`` and by its live
    descendants, from /proc (Linux); NaN for both where /proc cannot be read."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return math.nan, math.nan
    for entry in entries:
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(entry)] = int(fields[1])
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    family, grown = {pid}, True
    while grown:
        more = {p for p, parent in parents.items() if parent in family} - family
        family |= more
        grown = bool(more)
    return used.get(pid, math.nan), sum(used.get(p, 0.0) for p in family - {pid})


async def _sample(raw: aioredis.Redis, key: str, worker: Child) -> tuple[float, ...]:
    """(runs counted, the worker's CPU s, its children's, Redis's) now."""
    calls = int(await raw.get(key) or 0)
    own, children = _tree_cpu(worker.pid)
    cpu = await raw.info("cpu")
    return calls, own, children, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


async def _measure(raw: aioredis.Redis, key: str, n: int, worker: Child) -> dict[str, float]:
    """``rate``: runs a second from the first counted call to the ``n``-th; and the CPU
    a run cost (µs) in the worker process, its children and Redis, from the moment the
    first call was seen to the ``n``-th."""
    deadline = time.monotonic() + PASS_TIMEOUT
    samples = []
    for mark in (1, n):
        while await raw.get(f"{key}:{mark}") is None:
            if worker.proc.returncode is not None:
                raise RuntimeError(f"{worker.label} exited early: {await worker.stderr_tail()}")
            if time.monotonic() > deadline:
                calls = int(await raw.get(key) or 0)
                raise TimeoutError(f"{worker.label}: {calls} of {n} calls in {PASS_TIMEOUT:g} s")
            await asyncio.sleep(0.02)
        samples.append(await _sample(raw, key, worker))
    first, last = await raw.get(f"{key}:1"), await raw.get(f"{key}:{n}")
    assert first is not None and last is not None
    out = {"rate": (n - 1) / (float(last) - float(first))}
    (calls0, *cpu0), (calls1, *cpu1) = samples
    for name, a, b in zip(("worker", "children", "redis"), cpu0, cpu1, strict=True):
        out[f"{name}_cpu_us"] = (b - a) / (calls1 - calls0) * 1e6 if calls1 > calls0 else math.nan
    return out


async def _stop(worker: Child) -> None:
    """SIGTERM (each worker's orderly stop, which ends its child processes), then wait."""
    worker.kill(signal.SIGTERM)
    await worker.close(30)


async def _flo_pass(
    url: str, executor: str, handler: str, n: int, concurrency: int
) -> dict[str, float]:
    ns = f"bench-{uuid.uuid4().hex[:10]}"
    key = f"bench:process:{ns}"
    async with FloClient(url, namespace=ns) as client, aioredis.Redis.from_url(url) as raw:
        await client.action.register(NAME, options=ActionRegisterOptions())
        await invoke_all(client, NAME, n)
        args = ["--url", url, "--namespace", ns, "--name", NAME, "--handler", handler]
        args += ["--executor", executor]
        if executor == "process":  # C processes, C more runs held ready (module docstring)
            args += ["--concurrency", str(HELD_AHEAD * concurrency)]
            args += ["--processes", str(concurrency)]
        else:
            args += ["--concurrency", str(concurrency)]
        worker = await Child.start(
            "benchmarks._process_flo", *args, label=executor, env=counter_env(url, key, n)
        )
        try:
            await worker.event(60)  # ready
            return await _measure(raw, key, n, worker)
        finally:
            await _stop(worker)
            await client.action.delete(NAME)
            stale = [k async for k in raw.scan_iter(match=f"*{{{ns}:*", count=1000)]
            await raw.unlink(key, f"{key}:1", f"{key}:{n}", *stale)


async def _celery_pass(
    url: str, python: str, handler: str, n: int, concurrency: int
) -> dict[str, float]:
    queue = f"bench-{uuid.uuid4().hex[:10]}"
    key = f"bench:process:{queue}"
    env = {"FLO_BENCH_BROKER": url, "FLO_BENCH_QUEUE": queue, **counter_env(url, key, n)}
    enqueue = await Child.start(
        "benchmarks._process_celery", "enqueue", "--handler", handler, "--n", str(n),
        label="celery enqueue", python=python, env=env,
    )  # fmt: skip
    try:
        await enqueue.event(120)
    finally:
        await enqueue.close()
    async with aioredis.Redis.from_url(url) as raw:
        worker = await Child.start(
            "celery", "-A", "benchmarks._process_celery", "worker", "-P", "prefork",
            "-c", str(concurrency), "-Q", queue, "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            label="celery", python=python, env=env,
        )  # fmt: skip
        try:
            return await _measure(raw, key, n, worker)
        finally:
            await _stop(worker)
            await raw.unlink(queue, f"_kombu.binding.{queue}", key, f"{key}:1", f"{key}:{n}")


def _median(figures: list[dict[str, float]], key: str) -> float | None:
    values = [f[key] for f in figures if not math.isnan(f[key])]
    return statistics.median(values) if values else None


async def run_process(s: Any) -> dict[str, Any]:
    """Every system on each handler, ``s.repeats`` rounds alternated; medians and ratios."""
    sizes = QUICK_SIZES if s.quick else SIZES
    concurrency = s.process_concurrency
    celery, celery_note = await asyncio.to_thread(celery_python, s.celery_python)
    systems = [x for x in SYSTEMS if x != "celery" or celery is not None]
    notes = [celery_note]
    passes: dict[str, list[dict[str, float]]] = {f"{h}_{x}": [] for h in HANDLERS for x in SYSTEMS}
    for round_no in range(s.repeats):
        order = systems if round_no % 2 == 0 else systems[::-1]
        for handler, n in sizes.items():
            for system in order:
                progress(
                    f"process: {system}, {handler}, {n:,} tasks, concurrency {concurrency} "
                    f"({round_no + 1}/{s.repeats})"
                )
                try:
                    if system == "celery":
                        assert celery is not None
                        figures = await _celery_pass(s.url, celery, handler, n, concurrency)
                    else:
                        figures = await _flo_pass(s.url, system, handler, n, concurrency)
                except (RuntimeError, TimeoutError) as exc:
                    notes.append(f"{system}, {handler}: failed: {str(exc)[-300:]}")
                    continue
                progress(
                    f"process: {system}, {handler}: {figures['rate']:,.0f} runs/s; CPU a run: "
                    + ", ".join(
                        f"{k[:-7]} {v:.0f} µs" for k, v in figures.items() if k.endswith("_cpu_us")
                    )
                )
                passes[f"{handler}_{system}"].append(figures)
    metrics: dict[str, Any] = {}
    cpu: dict[str, dict[str, float]] = {}
    for name, figures in passes.items():
        metrics[f"{name}_runs_per_s"] = _median(figures, "rate")
        if figures:
            cpu[name] = {k: _median(figures, k) for k in figures[0] if k.endswith("_cpu_us")}
    for handler in HANDLERS:
        for other in ("celery", "thread"):
            a, b = (
                metrics[f"{handler}_process_runs_per_s"],
                metrics[f"{handler}_{other}_runs_per_s"],
            )
            metrics[f"{handler}_process_over_{other}"] = a / b if a and b else None
    metrics["_cpu_us_per_run"] = cpu  # medians; in the JSON only
    metrics["_rounds_runs_per_s"] = {k: [f["rate"] for f in v] for k, v in passes.items() if v}
    rounds = ", ".join(
        f"{k} {'/'.join(f'{f:,.0f}' for f in v)}" for k, v in metrics["_rounds_runs_per_s"].items()
    )
    metrics["_note"] = "; ".join(
        [
            f"concurrency {concurrency} (the process executor: {concurrency} processes, "
            f"{HELD_AHEAD * concurrency} runs held), {sizes['noop']:,} / {sizes['cpu_1ms']:,} "
            "tasks, "
            f"medians of {s.repeats} round(s) in alternating order (runs/s by round: {rounds})",
            *notes,
        ]
    )
    return metrics
