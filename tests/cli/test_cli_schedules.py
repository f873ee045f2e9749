"""``flo-redis schedules``, the real command: each action's schedules in an 80-column
table (their next and last occurrence, paused or not, and those set aside), exact with
``--json``; pause, resume, trigger and remove; and a typo in a name answered with what
was meant, exit 1."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis
from cli_command import flo_redis
from cli_runner import with_client
from rich.cells import cell_len

from flo_redis import FloClient
from flo_redis._wire.codec import pack
from flo_redis._wire.keys import action_keys
from flo_redis.actions.schedules import fire_due

NARROW = {"COLUMNS": "80"}


@pytest.fixture
def shop(redis_url: str, namespace: str) -> dict[str, Any]:
    """Action 'report' with a cron schedule in Paris time (fired once: its last run),
    action 'resize' with two interval schedules, and a schedule of 'resize' set aside
    because it names a time zone nobody knows."""

    async def build(client: FloClient) -> dict[str, Any]:
        await client.action.register("report")
        await client.action.register("resize")
        await client.action.schedule("report", "0 9 * * 1-5", timezone="Europe/Paris")
        await client.action.schedule("resize", timedelta(seconds=30), name="thumbs", input=b"t")
        await client.action.schedule("resize", timedelta(hours=1, minutes=30), name="sweep")
        keys = action_keys(namespace, "report")
        redis = aioredis.Redis.from_url(redis_url)
        try:
            await redis.zadd(keys.schedule_due, {"report": 1_000})  # long missed: fires now
            record = pack({"c": "0 3 * * *", "e": 0, "z": "Mars/Olympus", "i": b"", "m": "once"})
            resize = action_keys(namespace, "resize")
            await redis.hset(resize.schedules, "martian", record)
            await redis.zadd(resize.schedule_due, {"martian": 0})
        finally:
            await redis.aclose()
        await fire_due(client.session, "report")
        await fire_due(client.session, "resize")  # sets 'martian' aside
        report = await client.action.get_schedule("report")
        return {"report_run": report.last_run_id}

    return with_client(redis_url, namespace, build)


def run(redis_url: str, namespace: str, *args: str, **kwargs: Any) -> str:
    done = flo_redis(redis_url, namespace, *args, **kwargs)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_list_fits_80_columns_and_shows_next_last_and_set_aside(
    redis_url: str, namespace: str, shop: dict[str, Any]
) -> None:
    shown = run(redis_url, namespace, "schedules", "list", env=NARROW)
    assert [line for line in shown.splitlines() if cell_len(line) > 80] == [], shown
    for cell in ("report", "thumbs", "sweep", "every 30s", "every 1h30m", "active"):
        assert cell in shown, cell
    # The 30 s schedule's next occurrence, as far off as the time since it was set allows.
    assert re.search(r"\bin ([0-9]|[12][0-9]|30)s\b", shown), shown
    assert "Set aside" in shown and "martian" in shown and "Mars/Olympus" in shown
    wide = run(redis_url, namespace, "schedules", "list", "--wide", env=NARROW)
    assert shop["report_run"] in wide and " last run " in wide


def test_json_gives_the_exact_values(redis_url: str, namespace: str, shop: dict[str, Any]) -> None:
    listed = json.loads(run(redis_url, namespace, "schedules", "list", "--json"))
    by_name = {s["name"]: s for s in listed["schedules"]}
    assert set(by_name) == {"report", "thumbs", "sweep"}
    report, thumbs = by_name["report"], by_name["thumbs"]
    assert report["cron"] == "0 9 * * 1-5" and report["timezone"] == "Europe/Paris"
    assert report["last_due_ms"] == 1_000 and report["last_run_id"] == shop["report_run"]
    assert thumbs["every_ms"] == 30_000 and thumbs["paused"] is False and thumbs["input"] == "t"
    assert thumbs["next_due_ms"] > listed["now_ms"]
    [aside] = listed["set_aside"]
    assert aside["action"] == "resize" and aside["name"] == "martian"
    assert "Mars/Olympus" in aside["why"] and aside["entry_id"]
    one = json.loads(run(redis_url, namespace, "schedules", "list", "--action", "report", "--json"))
    assert [s["name"] for s in one["schedules"]] == ["report"] and one["set_aside"] == []


def test_pause_resume_trigger_and_remove(
    redis_url: str, namespace: str, shop: dict[str, Any]
) -> None:
    def schedules(*args: str) -> str:
        return run(redis_url, namespace, "schedules", *args)

    before = json.loads(schedules("show", "resize", "thumbs", "--json"))
    paused = json.loads(schedules("pause", "resize", "thumbs", "--json"))
    assert paused["paused"] is True and paused["next_due_ms"] == before["next_due_ms"]
    assert "state:         paused" in schedules("show", "resize", "thumbs")

    run_id = schedules("trigger", "resize", "thumbs").removeprefix("created run ").strip()
    after = json.loads(schedules("show", "resize", "thumbs", "--json"))
    assert after["triggered_run_id"] == run_id and after["next_due_ms"] == before["next_due_ms"]

    resumed = schedules("resume", "resize", "thumbs")
    assert resumed.startswith("schedule thumbs of resize active; next occurrence ")

    no = flo_redis(redis_url, namespace, "schedules", "remove", "resize", "sweep", stdin=b"n\n")
    assert no.returncode == 1  # not confirmed: nothing removed
    schedules("remove", "resize", "sweep", "--yes")
    listed = json.loads(schedules("list", "--action", "resize", "--json"))
    assert [s["name"] for s in listed["schedules"]] == ["thumbs"]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("show", "resize", "thumb"), "no schedule 'thumb' of action 'resize' in namespace "
         "'{ns}' (did you mean 'thumbs'?)"),
        (("pause", "resize", "thumb"), "(did you mean 'thumbs'?)"),
        (("trigger", "rezise", "thumbs"), "no action 'rezise' in namespace '{ns}' (did you "
         "mean 'resize'?)"),
        (("remove", "resize", "martian", "--yes"), "schedule 'martian' of action 'resize' was "
         "set aside (cannot be evaluated: ZoneInfoNotFoundError"),
        (("list", "--action", "reprot"), "(did you mean 'report'?)"),
    ],
    ids=["show", "pause", "action", "set-aside", "list"],
)  # fmt: skip
def test_a_typo_says_which_was_meant(
    redis_url: str, namespace: str, shop: dict[str, Any], args: tuple[str, ...], line: str
) -> None:
    done = flo_redis(redis_url, namespace, "schedules", *args)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert line.format(ns=namespace) in done.stderr, done.stderr
