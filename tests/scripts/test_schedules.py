"""Schedules: each occurrence fires exactly once whichever workers are up (three worker
processes, one SIGKILLed), missed occurrences fire once late (or each, when asked),
the fire script refuses what is not due and stale advances, schedules are listed and
removed by name, and bad input is refused with a typed error before anything is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import redis.asyncio as aioredis
from polling import eventually

from flo_redis import ActionContext, FloClient, RunStatus
from flo_redis._wire.gateway import SCHEDULE_DUE, SCHEDULE_FIRE
from flo_redis._wire.keys import action_keys, run_id_prefix
from flo_redis._wire.status import Status
from flo_redis.actions.schedules import Missed, Schedule, check_cron, fire_due
from flo_redis.errors import NotFoundError, ValidationError

HERE = Path(__file__).resolve().parents[1] / "support"
SECOND = timedelta(seconds=1)


async def occurrences(raw: aioredis.Redis, namespace: str, action: str) -> dict[int, str]:
    """Each fired occurrence (ms) -> its run id: the occurrence is the run's idempotency key."""
    keys = action_keys(namespace, action)
    prefix = f"schedule:{action}:"
    found = await raw.hgetall(keys.idempotency)
    return {
        int(k.decode().removeprefix(prefix)): v.decode()
        for k, v in found.items()
        if k.decode().startswith(prefix)
    }


@contextlib.contextmanager
def worker_processes(
    url: str, namespace: str, action: str, n: int
) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "worker_proc.py"),
                url,
                namespace,
                action,
                "done",
                "2",
                "30000",
            ],
            cwd=HERE,
        )
        for _ in range(n)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.mark.slow
