"""Hand-off (lua/lib/handoff.lua): a poll that found nothing parks its poller, and an
invoke gives a ready run straight to it — lease, token, owner and poll memo recorded —
and tells it on its hand-off channel. These call the scripts directly; the worker's side
is in test_action_worker.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import msgpack
import pytest
import redis.asyncio as aioredis
import redis.exceptions
from handoff import PARK_MS, Channel, channel, register
from polling import eventually, finished, registered, running
from script_state import script_command

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionWorker,
    ConflictError,
    FloClient,
    RateLimit,
    RunStatus,
    WorkerCompleteOptions,
    WorkerFailOptions,
)
from flo_redis._session.reclaim import reclaim_gone_owners
from flo_redis._session.session import Session
from flo_redis._wire.codec import pack
from flo_redis._wire.keys import ActionKeys, action_keys, handoff_channel
from flo_redis._wire.replies import Claimed, handed
from flo_redis.actions.claims import claim
from flo_redis.actions.schedules import fire_due
from flo_redis.worker import poller
from flo_redis.worker.poller import ActionPoller

__all__ = ["channel"]  # the hand-off channel fixture


async def park(
    client: FloClient,
    keys: ActionKeys,
    poll_id: str = "p1#0",
    labels: bytes = b"",
    received: str = "",
) -> None:
    reply = await claim(client.session, keys, "w1", labels, 1, poll_id, PARK_MS, received)
    assert reply.runs == ()


async def test_an_invoke_hands_a_ready_run_to_a_parked_poller(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client, timeout_ms=60_000)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"input")).run_id
    message = await channel.next()
    assert message is not None
    poll_id, handed, token, attempt, created, ready, claimed, data, trace = message
    assert (poll_id, handed, attempt, data, trace) == ("p1#0", run_id, 1, b"input", b"")
    assert created == ready <= claimed
    status = await client.action.status(run_id)
    assert status.status == RunStatus.RUNNING
    assert await raw.zcard(keys.pending) == 0
    assert await raw.zscore(keys.leases, run_id) is not None
    assert await raw.hget(keys.owners, client.owner_id) == b"0"
    assert await raw.zcard(keys.parked) == 0
    # The token is the run's fencing token: the poller completes with it.
    await client.worker.complete("w1", "job", run_id, b"done", WorkerCompleteOptions(token=token))
    assert (await client.action.status(run_id)).status == RunStatus.COMPLETED


@pytest.mark.parametrize("timeout_ms", [60_000, 0])
async def test_a_handed_run_is_leased_for_the_actions_timeout(
    client: FloClient, raw: aioredis.Redis, channel: Channel, timeout_ms: int
) -> None:
    # An invoke reads only the settings it needs before writing; handing the run off
    # reads the rest (the lease's length among them).
    keys = await register(client, timeout_ms=timeout_ms, max_concurrency=5)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"input")).run_id
    message = await channel.next()
    assert message is not None
    claimed = message[6]
    deadline = await raw.zscore(keys.leases, run_id)
    assert deadline is not None
    if timeout_ms:
        assert deadline == claimed + timeout_ms
    else:
        assert deadline > claimed + 10 * 365 * 86_400_000  # never expires


async def test_a_poller_nobody_listens_for_is_not_handed_anything(
    client: FloClient, raw: aioredis.Redis
) -> None:
    keys = await register(client)
    await park(client, keys)  # parked, but its hand-off channel has no subscriber
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    assert await raw.zcard(keys.parked) == 0  # gone, or reconnecting: it claims again


async def test_a_lost_message_is_replayed_by_the_poll_id(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"x")).run_id
    token = (await channel.next() or [None, None, None])[2]
    # The poller never heard it: it claims again under the same poll id.
    again = await claim(client.session, keys, "w1", b"", 1, "p1#0")
    assert [(r.run_id, r.token, r.payload) for r in again.runs] == [(run_id, token, b"x")]


async def test_a_handed_run_reads_the_same_as_the_claim_that_replays_it(
    client: FloClient, channel: Channel
) -> None:
    # The worker reads a hand-off message and a claim's answer with two parsers: the run
    # is the same either way, field for field. A retry, so that no two fields that could
    # be read in each other's place are equal (token and attempt; created and ready).
    keys = await register(client, max_retries=3)
    await client.action.invoke("job", b"earlier")
    await claim(client.session, keys, "w2", b"", 1, "earlier")  # its run's token is 1
    run = await running_run(client, keys, b"input")
    await asyncio.sleep(0.01)  # the retry is ready after the run was created
    await park(client, keys)
    await client.worker.fail(
        "w2", "job", run.run_id, "boom", WorkerFailOptions(retry=True, token=run.token)
    )
    data = await channel.next_data()
    assert data is not None
    message = handed(data, "job")
    assert (message.poll_id, message.run_id) == ("p1#0", run.run_id)
    assert message.run is not None
    (replayed,) = (await claim(client.session, keys, "w1", b"", 1, "p1#0")).runs
    assert message.run == replayed
    assert (replayed.attempt, replayed.payload, replayed.trace) == (2, b"input", b"")
    assert replayed.token > replayed.attempt
    assert replayed.created_at_ms == run.created_at_ms < replayed.ready_at_ms


async def test_the_next_poll_answers_with_a_handed_run_not_received(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert await channel.next() is not None
    # The poller's next poll says it did not receive the run: it is in the answer.
    nxt = await claim(client.session, keys, "w1", b"", 5, "p1#1", PARK_MS, "")
    assert [r.run_id for r in nxt.runs] == [run_id]


async def test_a_received_run_is_not_handed_out_again(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"x")).run_id
    token = (await channel.next() or [None, None, None])[2]
    nxt = await claim(client.session, keys, "w1", b"", 5, "p1#1", PARK_MS, f"{run_id} {token}")
    assert nxt.runs == ()
    assert await raw.zcard(keys.parked) == 1  # parked again for the next one


async def test_the_same_run_handed_again_under_a_new_token_is_not_taken_as_received(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client, max_retries=3)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"x")).run_id
    first = (await channel.next() or [None, None, None])[2]
    await park(client, keys, "p1#1", received=f"{run_id} {first}")
    # Its retry is handed to the new park; the poller never hears that message.
    await client.worker.fail("w1", "job", run_id, "boom", WorkerFailOptions(token=first))
    second = (await channel.next() or [None, None, None])[2]
    assert second != first
    # Its next poll says it received the run under its first token: the retry is answered.
    nxt = await claim(client.session, keys, "w1", b"", 5, "p1#2", PARK_MS, f"{run_id} {first}")
    assert [(r.run_id, r.token) for r in nxt.runs] == [(run_id, second)]


async def test_a_claim_of_the_poller_ends_its_park(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    assert (await claim(client.session, keys, "w1", b"", 1, "p1#1")).runs == ()
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    assert await raw.zcard(keys.parked) == 0


async def test_an_unpark_only_claim_answers_with_what_was_handed(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    await client.action.invoke("job", b"x")
    second = (await client.action.invoke("job", b"y")).run_id  # queued: the park took one
    handed = await claim(client.session, keys, "w1", b"", 0, "p1#0")
    assert [r.payload for r in handed.runs] == [b"x"]
    assert (await client.action.status(second)).status == RunStatus.PENDING


async def test_a_park_ends_at_its_deadline(client: FloClient, channel: Channel) -> None:
    keys = await register(client)
    assert (await claim(client.session, keys, "w1", b"", 1, "p1#0", 50)).runs == ()
    await asyncio.sleep(0.1)  # past the park's 50 ms: the time is the behaviour
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING


async def test_a_delayed_run_is_not_handed_off(client: FloClient, channel: Channel) -> None:
    keys = await register(client)
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"x", ActionInvokeOptions(delay_ms=60_000))).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    assert await channel.next(0.2) is None


async def test_labels_are_matched(client: FloClient, channel: Channel) -> None:
    keys = await register(client)
    await park(client, keys, labels=pack({"gpu": "b:true"}))
    other = (
        await client.action.invoke("job", b"x", ActionInvokeOptions(labels={"gpu": False}))
    ).run_id
    assert (await client.action.status(other)).status == RunStatus.PENDING
    assert await channel.next(0.2) is None


async def test_waiting_runs_go_first(client: FloClient, channel: Channel) -> None:
    keys = await register(client)
    await park(client, keys, labels=pack({"gpu": "b:true"}))
    await client.action.invoke(
        "job", b"x", ActionInvokeOptions(labels={"gpu": False})
    )  # waits: no match
    # A run the poller could take is queued behind it rather than handed past it.
    run_id = (await client.action.invoke("job", b"y")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    assert await channel.next(0.2) is None


async def test_max_concurrency_is_honoured(client: FloClient, channel: Channel) -> None:
    keys = await register(client, max_concurrency=1)
    await client.action.invoke("job", b"x")
    assert len((await claim(client.session, keys, "w2", b"", 1, "other")).runs) == 1
    await park(client, keys)
    run_id = (await client.action.invoke("job", b"y")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING


async def test_the_rate_limit_is_honoured(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client, rate_limit=RateLimit(1, 60_000))
    await park(client, keys)
    first = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(first)).status == RunStatus.RUNNING
    assert await raw.zcard(keys.rate) == 1  # the hand-off is a start
    token = (await channel.next() or [None, None, None])[2]
    await park(client, keys, "p1#1", received=f"{first} {token}")
    second = (await client.action.invoke("job", b"y")).run_id
    assert (await client.action.status(second)).status == RunStatus.PENDING


async def test_a_handed_run_of_a_gone_owner_comes_back_through_liveness(
    redis_url: str, namespace: str, client: FloClient
) -> None:
    keys = await register(client)
    async with FloClient(redis_url, namespace=namespace) as poller:
        pubsub = poller.redis.pubsub()
        await pubsub.ssubscribe(handoff_channel(keys.tag, poller.owner_id))
        await pubsub.get_message(timeout=1.0)
        await claim(poller.session, keys, "w1", b"", 1, "p1#0", PARK_MS)
        run_id = (await client.action.invoke("job", b"x")).run_id
        assert (await client.action.status(run_id)).status == RunStatus.RUNNING
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    # The poller's process is gone (its liveness channel has no subscriber): the run is
    # taken back as any claimed run of a gone owner.
    await reclaim_gone_owners(client.session, "job", grace_ms=0)
    status = await client.action.status(run_id)
    assert status.status == RunStatus.PENDING


# --- every path that makes a run ready hands it off ---------------------------------


async def running_run(client: FloClient, keys: ActionKeys, payload: bytes = b"x") -> Any:
    """A run invoked and claimed by another poller of `client`'s owner, before any park."""
    await client.action.invoke(keys.action, payload)
    (run,) = (await claim(client.session, keys, "w2", b"", 1, "other")).runs
    return run


