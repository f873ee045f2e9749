"""Flow control by key: ActionRegisterOptions(flow=FlowControl(...)) and
ActionInvokeOptions(flow_key=...). Per-key concurrency is enforced by the claim and
hand-off scripts, a key's slot comes back however its run stops running, fair turns
take the keys' runs in turn (priorities first), and a key gone idle leaves no state."""

from __future__ import annotations

import msgpack
import pytest
import redis.asyncio as aioredis
from polling import eventually

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FlowControl,
    NotFoundError,
    RateLimit,
    RunStatus,
    ValidationError,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis._wire.gateway import ACTION_REAP
from flo_redis._wire.keys import action_keys
from flo_redis.actions.reports import release

NOW = WorkerAwaitOptions(block_ms=0)


async def invoke(client: FloClient, key: str | None, n: int = 1, priority: int = 0) -> list[str]:
    opts = ActionInvokeOptions(flow_key=key, priority=priority)
    return [(await client.action.invoke("job", b"", opts)).run_id for _ in range(n)]


async def claim_keys(client: FloClient, n: int) -> list[str]:
    """The flow keys of the runs one claim of up to ``n`` hands out, in order."""
    tasks = await client.worker.await_tasks("w1", ["job"], n, NOW)
    return [await flow_key_of(client, t.run_id) for t in tasks]


async def flow_key_of(client: FloClient, run_id: str) -> str:
    keys = action_keys(client.namespace, "job")
    raw = await client.session.redis.hget(keys.runs, run_id)
    rec = msgpack.unpackb(raw, raw=False)
    return str(rec.get("fk", ""))


async def flow_state(raw: aioredis.Redis, namespace: str) -> dict[str, int]:
    keys = action_keys(namespace, "job")
    return {
        "flows": await raw.hlen(keys.flows),
        "held": await raw.zcard(keys.flow_held),
        "vt": await raw.zcard(keys.flow_vt),
    }


async def test_a_key_never_runs_more_than_its_limit_and_others_pass_it(
    client: FloClient,
) -> None:
    await client.action.register("job", options=ActionRegisterOptions(flow=FlowControl(2)))
    await client.worker.register("w1", ["job"])
    await invoke(client, "big", 50)
    await invoke(client, "small", 2)
    # Each claim looks at a bounded window of the queue: "big"'s runs met past its
    # limit are held back apart, so claims reach "small"'s runs behind them.
    keys: list[str] = []
    for _ in range(10):
        keys += await claim_keys(client, 10)
    assert sorted(keys) == ["big", "big", "small", "small"]


async def test_a_keys_slot_comes_back_when_its_run_completes_fails_or_is_released(
    client: FloClient,
) -> None:
    opts = ActionRegisterOptions(max_retries=5, flow=FlowControl(1))
    await client.action.register("job", options=opts)
    await client.worker.register("w1", ["job"])
    await invoke(client, "k", 4)
    (first,) = await client.worker.await_tasks("w1", ["job"], 5, NOW)
    assert await client.worker.await_tasks("w1", ["job"], 5, NOW) == []
    await client.worker.complete("w1", "job", first.run_id, b"ok")
    (second,) = await client.worker.await_tasks("w1", ["job"], 5, NOW)
    await client.worker.fail("w1", "job", second.run_id, "boom", WorkerFailOptions(retry=True))
    (third,) = await client.worker.await_tasks("w1", ["job"], 5, NOW)
    await client.action.cancel(third.run_id)
    (fourth,) = await client.worker.await_tasks("w1", ["job"], 5, NOW)
    assert len({first.run_id, second.run_id, third.run_id, fourth.run_id}) >= 3


