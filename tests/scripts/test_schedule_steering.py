"""Schedules steered and kept on their cadence: a paused schedule creates no run, and
resumed it fires what it missed as its policy says, never a burst beyond; a trigger
creates one run without moving the next occurrence; a schedule set again while paused
stays paused; and an interval's occurrences are anchor + k * interval on Redis's clock
however late they are fired (the recorded occurrences, exact, are what is asserted).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis.asyncio as aioredis
from schedule_runs import fired_occurrences

from flo_redis import ActionRegisterOptions, FloClient
from flo_redis._wire.gateway import SCHEDULE_DUE, SCHEDULE_LIST
from flo_redis._wire.keys import action_keys
from flo_redis.actions.schedules import Missed, Schedule, fire_due, fire_schedules
from flo_redis.errors import NotFoundError, ValidationError, ValueTooLargeError

SECOND = timedelta(seconds=1)


async def server_ms(client: FloClient, action: str) -> int:
    keys = action_keys(client.namespace, action)
    return (await SCHEDULE_DUE(client.session, keys, [1, 0])).now_ms


async def hold_in_the_past(
    raw: aioredis.Redis, client: FloClient, action: str, missed_ms: int, paused: bool
) -> int:
    """Move the schedule's next occurrence ``missed_ms`` into the past, as if no worker
    (or a pause) had let it fire since; answers that occurrence."""
    keys = action_keys(client.namespace, action)
    due = await server_ms(client, action) - missed_ms
    await raw.zadd(keys.schedule_paused if paused else keys.schedule_due, {action: due})
    return due


async def test_a_paused_schedule_creates_no_run_and_keeps_its_place(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("tick")
    first = await client.action.schedule("tick", SECOND)
    paused = await client.action.pause_schedule("tick")
    assert paused.paused and paused.next_due_ms == first.next_due_ms  # the occurrence it holds
    again = await client.action.pause_schedule("tick")
    assert again == paused  # pausing a paused one changes nothing
    await hold_in_the_past(raw, client, "tick", 5_500, paused=True)
    assert await fire_due(client.session, "tick") == 0
    assert await fired_occurrences(raw, namespace, "tick") == []
    (listed,) = await client.action.schedules("tick")
    assert listed.paused


@pytest.mark.parametrize(("missed", "runs"), [(Missed.ONCE, 1), (Missed.ALL, 6)])
async def test_resuming_fires_what_was_missed_as_its_policy_says_and_no_more(
    client: FloClient, raw: aioredis.Redis, namespace: str, missed: Missed, runs: int
) -> None:
    await client.action.register("tick")
    await client.action.schedule("tick", SECOND, missed=missed)
    await client.action.pause_schedule("tick")
    held = await hold_in_the_past(raw, client, "tick", 5_500, paused=True)  # 6 passed
    resumed = await client.action.resume_schedule("tick")
    assert not resumed.paused and resumed.next_due_ms == held
    for _ in range(10):
        await fire_due(client.session, "tick")
    fired = await fired_occurrences(raw, namespace, "tick")
    assert fired == [held + 1000 * i for i in range(runs)]  # once: only the oldest
    (after,) = await client.action.schedules("tick")
    assert (after.next_due_ms - held) % 1000 == 0  # on its grid
    assert after.next_due_ms > await server_ms(client, "tick") - 1000  # caught up
    assert after.last_due_ms == fired[-1] and after.last_run_id


async def test_a_trigger_makes_one_run_from_its_input_and_leaves_the_next_occurrence(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("report")
    schedule = await client.action.schedule("report", "0 3 * * *", input=b'{"full": true}')
    run_id = await client.action.trigger_schedule("report")
    assert await raw.hget(action_keys(namespace, "report").inputs, run_id) == b'{"full": true}'
    after = await client.action.get_schedule("report")
    assert after.next_due_ms == schedule.next_due_ms  # not moved
    assert after.triggered_run_id == run_id and after.triggered_ms > 0
    assert after.last_due_ms == 0 and after.last_run_id == ""  # not an occurrence
    assert await fired_occurrences(raw, namespace, "report") == []

    await client.action.pause_schedule("report")
    keyed = await client.action.trigger_schedule("report", idempotency_key="by-hand-1")
    assert keyed != run_id  # a paused schedule can be triggered
    assert await client.action.trigger_schedule("report", idempotency_key="by-hand-1") == keyed
    assert (await client.action.get_schedule("report")).paused


async def test_steering_a_schedule_that_is_not_there_is_refused(client: FloClient) -> None:
    await client.action.register("report")
    await client.action.schedule("report", "0 3 * * *", name="nightly")
    for call in (
        client.action.pause_schedule,
        client.action.resume_schedule,
        client.action.trigger_schedule,
        client.action.get_schedule,
        client.action.unschedule,
    ):
        with pytest.raises(NotFoundError, match="has no schedule 'nighty'"):
            await call("report", "nighty")
    with pytest.raises(ValidationError, match="braces"):
        await client.action.pause_schedule("report", "a{b}")
    with pytest.raises(ValidationError, match="idempotency_key"):
        await client.action.trigger_schedule("report", "nightly", idempotency_key=5)  # type: ignore[arg-type]


async def test_a_paused_schedule_stays_paused_when_set_again(client: FloClient) -> None:
    # Two daily hours still ahead today or both tomorrow (UTC), one hour apart, whatever
    # the hour the test runs at.
    hour = (await client.server_time_ms() // 3_600_000 + 2) % 24
    daily, an_hour_later = f"0 {hour} * * *", f"0 {(hour + 1) % 24} * * *"
    await client.action.register("report")
    await client.action.schedule("report", daily)
    held = (await client.action.pause_schedule("report")).next_due_ms
    same = await client.action.schedule("report", daily)  # a worker starting again
    assert same.paused and same.next_due_ms == held
    changed = await client.action.schedule("report", an_hour_later)  # a deploy changes it
    assert changed.paused and changed.next_due_ms == held + 3_600_000
    assert (await client.action.get_schedule("report")) == changed


async def test_removing_a_paused_schedule_removes_all_of_it(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("report")
    await client.action.schedule("report", "0 3 * * *")
    await client.action.trigger_schedule("report")
    await client.action.pause_schedule("report")
    await client.action.unschedule("report")
    keys = action_keys(namespace, "report")
    for key in (keys.schedules, keys.schedule_due, keys.schedule_paused, keys.schedule_last):
        assert not await raw.exists(key), key
    assert await client.action.schedules() == []
    listed = await SCHEDULE_LIST(client.session, keys, [10, ""])
    assert listed.rows == ()


# --- cadence ---------------------------------------------------------------------------


async def test_a_late_firing_moves_no_later_occurrence(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("tick")
    every = timedelta(seconds=5)
    await client.action.schedule("tick", every)
    # Fired 1.3 s late: the next occurrence is the due one plus the interval, not the
    # firing time plus the interval.
    due = await hold_in_the_past(raw, client, "tick", 1_300, paused=False)
    result = await fire_schedules(client.session, "tick")
    assert result.created == 1
    (after,) = await client.action.schedules("tick")
    assert after.next_due_ms == due + 5_000
    assert 0 < result.next_in_ms <= 3_700  # when to come back: at that occurrence
    # Fired more than two intervals late (missed, once): the occurrences between are
    # skipped, and the next is the first after now on the same grid.
    first, late = due, after.next_due_ms - 15_000  # 11.3 s ago
    await raw.zadd(action_keys(namespace, "tick").schedule_due, {"tick": late})
    assert await fire_due(client.session, "tick") == 1
    (after,) = await client.action.schedules("tick")
    assert after.next_due_ms == late + 15_000
    assert await fired_occurrences(raw, namespace, "tick") == [late, first]


@pytest.mark.parametrize("every_ms", [1_000, 1_001, 5_000, 86_399_999])
def test_interval_occurrences_are_the_anchor_plus_whole_intervals(every_ms: int) -> None:
    every = timedelta(milliseconds=every_ms)
    anchor = 1_765_000_000_123
    schedule = Schedule("a", "s", None, every, "UTC", b"", Missed.ONCE, anchor)
    due, fired_at = anchor, anchor
    for k in range(1, 200):
        fired_at = due + (k * 37) % every_ms  # each firing late by a different amount
        due = schedule.following(due, fired_at)
        assert due == anchor + k * every_ms  # exact: no drift, no millisecond lost


async def test_a_trigger_over_the_actions_payload_limit_is_refused_and_creates_nothing(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("report")
    await client.action.schedule("report", "0 3 * * *", input=b"x" * 100)
    # The limit lowered after the schedule was set.
    await client.action.register("report", options=ActionRegisterOptions(max_payload_bytes=10))
    with pytest.raises(ValueTooLargeError, match=r"payload limit of action 'report' \(10 bytes\)"):
        await client.action.trigger_schedule("report")
    assert await raw.hlen(action_keys(namespace, "report").runs) == 0
    assert (await client.action.get_schedule("report")).triggered_run_id == ""
