"""``flo-redis stats ACTION``: an action's history through the real command, for people and
as JSON, and windows it refuses."""

from __future__ import annotations

import json

import pytest
from cli_command import flo_redis
from cli_runner import with_client
from histories import history


@pytest.fixture
def known(redis_url: str, namespace: str) -> None:
    """Action 'job': 3 runs completed, 2 failed for good, 1 timed out (histories.py)."""
    with_client(redis_url, namespace, history)


def test_stats_as_json_count_the_history(redis_url: str, namespace: str, known: None) -> None:
    done = flo_redis(redis_url, namespace, "stats", "job", "--since", "30m", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["action"], data["namespace"], data["since_minutes"]) == ("job", namespace, 30)
    assert (data["completed"], data["failed"], data["retried"]) == (3, 3, 0)
    assert len(data["points"]) == 30
    assert sum(p["completed"] for p in data["points"]) == 3
    assert data["pickup_ms"]["count"] == data["duration_ms"]["count"] == 5
    assert data["pickup_ms"]["p50"] is not None
    buckets = len(data["bucket_edges_ms"]) + 1
    assert all(len(p["pickup"]) == buckets for p in data["points"] if p["completed"])


def test_stats_for_people(redis_url: str, namespace: str, known: None) -> None:
    done = flo_redis(redis_url, namespace, "stats", "job", "--wide")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"action 'job' in '{namespace}', last 6h" in out
    assert "completed 3" in out and "failed 3" in out and "retried 0" in out
    assert "pickup   p50" in out and "duration p50" in out
    assert "'job' every 15m (UTC)" in out  # 6 hours in at most 24 rows
    every = flo_redis(redis_url, namespace, "stats", "job", "--since", "10m", "--every", "1m")
    assert "'job' every 1m (UTC)" in every.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--since", "73h"), "from 1 minute to 72 hours"),
        (("--since", "0m"), "from 1 minute to 72 hours"),
        (("--since", "6 hours"), "30m, 6h, 72h"),
        (("--since", "soon"), "30m, 6h, 72h"),
        (("--every", "x"), "is not a span"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else v,
)
def test_a_window_it_cannot_read_is_refused(
    redis_url: str, namespace: str, known: None, args: tuple[str, ...], says: str
) -> None:
    done = flo_redis(redis_url, namespace, "stats", "job", *args)
    assert done.returncode == 2
    assert says in done.stderr and done.stdout == ""