async def test_a_held_run_cancelled_is_skipped_and_the_key_goes_idle(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("job", options=ActionRegisterOptions(flow=FlowControl(1)))
    await client.worker.register("w1", ["job"])
    a, b, c = await invoke(client, "k", 3)
    (first,) = await client.worker.await_tasks("w1", ["job"], 5, NOW)
    assert first.run_id == a
    assert (await flow_state(raw, namespace))["held"] == 2
    await client.action.cancel(b)
    await client.worker.complete("w1", "job", a, b"ok")
    (next_one,) = await client.worker.await_tasks("w1", ["job"], 5, NOW)
    assert next_one.run_id == c
    await client.worker.complete("w1", "job", c, b"ok")
    assert await flow_state(raw, namespace) == {"flows": 0, "held": 0, "vt": 0}


async def test_fair_turns_take_keys_in_turn_behind_a_flood(client: FloClient) -> None:
    flow = FlowControl(fair=True)
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    await invoke(client, "flood", 100)
    await invoke(client, "a", 2)
    await invoke(client, "b", 2)
    first = await claim_keys(client, 7)
    # A key arriving joins the turn at the head: one run of each key per turn, however
    # long the flood.
    assert first == ["flood", "a", "b", "flood", "a", "b", "flood"]


async def test_fair_turns_keep_priorities_first_and_a_keys_order(client: FloClient) -> None:
    flow = FlowControl(fair=True)
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    low = await invoke(client, "a", 3, priority=5)
    urgent = await invoke(client, "b", 1, priority=0)
    tasks = await client.worker.await_tasks("w1", ["job"], 10, NOW)
    assert [t.run_id for t in tasks] == urgent + low


async def test_weights_give_a_key_more_turns(client: FloClient) -> None:
    flow = FlowControl(fair=True, weights={"gold": 3})
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    await invoke(client, "gold", 30)
    await invoke(client, "plain", 30)
    keys = await claim_keys(client, 20)
    assert keys.count("gold") >= 14


async def test_runs_without_a_key_are_unchanged_by_flow_control(client: FloClient) -> None:
    flow = FlowControl(concurrency=1, fair=True)
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    ids = await invoke(client, None, 5)
    tasks = await client.worker.await_tasks("w1", ["job"], 10, NOW)
    assert [t.run_id for t in tasks] == ids


async def test_idle_keys_leave_no_state_after_the_reaper(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    flow = FlowControl(concurrency=2, fair=True)
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    for key in ("a", "b", "c"):
        await invoke(client, key, 4)
    while tasks := await client.worker.await_tasks("w1", ["job"], 3, NOW):
        for t in tasks:
            await client.worker.complete("w1", "job", t.run_id, b"ok")
    keys = action_keys(namespace, "job")

    async def state() -> dict[str, int]:
        await ACTION_REAP(client.session, keys, [100])
        return await flow_state(raw, namespace)

    await eventually(state, lambda s: s == {"flows": 0, "held": 0, "vt": 0})
    assert await raw.hget(keys.meta, "fvt") is None


@pytest.mark.parametrize("bad", ["", "a\0b", "x" * 256, 7])
async def test_a_bad_flow_key_is_refused_before_anything_is_sent(
    client: FloClient, bad: object
) -> None:
    await client.action.register("job")
    with pytest.raises((ValidationError, ValueError)):
        await client.action.invoke("job", b"", ActionInvokeOptions(flow_key=bad))  # type: ignore[arg-type]
    assert (await client.action.counts("job")).pending == 0


@pytest.mark.parametrize(
    "bad",
    [
        FlowControl(concurrency=-1),
        FlowControl(fair=True, weights={"a": 0}),
        FlowControl(fair=True, weights={"a": 1001}),
        FlowControl(weights={"a": 2}),
        FlowControl(rate=RateLimit(0, 1000)),
        FlowControl(dedup=True, throttle_ms=1000),
        FlowControl(dedup_ttl_ms=1000),
        FlowControl(debounce_ms=-1),
        FlowControl(throttle_ms=86_400_001),
    ],
)
async def test_bad_flow_settings_are_refused_at_register(
    client: FloClient, bad: FlowControl
) -> None:
    with pytest.raises(ValidationError):
        await client.action.register("job", options=ActionRegisterOptions(flow=bad))


async def test_invoke_many_gives_every_run_its_key_and_its_turns(client: FloClient) -> None:
    flow = FlowControl(concurrency=3, fair=True)
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    await client.action.invoke_many("job", [b""] * 50, ActionInvokeOptions(flow_key="flood"))
    await client.action.invoke_many("job", [b""] * 2, ActionInvokeOptions(flow_key="a"))
    keys = await claim_keys(client, 10)
    # "a" joins the flood's turns at once, the flood held to its limit of three.
    assert keys == ["flood", "a", "flood", "a", "flood"]
    counts = await client.action.counts("job")
    assert (counts.running, counts.pending) == (5, 47)  # held runs still wait


async def test_a_keys_rate_window_puts_its_extra_runs_off_and_others_go_on(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    flow = FlowControl(rate=RateLimit(2, 60_000))
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    await invoke(client, "a", 5)
    await invoke(client, "b", 2)
    first = await client.worker.await_tasks("w1", ["job"], 10, NOW)
    keys = [await flow_key_of(client, t.run_id) for t in first]
    assert sorted(keys) == ["a", "a", "b", "b"]
    counts = await client.action.counts("job")
    assert (counts.running, counts.delayed) == (4, 3)
    # The put-off runs wait until a's oldest start leaves the window.
    started = min(t.claimed_at_ms for t in first)
    assert counts.next_due_ms == started + 60_000
    assert await client.worker.await_tasks("w1", ["job"], 10, NOW) == []


async def test_a_rate_limited_release_waits_unspent_and_pauses_its_key(
    client: FloClient,
) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    a1, a2 = await invoke(client, "a", 2)
    (b1,) = await invoke(client, "b", 1)
    tasks = {t.run_id: t for t in await client.worker.await_tasks("w1", ["job"], 1, NOW)}
    assert list(tasks) == [a1]
    await release(client.session, "w1", "job", a1, tasks[a1].token, delay_ms=60_000)
    status = await client.action.status(a1)
    assert (status.status, status.attempt) == (RunStatus.PENDING, 0)
    assert status.due_at_ms is not None
    # a's other run waits out the pause too; b's goes on.
    taken = [t.run_id for t in await client.worker.await_tasks("w1", ["job"], 10, NOW)]
    assert taken == [b1]
    assert (await client.action.status(a2)).due_at_ms == status.due_at_ms


async def test_dedup_keeps_an_ended_run_for_its_ttl(client: FloClient) -> None:
    flow = FlowControl(dedup=True, dedup_ttl_ms=3_600_000)
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    (first,) = await invoke(client, "k", 1)
    assert await invoke(client, "k", 1) == [first]
    (task,) = await client.worker.await_tasks("w1", ["job"], 5, NOW)
    await client.worker.complete("w1", "job", task.run_id, b"ok")
    assert await invoke(client, "k", 1) == [first]  # ended, within its TTL
    assert await invoke(client, "j", 1) != [first]  # another key


async def test_invoke_many_refuses_a_key_of_an_action_that_answers_each_invoke(
    client: FloClient,
) -> None:
    await client.action.register("job", options=ActionRegisterOptions(flow=FlowControl(dedup=True)))
    with pytest.raises(ValidationError, match="one at a time"):
        await client.action.invoke_many("job", [b""] * 2, ActionInvokeOptions(flow_key="k"))
    assert (await client.action.counts("job")).pending == 0
    await client.action.invoke_many("job", [b""] * 2)  # without a key: as ever


async def test_the_busiest_keys_show_waiting_running_held_and_paused(
    client: FloClient,
) -> None:
    flow = FlowControl(concurrency=2, rate=RateLimit(100, 60_000))
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    await invoke(client, "big", 6)
    await invoke(client, "small", 1)
    tasks = await client.worker.await_tasks("w1", ["job"], 3, NOW)
    assert len(tasks) == 3  # big's two (its limit) and small's one, big's others held
    await invoke(client, "late", 2)
    by_key = {await flow_key_of(client, t.run_id): t for t in tasks}
    small = by_key["small"]
    await release(client.session, "w1", "job", small.run_id, small.token, delay_ms=60_000)
    found = await client.action.flow_keys("job")
    rows = {k.key: k for k in found.keys}
    assert found.keys[0].key == "big"
    assert (rows["big"].running, rows["big"].held, rows["big"].started) == (2, 4, 2)
    assert (rows["late"].waiting, rows["late"].running) == (2, 0)
    assert rows["small"].paused_until_ms is not None and rows["small"].running == 0
    assert found.looked_at == 2
    with pytest.raises(NotFoundError):
        await client.action.flow_keys("nope")
