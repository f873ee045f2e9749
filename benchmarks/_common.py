"""Shared helpers: a private redis-server, statistics, progress lines, process memory."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from flo_redis.testing import RedisServer, RedisServerNotFound

_T0 = time.monotonic()


def progress(message: str) -> None:
    """One progress line on stderr, with the seconds since the run began."""
    print(f"[bench {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


def private_redis() -> RedisServer:
    """A private redis-server for the run (no persistence), or exit saying how to get one."""
    try:
        return RedisServer().start()
    except RedisServerNotFound as exc:
        raise SystemExit(f"{exc} (or set REDIS_URL)") from exc


def script_times(entries: list[dict[str, Any]]) -> dict[bytes, list[int]]:
    """The ``SLOWLOG`` durations (µs) of script calls by the script's SHA: ``EVALSHA``,
    and ``FCALL`` of a function whose name ends in it (the log also holds the commands
    scripts run, which are left out)."""
    by_sha: dict[bytes, list[int]] = {}
    for entry in entries:
        words = entry["command"].split()
        if words[0].lower() in (b"evalsha", b"fcall"):
            by_sha.setdefault(words[1][-40:], []).append(int(entry["duration"]))
    return by_sha


def with_db(url: str, db: int) -> str:
    """``url`` pointing at database ``db`` (replacing any database it names)."""
    scheme, rest = url.split("://", 1)
    if scheme == "unix":
        base = url.split("?", 1)[0]
        return f"{base}?db={db}"
    hostpart = rest.split("/", 1)[0].split("?", 1)[0]
    return f"{scheme}://{hostpart}/{db}"


def rss_bytes(pid: int) -> int | None:
    """A process's resident set size (VmRSS), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary(values: list[float]) -> dict[str, Any]:
    """Median and range of repeated measurements (NaN-free values only)."""
    clean = [v for v in values if v == v]
    if not clean:
        return {"values": values, "median": None, "min": None, "max": None}
    return {
        "values": values,
        "median": statistics.median(clean),
        "min": min(clean),
        "max": max(clean),
    }


def machine_info(redis_version: str) -> dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "redis": redis_version,
        "platform": platform.platform(),
    }


def child_env() -> dict[str, str]:
    """The environment for benchmark subprocesses: this checkout importable."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def text_table(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as aligned text lines, a rule under the first (the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for i, row in enumerate(rows):
        out.append("  ".join(c.ljust(widths[j]) for j, c in enumerate(row)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out