async def handed_run(channel: Channel, run_id: str, client: FloClient) -> list[Any]:
    message = await channel.next()
    assert message is not None and message[1] == run_id
    status = await client.action.status(run_id)
    assert (status.status, status.worker_id) == (RunStatus.RUNNING, "w1")
    return message


class Wakes:
    """Counts the wake-ups published on a queue's wake channel."""

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub

    async def count(self, within: float = 0.2) -> int:
        loop = asyncio.get_running_loop()
        end, n = loop.time() + within, 0
        while loop.time() < end:
            message = await self.pubsub.get_message(timeout=0.05)
            if message is not None and message["type"] == "smessage":
                n += 1
        return n


@pytest.fixture
async def wakes(raw: aioredis.Redis, client: FloClient) -> AsyncIterator[Wakes]:
    pubsub = raw.pubsub()
    await pubsub.ssubscribe(action_keys(client.namespace, "job").wake)
    await pubsub.get_message(timeout=1.0)
    yield Wakes(pubsub)
    await pubsub.aclose()  # type: ignore[no-untyped-call]


@pytest.mark.slow
async def test_a_retry_ready_now_is_handed_off_and_wakes_nobody(
    client: FloClient, channel: Channel, wakes: Wakes
) -> None:
    keys = await register(client, max_retries=3)
    run = await running_run(client, keys)
    await park(client, keys)
    await wakes.count()  # the invoke's
    status = await client.worker.fail(
        "w2", "job", run.run_id, "boom", WorkerFailOptions(retry=True, token=run.token)
    )
    assert status == RunStatus.PENDING  # it waits again (here: it was handed at once)
    message = await handed_run(channel, run.run_id, client)
    assert (message[0], message[3], message[7]) == ("p1#0", 2, b"x")  # attempt 2, input read
    assert message[2] > run.token  # a new fencing token
    assert await wakes.count() == 0
    # The old holder's report is refused: the run is the poller's now.
    with pytest.raises(ConflictError):
        await client.worker.complete(
            "w2", "job", run.run_id, b"", WorkerCompleteOptions(token=run.token)
        )