async def test_each_occurrence_fires_once_across_three_workers_while_one_is_killed(
    redis_url: str, client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("tick")
    await client.action.schedule("tick", SECOND, input=b"beat", missed=Missed.ALL)
    with worker_processes(redis_url, namespace, "tick", 3) as procs:
        await eventually(
            lambda: occurrences(raw, namespace, "tick"), lambda o: len(o) >= 3, timeout=60
        )
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        fired = len(await occurrences(raw, namespace, "tick"))
        await eventually(
            lambda: occurrences(raw, namespace, "tick"), lambda o: len(o) >= fired + 4, timeout=60
        )
        await client.action.unschedule("tick")
        fired_runs = await occurrences(raw, namespace, "tick")

        async def all_completed() -> bool:
            statuses = [await client.action.status(r) for r in fired_runs.values()]
            return all(s.status == RunStatus.COMPLETED for s in statuses)

        await eventually(all_completed, timeout=60)

    dues = sorted(fired_runs)
    assert dues == [dues[0] + 1000 * i for i in range(len(dues))]  # every occurrence, no gap
    assert len(set(fired_runs.values())) == len(dues)  # one run each
    keys = action_keys(namespace, "tick")
    assert await raw.hlen(keys.runs) == len(dues)  # and no other run


@pytest.mark.slow
async def test_missed_occurrences_fire_once_late_by_default(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("late")
    await client.action.register("each")
    once = await client.action.schedule("late", SECOND)
    every = await client.action.schedule("each", SECOND, missed="all")
    keys = action_keys(namespace, "late")

    async def server_ms() -> int:
        return (await SCHEDULE_DUE(client.session, keys, [1, 0])).now_ms

    # No worker is up while three occurrences pass.
    await eventually(server_ms, lambda now: now >= once.next_due_ms + 2500, timeout=30)
    assert await fire_due(client.session, "late") == 1
    assert await fire_due(client.session, "late") == 0
    (after,) = await client.action.schedules("late")
    assert after.next_due_ms > await server_ms() - 1000  # skipped to the next after now

    assert every.next_due_ms <= once.next_due_ms + 1000
    fired = sum([await fire_due(client.session, "each") for _ in range(6)])
    assert fired >= 3  # one run per missed occurrence
    assert len(await occurrences(raw, namespace, "each")) == fired


async def test_the_fire_script_refuses_an_occurrence_not_yet_due_and_a_stale_advance(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("hourly")
    schedule = await client.action.schedule("hourly", "0 * * * *", timezone="Europe/Paris")
    keys = action_keys(namespace, "hourly")
    prefix = run_id_prefix("hourly")
    due = schedule.next_due_ms
    later = due + 3_600_000

    not_due = await SCHEDULE_FIRE(client.session, keys, [prefix, "hourly", due, later])
    assert not_due.status == Status.CONFLICT
    stale = await SCHEDULE_FIRE(client.session, keys, [prefix, "hourly", due - 3_600_000, due])
    assert stale.status == Status.STALE
    backwards = await SCHEDULE_FIRE(client.session, keys, [prefix, "hourly", due, due])
    assert backwards.status == Status.OUT_OF_RANGE
    assert await raw.hlen(keys.runs) == 0
    (unchanged,) = await client.action.schedules("hourly")
    assert unchanged.next_due_ms == due


async def test_schedules_are_listed_replaced_and_removed_by_name(client: FloClient) -> None:
    await client.action.register("report")
    await client.action.register("cleanup")
    # Half a day away in its time zone, so "often" (every 5 minutes) is always due first.
    hour = (datetime.now(ZoneInfo("America/New_York")).hour + 12) % 24
    cron = f"30 {hour} * * *"
    daily = await client.action.schedule(
        "report", cron, input=b"{}", name="daily", timezone="America/New_York"
    )
    await client.action.schedule("report", timedelta(minutes=5), name="often")
    await client.action.schedule("cleanup", "0 3 * * *")

    assert [(s.action, s.name) for s in await client.action.schedules()] == [
        ("cleanup", "cleanup"),
        ("report", "often"),
        ("report", "daily"),
    ]
    again = await client.action.schedule(
        "report", cron, input=b"{}", name="daily", timezone="America/New_York"
    )
    assert again == daily  # the same schedule keeps its next occurrence
    assert daily.cron == cron and daily.every is None and daily.input == b"{}"

    replaced = await client.action.schedule("report", "30 8 * * *", name="daily")
    assert replaced.cron == "30 8 * * *" and replaced.timezone == "UTC"

    await client.action.unschedule("report", "often")
    await client.action.unschedule("cleanup")
    assert [s.name for s in await client.action.schedules()] == ["daily"]
    with pytest.raises(NotFoundError, match="has no schedule 'often'"):
        await client.action.unschedule("report", "often")


@pytest.mark.parametrize(
    ("action", "spec", "extra", "error", "match"),
    [
        ("known", "61 * * * *", {}, ValidationError, "not a cron expression"),
        ("known", "every day", {}, ValidationError, "not a cron expression"),
        ("known", "30 2 31 2 *", {}, ValidationError, "never matches a date; check its day"),
        ("known", "0 0 31 4,6,9,11 *", {}, ValidationError, "never matches a date"),
        ("known", "* * * * *", {"timezone": "Mars/Olympus"}, ValidationError, "unknown time zone"),
        ("known", timedelta(milliseconds=200), {}, ValidationError, "at least a second"),
        ("known", 60, {}, ValidationError, "cron expression .str. or an interval"),
        ("known", "* * * * *", {"missed": "never"}, ValidationError, "missed must be"),
        ("known", "* * * * *", {"name": "a{b}"}, ValidationError, "braces"),
        ("unknown", "* * * * *", {}, NotFoundError, "not registered"),
    ],
)
async def test_bad_schedules_are_refused_before_anything_is_written(
    client: FloClient,
    action: str,
    spec: object,
    extra: dict[str, str],
    error: type[Exception],
    match: str,
) -> None:
    await client.action.register("known")
    with pytest.raises(error, match=match):
        await client.action.schedule(action, spec, **extra)  # type: ignore[arg-type]
    assert await client.action.schedules() == []


@pytest.mark.slow
async def test_worker_cron_registers_and_schedules_its_handler(client: FloClient) -> None:
    worker = client.new_action_worker(worker_id="cron-worker", block_ms=200)
    seen: list[bytes] = []

    @worker.cron(SECOND, input=b"ping")
    async def heartbeat(ctx: ActionContext) -> None:
        seen.append(ctx.input())

    with pytest.raises(ValidationError, match="unknown time zone"):
        worker.cron("* * * * *", timezone="Nowhere/Else")
    task = asyncio.create_task(worker.start())
    try:
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n >= 2, timeout=30)
        (schedule,) = await client.action.schedules("heartbeat")
        assert schedule.every == SECOND
    finally:
        worker.stop()
        await task
    assert set(seen) == {b"ping"}


@pytest.mark.parametrize("expression", ["30 2 31 2 *", "* * 30 2 *", "0 0 31 4,6,9,11 *"])
async def test_worker_cron_refuses_an_expression_that_never_matches_a_date(
    client: FloClient, expression: str
) -> None:
    worker = client.new_action_worker(worker_id="never-worker", block_ms=200)
    with pytest.raises(ValidationError, match="never matches a date; check its day-of-month"):

        @worker.cron(expression)
        async def never(ctx: ActionContext) -> None:  # pragma: no cover - never runs
            pass

    with pytest.raises(ValidationError, match="never matches a date"):
        check_cron(expression)
    assert await client.action.schedules() == []


def test_check_cron_takes_a_leap_day_and_refuses_what_is_not_cron() -> None:
    assert check_cron("0 0 29 2 *") == "0 0 29 2 *"  # every fourth year is a date
    with pytest.raises(ValidationError, match="not a cron expression"):
        check_cron("61 * * * *")
    with pytest.raises(ValidationError, match="not a cron expression"):
        check_cron(None)


# --- the days the clocks change ------------------------------------------------------


def _at(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def _walk(cron: str, tz: str, start: str, n: int) -> list[str]:
    """The ``n`` occurrences after ``start``, each as its zone's wall clock shows it."""
    zone, t, shown = ZoneInfo(tz), _at(start), []
    for _ in range(n):
        t = Schedule("a", "s", cron, None, tz, b"", Missed.ALL, t).following(t, t)
        shown.append(datetime.fromtimestamp(t / 1000, zone).isoformat())
    return shown


@pytest.mark.parametrize(
    ("cron", "tz", "start", "expected"),
    [
        # Clocks go back (01:00-02:00 shown twice): 09:00 stays 09:00, an occurrence in
        # the repeated hour fires once, at its first showing.
        ("0 9 * * *", "America/New_York", "2024-11-02T09:00:00-04:00",
         ["2024-11-03T09:00:00-05:00", "2024-11-04T09:00:00-05:00"]),
        ("59 1 * * *", "America/New_York", "2024-11-02T01:59:00-04:00",
         ["2024-11-03T01:59:00-04:00", "2024-11-04T01:59:00-05:00"]),
        ("*/30 * * * *", "America/New_York", "2024-11-03T00:30:00-04:00",
         ["2024-11-03T01:00:00-04:00", "2024-11-03T01:30:00-04:00",
          "2024-11-03T02:00:00-05:00"]),
        ("0 0 * * *", "Europe/Berlin", "2024-10-26T00:00:00+02:00",
         ["2024-10-27T00:00:00+02:00", "2024-10-28T00:00:00+01:00"]),
        # Clocks go forward (02:00-03:00 skipped): 09:00 stays 09:00; 02:30 comes an
        # hour later that day, just after the change.
        ("0 9 * * *", "America/New_York", "2024-03-09T09:00:00-05:00",
         ["2024-03-10T09:00:00-04:00", "2024-03-11T09:00:00-04:00"]),
        ("30 2 * * *", "America/New_York", "2024-03-09T02:30:00-05:00",
         ["2024-03-10T03:30:00-04:00", "2024-03-11T02:30:00-04:00"]),
        # A half-hour change.
        ("0 2 * * *", "Australia/Lord_Howe", "2024-04-06T02:00:00+11:00",
         ["2024-04-07T02:00:00+10:30", "2024-04-08T02:00:00+10:30"]),
    ],
)  # fmt: skip
def test_cron_occurrences_keep_their_wall_clock_time_across_clock_changes(
    cron: str, tz: str, start: str, expected: list[str]
) -> None:
    assert _walk(cron, tz, start, len(expected)) == expected


async def test_a_missed_all_schedule_fires_on_through_the_clocks_going_back(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("nightly")
    await client.action.schedule("nightly", "59 1 * * *", timezone="America/New_York", missed="all")
    keys = action_keys(namespace, "nightly")
    # As if no worker had run since the occurrence before the clocks went back.
    await raw.zadd(keys.schedule_due, {"nightly": _at("2024-11-02T01:59:00-04:00")})
    dues = []
    for _ in range(4):
        assert await fire_due(client.session, "nightly") == 1  # each missed one, once
        (schedule,) = await client.action.schedules("nightly")
        dues.append(schedule.next_due_ms)
    assert dues == [
        _at("2024-11-03T01:59:00-04:00"),
        _at("2024-11-04T01:59:00-05:00"),
        _at("2024-11-05T01:59:00-05:00"),
        _at("2024-11-06T01:59:00-05:00"),
    ]
    assert len(await occurrences(raw, namespace, "nightly")) == 4