@pytest.mark.slow
async def test_a_retry_after_a_backoff_is_not_handed_off_early(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client, max_retries=3, retry_backoff_ms=60_000)
    run = await running_run(client, keys)
    await park(client, keys)
    await client.worker.fail(
        "w2", "job", run.run_id, "boom", WorkerFailOptions(retry=True, token=run.token)
    )
    assert await channel.next(0.2) is None
    assert (await client.action.status(run.run_id)).status == RunStatus.PENDING


async def test_a_released_run_is_handed_off(
    redis_url: str, namespace: str, client: FloClient, channel: Channel
) -> None:
    keys = await register(client)
    async with FloClient(redis_url, namespace=namespace) as other:
        run = await running_run(other, keys)
        await park(client, keys)
        await other.worker.release("w2", "job", run.run_id, run.token)
    message = await handed_run(channel, run.run_id, client)
    assert message[3] == 1  # a release spends no attempt


@pytest.mark.slow
async def test_a_release_never_hands_the_run_back_to_the_releasing_owner(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    # The releasing process is stopping: its own parked poller must not get the run.
    keys = await register(client)
    run = await running_run(client, keys)
    await park(client, keys)
    await client.worker.release("w2", "job", run.run_id, run.token)
    assert await channel.next(0.2) is None
    status = await client.action.status(run.run_id)
    assert (status.status, status.attempt) == (RunStatus.PENDING, 0)
    assert await raw.zcard(keys.parked) == 1


async def test_a_requeued_run_is_handed_off(client: FloClient, channel: Channel) -> None:
    keys = await register(client)
    run = await running_run(client, keys)
    final = WorkerFailOptions(retry=False, token=run.token)
    await client.worker.fail("w2", "job", run.run_id, "boom", final)
    await park(client, keys)
    await client.action.requeue(run.run_id)
    await handed_run(channel, run.run_id, client)


@pytest.mark.slow
async def test_a_bulk_requeue_hands_the_head_and_queues_the_rest(
    client: FloClient, raw: aioredis.Redis, channel: Channel, wakes: Wakes
) -> None:
    keys = await register(client)
    ids = []
    for priority in (5, 0, 5):
        options = ActionInvokeOptions(priority=priority)
        ids.append((await client.action.invoke("job", b"x", options)).run_id)
        await client.action.cancel(ids[-1])  # failed in this order
    await park(client, keys)
    await wakes.count()  # the invokes'
    await client.action.requeue_failed("job")
    # The run of the best priority is handed, though it failed second; the others wait
    # in order, announced.
    await handed_run(channel, ids[1], client)
    assert [m.decode() for m in await raw.zrange(keys.pending, 0, -1)] == [ids[0], ids[2]]
    assert await wakes.count() == 1


@pytest.mark.slow
async def test_invoke_many_hands_one_run_to_each_parked_poller(
    client: FloClient, raw: aioredis.Redis, channel: Channel, wakes: Wakes
) -> None:
    keys = await register(client)
    await park(client, keys, "p1#0")
    await park(client, keys, "p2#0")
    ids = [r.run_id for r in await client.action.invoke_many("job", [b"a", b"b", b"c"])]
    handed = {(await channel.next() or [None, None])[1] for _ in range(2)}
    assert handed == set(ids[:2])  # the first two, in queue order
    assert [m.decode() for m in await raw.zrange(keys.pending, 0, -1)] == ids[2:]
    assert await raw.zcard(keys.parked) == 0
    assert await wakes.count() == 1  # for the one left waiting


@pytest.mark.slow
async def test_invoke_many_handed_whole_wakes_nobody(
    client: FloClient, channel: Channel, wakes: Wakes
) -> None:
    keys = await register(client)
    await park(client, keys)
    (run_id,) = [r.run_id for r in await client.action.invoke_many("job", [b"a"])]
    await handed_run(channel, run_id, client)
    assert await wakes.count() == 0


@pytest.mark.slow
async def test_invoke_many_honours_labels_and_max_concurrency(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client, max_concurrency=2)
    await park(client, keys, "p1#0", labels=pack({"gpu": "b:true"}))
    await park(client, keys, "p2#0")
    await park(client, keys, "p3#0")
    opts = ActionInvokeOptions(labels={"gpu": True})
    ids = [r.run_id for r in await client.action.invoke_many("job", [b"a", b"b", b"c"], opts)]
    # Only the poller with the label may take them, and a park takes one run.
    assert (await channel.next() or [None, None])[1] == ids[0]
    assert await channel.next(0.2) is None
    plain = [r.run_id for r in await client.action.invoke_many("job", [b"d", b"e"])]
    # Behind the labelled runs still waiting: nothing is handed past them.
    assert await channel.next(0.2) is None
    assert await raw.zrange(keys.pending, 0, -1) == [i.encode() for i in [*ids[1:], *plain]]


@pytest.mark.slow
async def test_an_expired_lease_is_handed_off_by_the_reaper(
    client: FloClient, channel: Channel, wakes: Wakes
) -> None:
    keys = await register(client, timeout_ms=50, max_retries=3)
    run = await running_run(client, keys)
    await park(client, keys)
    await wakes.count()  # the invoke's
    await asyncio.sleep(0.1)  # past the 50 ms lease
    assert await client.action.reap("job") == 1
    message = await handed_run(channel, run.run_id, client)
    assert message[3] == 2
    assert await wakes.count() == 0


async def test_a_due_delayed_run_is_handed_off_by_the_reaper(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    options = ActionInvokeOptions(delay_ms=50)
    run_id = (await client.action.invoke("job", b"later", options)).run_id
    await asyncio.sleep(0.1)  # past the 50 ms delay
    assert await client.action.reap("job") == 1
    message = await handed_run(channel, run_id, client)
    assert message[7] == b"later"


@pytest.mark.slow
async def test_a_run_delayed_before_all_others_wakes_parked_pollers(
    client: FloClient, wakes: Wakes
) -> None:
    keys = await register(client, max_retries=3, retry_backoff_ms=60_000)
    await park(client, keys)
    # A parked poller sleeps until the due time its claim answered: a run due sooner
    # wakes it to claim and learn the new time; one due later does not.
    await client.action.invoke("job", b"x", ActionInvokeOptions(delay_ms=30_000))
    assert await wakes.count() == 1
    await client.action.invoke("job", b"x", ActionInvokeOptions(delay_ms=60_000))
    assert await wakes.count() == 0
    run = await running_run(client, keys)
    await wakes.count()
    await park(client, keys, "p1#1")
    await client.worker.fail(
        "w2", "job", run.run_id, "boom", WorkerFailOptions(retry=True, token=run.token)
    )  # due in 60 s: after the first
    assert await wakes.count() == 0


async def test_runs_a_claim_makes_ready_and_does_not_take_are_handed_off(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client)
    await park(client, keys)
    options = ActionInvokeOptions(delay_ms=50)
    ids = [(await client.action.invoke("job", b"x", options)).run_id for _ in range(3)]
    await asyncio.sleep(0.1)  # past the 50 ms delay
    # Another worker's claim promotes all three and takes one: the parked poller is
    # handed the next, the third waits, announced.
    taken = await claim(client.session, keys, "w2", b"", 1, "q#0")
    assert [r.run_id for r in taken.runs] == ids[:1]
    await handed_run(channel, ids[1], client)
    assert await raw.zrange(keys.pending, 0, -1) == [ids[2].encode()]


async def test_a_gone_owners_run_is_handed_to_a_live_parked_poller(
    redis_url: str, namespace: str, client: FloClient, channel: Channel
) -> None:
    keys = await register(client, max_retries=3)
    async with FloClient(redis_url, namespace=namespace) as other:
        await other.action.invoke("job", b"x")
        (run,) = (await claim(other.session, keys, "w9", b"", 1, "")).runs
    await park(client, keys)
    await reclaim_gone_owners(client.session, "job", grace_ms=0)
    message = await handed_run(channel, run.run_id, client)
    assert message[3] == 2  # the gone owner's attempt counts


@pytest.mark.slow
async def test_a_scheduled_occurrence_is_handed_off(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client)
    await client.action.schedule("job", timedelta(seconds=1), input=b"tick")
    await park(client, keys)
    await asyncio.sleep(1.1)  # the schedule's 1 s comes round
    assert await fire_due(client.session, "job") == 1
    message = await channel.next()
    assert message is not None and message[7] == b"tick"
    assert await raw.zcard(keys.pending) == 0


async def test_a_large_input_stays_in_redis_when_a_requeue_hands_the_run_off(
    client: FloClient, channel: Channel
) -> None:
    keys = await register(client)
    big = b"x" * 70_000
    run = await running_run(client, keys, big)
    await client.worker.fail("w2", "job", run.run_id, "e", WorkerFailOptions(retry=False))
    await park(client, keys)
    await client.action.requeue(run.run_id)
    message = await handed_run(channel, run.run_id, client)
    assert message[7] is False
    again = await claim(client.session, keys, "w1", b"", 1, "p1#0")
    assert [r.payload for r in again.runs] == [big]


# --- the worker's side (flo_redis/worker/poller.py) --------------------------------------


async def parked_pollers(raw: aioredis.Redis, action: str, namespace: str) -> int:
    return int(await raw.zcard(action_keys(namespace, action).parked))


async def test_an_idle_worker_parks_and_runs_what_it_is_handed(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await register(client)
    worker = client.new_action_worker(block_ms=5000)
    calls: list[str] = []

    @worker.action("job")
    async def job(ctx: ActionContext) -> bytes:
        calls.append(ctx.task_id)
        return ctx.payload

    async with running(worker, ready=registered):
        for i in range(5):
            await eventually(lambda: parked_pollers(raw, "job", client.namespace), bool)
            run_id = (await client.action.invoke("job", str(i).encode())).run_id
            status = await finished(client, run_id)
            assert (status.status, status.output) == (RunStatus.COMPLETED, str(i).encode())
    assert len(calls) == len(set(calls)) == 5
    assert await parked_pollers(raw, "job", client.namespace) == 0  # stopping ended it


@pytest.mark.slow
async def test_hand_offs_never_run_more_handlers_than_the_concurrency(
    client: FloClient,
) -> None:
    # One slot, two actions: the worker parks in one queue at a time at most, so a
    # hand-off never finds its slot taken.
    for name in ("a", "b"):
        await client.action.register(name)
    worker = client.new_action_worker(concurrency=1, block_ms=5000)
    active, most = 0, 0

    async def handler(ctx: ActionContext) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await asyncio.sleep(0.005)
        active -= 1

    worker.register_action("a", handler)
    worker.register_action("b", handler)
    async with running(worker, ready=registered):
        ids = []
        for i in range(30):
            ids.append((await client.action.invoke("ab"[i % 2], b"")).run_id)
            await asyncio.sleep(0.002 * (i % 3))
        for run_id in ids:
            assert (await finished(client, run_id)).status == RunStatus.COMPLETED
    assert most == 1


async def test_a_stopped_worker_is_handed_nothing(client: FloClient, raw: aioredis.Redis) -> None:
    await register(client)
    worker = client.new_action_worker(block_ms=5000)
    worker.register_action("job", lambda ctx: b"")
    async with running(worker, ready=registered):
        await eventually(lambda: parked_pollers(raw, "job", client.namespace), bool)
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert (await client.action.status(run_id)).status == RunStatus.PENDING


async def test_a_drain_ends_the_workers_parks(client: FloClient, raw: aioredis.Redis) -> None:
    await register(client)
    worker = client.new_action_worker(block_ms=30_000)
    worker.register_action("job", lambda ctx: b"")
    task = asyncio.create_task(worker.start())
    try:
        await eventually(lambda: parked_pollers(raw, "job", client.namespace), bool)
        await client.worker.drain(worker.config.worker_id)
        assert await parked_pollers(raw, "job", client.namespace) == 0
        # Told to look again, the worker hears it is draining and stops, long before
        # its 30 s poll would have ended; nothing invoked meanwhile is handed to it.
        run_id = (await client.action.invoke("job", b"x")).run_id
        await asyncio.wait_for(task, 10)
        assert (await client.action.status(run_id)).status == RunStatus.PENDING
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


class Claims:
    """Counts each worker's claim calls (the round trip a hand-off saves)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.by: dict[int, int] = {}
        claim = poller.claim

        async def counted(session: Session, *args: Any, **kwargs: Any) -> Any:
            self.by[id(session)] = self.by.get(id(session), 0) + 1
            return await claim(session, *args, **kwargs)

        monkeypatch.setattr(poller, "claim", counted)

    def of(self, worker: ActionWorker) -> int:
        return self.by.get(id(worker.session), 0)


@pytest.fixture
def claims(monkeypatch: pytest.MonkeyPatch) -> Claims:
    return Claims(monkeypatch)


class Starts:
    """A handler that notes, as each run starts, how many claims its worker had sent."""

    def __init__(self, claims: Claims) -> None:
        self.claims = claims
        self.worker: ActionWorker | None = None
        self.at: dict[str, int] = {}
        self.attempts: list[int] = []

    async def __call__(self, ctx: ActionContext) -> bytes:
        assert self.worker is not None
        self.at[ctx.task_id] = self.claims.of(self.worker)
        self.attempts.append(ctx.attempt)
        return b"ok"

    def on(self, worker: ActionWorker) -> ActionWorker:
        self.worker = worker
        worker.register_action("job", self)
        return worker


async def parks_of(raw: aioredis.Redis, action: str, namespace: str, worker_id: str) -> int:
    """How many of worker ``worker_id``'s pollers are parked in ``action``'s queue (another
    worker's parks there do not count)."""
    keys = action_keys(namespace, action)
    fields = await raw.zrange(keys.parked, 0, -1)
    memos = [await raw.hget(keys.polls, field) for field in fields]
    parks = [msgpack.unpackb(memo).get("k") for memo in memos if memo]
    return sum(1 for park in parks if park and park["w"] == worker_id)


async def parked_idle(worker: ActionWorker, raw: aioredis.Redis, claims: Claims) -> int:
    """Wait until the worker itself is parked in the queue; its claims sent until then."""
    ns = worker._parent.namespace  # type: ignore[attr-defined]
    await eventually(lambda: parks_of(raw, "job", ns, worker.config.worker_id), bool)
    return claims.of(worker)


async def started(starts: Starts, run_id: str) -> int:
    await eventually(lambda: asyncio.sleep(0, starts.at), lambda at: run_id in at)
    return starts.at[run_id]


async def test_a_parked_worker_starts_a_retry_without_a_claim(
    client: FloClient, raw: aioredis.Redis, claims: Claims
) -> None:
    await register(client, max_retries=3)
    worker = client.new_action_worker(concurrency=2, block_ms=30_000)
    before: list[int] = []
    at: list[int] = []

    @worker.action("job")
    async def job(ctx: ActionContext) -> bytes:
        at.append(claims.of(worker))
        if ctx.attempt == 1:
            before.append(await parked_idle(worker, raw, claims))
            raise RuntimeError("again")
        return b"ok"

    async with running(worker, ready=registered):
        run_id = (await client.action.invoke("job", b"")).run_id
        assert (await finished(client, run_id)).status == RunStatus.COMPLETED
    assert at[1] == before[0]  # the retry was handed: no claim between


async def test_a_parked_worker_starts_a_released_run_without_a_claim(
    client: FloClient, raw: aioredis.Redis, claims: Claims
) -> None:
    await register(client)
    holding = asyncio.Event()
    first = client.new_action_worker(block_ms=30_000)

    @first.action("job")
    async def hold(ctx: ActionContext) -> bytes:
        holding.set()
        await asyncio.sleep(60)
        return b""

    starts = Starts(claims)
    second = starts.on(client.new_action_worker(block_ms=30_000))
    async with running(first, ready=registered) as first_task:
        run_id = (await client.action.invoke("job", b"")).run_id
        await asyncio.wait_for(holding.wait(), 10)
        async with running(second, ready=registered):
            before = await parked_idle(second, raw, claims)
            first.abort()  # gives the run back without spending its attempt
            await asyncio.wait_for(first_task, 10)
            assert await started(starts, run_id) == before
            assert (await finished(client, run_id)).status == RunStatus.COMPLETED
    assert starts.attempts == [1]


async def test_a_parked_worker_starts_a_requeued_run_without_a_claim(
    client: FloClient, raw: aioredis.Redis, claims: Claims
) -> None:
    keys = await register(client)
    run = await running_run(client, keys)
    final = WorkerFailOptions(retry=False, token=run.token)
    await client.worker.fail("w2", "job", run.run_id, "boom", final)
    starts = Starts(claims)
    worker = starts.on(client.new_action_worker(block_ms=30_000))
    async with running(worker, ready=registered):
        before = await parked_idle(worker, raw, claims)
        await client.action.requeue(run.run_id)
        assert await started(starts, run.run_id) == before


async def test_parked_workers_start_runs_of_invoke_many_without_a_claim(
    client: FloClient, raw: aioredis.Redis, claims: Claims
) -> None:
    await register(client)
    starts = [Starts(claims), Starts(claims)]
    workers = [s.on(client.new_action_worker(block_ms=30_000)) for s in starts]
    async with running(workers[0], ready=registered), running(workers[1], ready=registered):
        before = [await parked_idle(w, raw, claims) for w in workers]
        ids = [r.run_id for r in await client.action.invoke_many("job", [b"a", b"b"])]
        for run_id in ids:
            await finished(client, run_id)
    # One run to each worker, both handed: neither claimed before its run started.
    assert sorted(len(s.at) for s in starts) == [1, 1]
    assert [list(s.at.values()) for s in starts] == [[before[0]], [before[1]]]


@pytest.mark.slow
async def test_a_parked_worker_starts_a_gone_owners_run_without_a_claim(
    redis_url: str, namespace: str, client: FloClient, raw: aioredis.Redis, claims: Claims
) -> None:
    keys = await register(client, max_retries=3)
    async with FloClient(redis_url, namespace=namespace) as other:
        await other.action.invoke("job", b"x")
        (run,) = (await claim(other.session, keys, "w9", b"", 1, "")).runs
    # Its process is gone: the worker's reaper takes the run back after the grace.
    starts = Starts(claims)
    worker = starts.on(client.new_action_worker(block_ms=30_000))
    async with running(worker, ready=registered):
        before = await parked_idle(worker, raw, claims)
        assert await started(starts, run.run_id) == before
    assert starts.attempts == [2]


@pytest.mark.slow
async def test_a_parked_worker_starts_a_scheduled_run_without_a_claim(
    client: FloClient, raw: aioredis.Redis, claims: Claims
) -> None:
    await register(client)
    await client.action.schedule("job", timedelta(seconds=1), input=b"tick")
    starts = Starts(claims)
    worker = starts.on(client.new_action_worker(block_ms=30_000))
    async with running(worker, ready=registered):
        before = await parked_idle(worker, raw, claims)
        await eventually(lambda: asyncio.sleep(0, starts.at), bool)
        assert list(starts.at.values())[:1] == [before]


async def test_a_parked_worker_learns_the_due_time_of_a_run_delayed_before_all_others(
    client: FloClient, raw: aioredis.Redis, claims: Claims
) -> None:
    await register(client)
    starts = Starts(claims)
    worker = starts.on(client.new_action_worker(block_ms=30_000))
    async with running(worker, ready=registered):
        before = await parked_idle(worker, raw, claims)
        options = ActionInvokeOptions(delay_ms=20_000)
        await client.action.invoke("job", b"", options)
        # Woken at once, it claims (nothing yet) and sleeps until the run's due time,
        # rather than until the upkeep finds the run due.
        await eventually(lambda: asyncio.sleep(0, claims.of(worker)), lambda n: n > before)
        assert starts.at == {}


async def lane_commands(client: FloClient, raw: aioredis.Redis, calls: Any) -> list[str]:
    """The commands the client's script lane sent while ``calls()`` ran, as MONITOR saw
    them."""
    lane = client.session.runner.lane
    assert lane is not None and lane._conn is not None and lane._conn._writer is not None
    port = str(lane._conn._writer.get_extra_info("sockname")[1])
    seen: list[str] = []
    async with raw.monitor() as monitor:
        await calls()
        await raw.echo("flo-test-end")
        while (command := await monitor.next_command())["command"] != "ECHO flo-test-end":
            if command["client_port"] == port:
                seen.append(command["command"].split()[0].upper())
    return seen


@pytest.mark.slow
async def test_an_invoke_after_a_hand_off_is_led_so_its_message_leaves_first(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client)
    invoked: list[str] = []

    async def invoke() -> None:
        invoked.append((await client.action.invoke("job", b"x")).run_id)

    call = script_command(client)  # FCALL, or EVALSHA
    await park(client, keys)
    assert await lane_commands(client, raw, invoke) == [call]  # nothing told it yet
    first = await channel.next()
    assert first is not None and first[:2] == ["p1#0", invoked[0]]
    # Handed: the next invoke is led by a TIME, so Redis writes the hand-off message
    # before the invoke's reply (flo_redis/_wire/lane.py). Handed again, recorded alike.
    await park(client, keys, "p1#1", received=f"{invoked[0]} {first[2]}")
    assert await lane_commands(client, raw, invoke) == ["TIME", call]
    second = await channel.next()
    assert second is not None and second[:2] == ["p1#1", invoked[1]]
    status = await client.action.status(invoked[1])
    assert status.status == RunStatus.RUNNING
    await client.worker.complete(
        "w1", "job", invoked[1], b"done", WorkerCompleteOptions(token=second[2])
    )
    # Nobody parked: led once more (the last was handed), queued, and not led after.
    assert await lane_commands(client, raw, invoke) == ["TIME", call]
    assert await lane_commands(client, raw, invoke) == [call]
    assert [(await client.action.status(r)).status for r in invoked[2:]] == [
        RunStatus.PENDING,
        RunStatus.PENDING,
    ]
    assert await channel.next(timeout=0.2) is None


async def test_a_park_never_keeps_the_last_free_slot_from_a_queue_with_work(
    client: FloClient,
) -> None:
    # Four slots, two actions, six runs waiting in "a" and none in "b". The first poll
    # parks in the empty "b" (a park holds a slot) and takes three runs of "a". With
    # those three still running, one slot is free: the next poll must take the fourth
    # run of "a" -- ending the park in "b" to make room -- not park in "b" again and
    # sleep until its block time while "a"'s runs wait.
    for name in ("a", "b"):
        await client.action.register(name)
    ids = [(await client.action.invoke("a", str(i).encode())).run_id for i in range(6)]
    worker = client.new_action_worker(concurrency=4, block_ms=60_000)
    release = asyncio.Event()
    began: list[str] = []

    async def handler(ctx: ActionContext) -> None:
        began.append(ctx.task_id)
        await release.wait()

    worker.register_action("a", handler)
    worker.register_action("b", handler)
    async with running(worker, ready=registered):
        try:
            await eventually(lambda: asyncio.sleep(0, len(began)), lambda n: n >= 4)
            assert len(began) == 4  # never more than the concurrency
        finally:
            release.set()
        for run_id in ids:
            assert (await finished(client, run_id)).status == RunStatus.COMPLETED


@pytest.mark.slow
async def test_a_poll_sent_again_after_a_lost_reply_still_takes_new_work(
    client: FloClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first poll claims queue "y" (two runs), then loses its connection on the claim
    # of "x": the worker sends that poll again under the same poll id, so a reply lost
    # on the way would be answered again. "y"'s reply did arrive, though: its two runs
    # start, and "y"'s next claim must not be answered with them again (the worker
    # drops runs it has) in place of the runs invoked there since.
    for name in ("x", "y"):
        await client.action.register(name)
    first = [(await client.action.invoke("y", b"first")).run_id for _ in range(2)]
    claim = poller.claim
    state = {"armed": False, "failed": 0}

    async def claim_losing_x_once(session: Session, keys: ActionKeys, *args: Any) -> Any:
        if keys.action == "x" and state["armed"] and not state["failed"]:
            state["failed"] += 1
            raise redis.exceptions.ConnectionError("connection lost (test)")
        reply = await claim(session, keys, *args)
        if keys.action == "y" and reply.runs:
            state["armed"] = True
        return reply

    monkeypatch.setattr(poller, "claim", claim_losing_x_once)
    worker = client.new_action_worker(concurrency=4, block_ms=60_000)
    release = asyncio.Event()
    began: list[bytes] = []

    async def handler(ctx: ActionContext) -> None:
        began.append(ctx.payload)
        if ctx.payload == b"first":
            await release.wait()

    worker.register_action("x", handler)
    worker.register_action("y", handler)
    async with running(worker, ready=registered):
        try:
            await eventually(lambda: asyncio.sleep(0, state["failed"]), bool)
            later = [(await client.action.invoke("y", b"later")).run_id for _ in range(2)]
            for run_id in later:
                assert (await finished(client, run_id)).status == RunStatus.COMPLETED
        finally:
            release.set()
        for run_id in first:
            assert (await finished(client, run_id)).status == RunStatus.COMPLETED
    assert sorted(began) == [b"first", b"first", b"later", b"later"]


async def test_the_poller_passes_each_hand_out_on_once_per_token(client: FloClient) -> None:
    # A run can reach the poller twice, by its message and again in a claim's answer (a
    # message heard late): it is started once per hand-out, one run or a batch.
    poller = ActionPoller(
        client.session, client.worker, "w1", ["job"], lambda runs: None, health_ttl_s=30.0
    )

    def run(run_id: str, token: int) -> Claimed:
        return Claimed("job", run_id, token, 1, 0, b"x")

    assert poller._fresh("job", [run("job:1", 1)]) == [run("job:1", 1)]
    assert poller._fresh("job", [run("job:1", 1)]) == []  # heard, then claimed: once
    assert poller._fresh("job", [run("job:1", 2)]) == [run("job:1", 2)]  # handed out again
    batch = [run("job:1", 2), run("job:2", 1), run("job:3", 1), run("job:2", 1)]
    assert poller._fresh("job", batch) == [run("job:2", 1), run("job:3", 1)]
    assert poller._fresh("job", [run("job:3", 1), run("job:4", 1)]) == [run("job:4", 1)]
    # What the next claim says it received last: the last run of each answer.
    assert poller._received["job"] == "job:4 1"
