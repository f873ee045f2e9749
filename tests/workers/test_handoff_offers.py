"""A hand-off is an offer (lua/lib/offer.lua): a run handed to a parked poller that
states an offer window must be accepted within it — by the worker's accept, sent as the
handler starts, or by a touch, progress, a complete or fail, or the poller's next claim —
or it goes back to the head of its queue, fenced (the late holder's reports are
refused) and without spending its attempt. These call the scripts directly, with a
poller that listens on its hand-off channel and never accepts (as a frozen one);
test_handoff_frozen.py has the worker processes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from handoff import PARK_MS, Channel, channel, late_reports_refused, register
from polling import eventually, finished, registered, running

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ConflictError,
    FloClient,
    NotFoundError,
    RateLimit,
    RunStatus,
    WorkerCompleteOptions,
    WorkerFailOptions,
    WorkerTouchOptions,
)
from flo_redis._session.reclaim import reclaim_gone_owners
from flo_redis._wire.keys import ActionKeys, action_keys, handoff_channel
from flo_redis.actions.claims import claim
from flo_redis.worker.progress import report_progress

__all__ = ["channel"]  # the hand-off channel fixture, used here too

OFFER_MS = 500
HOUR_MS = 3_600_000


async def park(
    client: FloClient, keys: ActionKeys, poll_id: str = "p1#0", offer_ms: int = OFFER_MS
) -> None:
    """Park poller ``poll_id``'s poller (worker w1) stating an offer window."""
    reply = await claim(client.session, keys, "w1", b"", 1, poll_id, PARK_MS, "", offer_ms)
    assert reply.runs == ()


async def offered(
    client: FloClient, channel: Channel, payload: bytes = b"x", **options: Any
) -> tuple[str, int, int]:
    """Invoke a run that is handed to the parked poller: its id, token and hand-off ms."""
    opts = ActionInvokeOptions(**options) if options else None
    run_id = (await client.action.invoke("job", payload, opts)).run_id
    message = await channel.next()
    assert message is not None and message[1] == run_id
    return run_id, message[2], message[6]


async def window_passes(raw: aioredis.Redis, keys: ActionKeys, run_id: str) -> None:
    """The offer's window passes: its deadline is moved into the past, as the clock
    passing it would (the scripts read Redis's clock)."""
    assert await raw.zadd(keys.leases, {run_id: 1}, xx=True, ch=True) == 1


async def reap(client: FloClient) -> None:
    await client.action.reap("job")


async def reclaim(client: FloClient) -> None:
    await reclaim_gone_owners(client.session, "job", grace_ms=1000)


async def claimed_ids(client: FloClient, keys: ActionKeys, n: int) -> list[str]:
    """The ids a claim of ``n`` by another worker takes, in queue order."""
    reply = await claim(client.session, keys, "w2", b"", n, "")
    return [run.run_id for run in reply.runs]


async def test_a_handed_run_is_leased_only_for_the_offer_window(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client, timeout_ms=60_000)
    await park(client, keys)
    run_id, _token, handed_ms = await offered(client, channel)
    status = await client.action.status(run_id)
    assert (status.status, status.attempt) == (RunStatus.RUNNING, 1)
    assert await raw.zscore(keys.leases, run_id) == handed_ms + OFFER_MS


@pytest.mark.parametrize("taken_back_by", [reap, reclaim])
async def test_an_offer_not_accepted_goes_back_to_the_head_unspent_and_fenced(
    client: FloClient,
    raw: aioredis.Redis,
    channel: Channel,
    taken_back_by: Callable[[FloClient], Awaitable[None]],
) -> None:
    # One attempt in all: a lease expiry that spent it would end the run TIMED_OUT.
    keys = await register(client, timeout_ms=60_000, max_retries=1)
    await park(client, keys)
    first, token, _ = await offered(client, channel)
    later = (await client.action.invoke("job", b"y")).run_id  # queued: nobody parked
    await window_passes(raw, keys, first)
    await taken_back_by(client)
    status = await client.action.status(first)
    assert (status.status, status.attempt) == (RunStatus.PENDING, 0)
    stats = await client.action.stats("job")
    assert (stats.offers_expired, stats.reclaimed_deadline) == (1, 0)
    await late_reports_refused(client, first, token)
    # Next in line, ahead of the run queued after it; handed out again under a new token.
    assert await claimed_ids(client, keys, 2) == [first, later]
    again = await client.action.status(first)
    assert (again.status, again.attempt, again.worker_id) == (RunStatus.RUNNING, 1, "w2")
    assert again.token > token


@pytest.mark.slow
async def test_an_offer_comes_back_by_itself_within_the_window(
    client: FloClient, channel: Channel
) -> None:
    # A worker's reaper, running beside it, takes back what nobody accepted in time.
    keys = await register(client, timeout_ms=60_000, max_retries=1)
    await park(client, keys, offer_ms=200)
    run_id, token, _ = await offered(client, channel)
    worker = client.new_action_worker(block_ms=1000)
    started: list[tuple[str, int, int]] = []

    @worker.action("job")
    async def job(ctx: ActionContext) -> bytes:
        started.append((ctx.task_id, ctx.attempt, ctx.token))
        return b"done"

    async with running(worker, ready=registered):
        done = await finished(client, run_id)
    assert done.status == RunStatus.COMPLETED
    assert [(r, a) for r, a, _ in started] == [(run_id, 1)]
    assert started[0][2] > token
    assert (await client.action.stats("job")).offers_expired == 1


async def test_a_claim_takes_back_an_expired_offer_and_takes_it_first(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client, timeout_ms=60_000, max_retries=1)
    await park(client, keys)
    first, token, _ = await offered(client, channel)
    later = (await client.action.invoke("job", b"y")).run_id
    await window_passes(raw, keys, first)
    assert await claimed_ids(client, keys, 1) == [first]
    status = await client.action.status(first)
    assert (status.status, status.attempt, status.worker_id) == (RunStatus.RUNNING, 1, "w2")
    assert (await client.action.status(later)).status == RunStatus.PENDING
    await late_reports_refused(client, first, token)


async def test_a_new_run_offered_back_keeps_its_place_among_priorities(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    # Lower values first; within one priority, first come first served.
    keys = await register(client, timeout_ms=60_000)
    await park(client, keys)
    offered_id, _, _ = await offered(client, channel, priority=5)
    queued = {}
    for name, priority in (("same_later", 5), ("higher", 1), ("lower", 9)):
        opts = ActionInvokeOptions(priority=priority)
        queued[name] = (await client.action.invoke("job", b"q", opts)).run_id
    await window_passes(raw, keys, offered_id)
    await reap(client)
    order = [queued["higher"], offered_id, queued["same_later"], queued["lower"]]
    assert await claimed_ids(client, keys, 4) == order


async def test_a_queued_run_offered_back_goes_back_to_its_own_place(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    # Two delayed runs fall due together: the first is handed from the head of the
    # queue, the second waits behind it (one poller parked). Offered back, the first
    # returns ahead of the second, not behind the runs queued since.
    keys = await register(client, timeout_ms=60_000)
    later = ActionInvokeOptions(delay_ms=HOUR_MS)
    ids = [(await client.action.invoke("job", p, later)).run_id for p in (b"a", b"b")]
    await park(client, keys)
    await raw.zadd(keys.delayed, dict.fromkeys(ids, 1), xx=True)  # both due now
    await reap(client)
    message = await channel.next()
    assert message is not None and message[1] == ids[0]
    newest = (await client.action.invoke("job", b"c")).run_id
    await window_passes(raw, keys, ids[0])
    await reap(client)
    assert await claimed_ids(client, keys, 3) == [ids[0], ids[1], newest]


async def test_a_run_whose_offers_keep_running_out_spends_its_attempt_the_fourth_time(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    # As when its handler keeps every worker from accepting it (an async handler that
    # blocks the event loop past the window): it may not go round for ever unspent.
    keys = await register(client, timeout_ms=60_000, max_retries=1)
    await park(client, keys, "p1#0")
    run_id, _, _ = await offered(client, channel)
    for n in range(2, 5):
        await park(client, keys, f"p{n}#0")  # offered it when it comes back
        await window_passes(raw, keys, run_id)
        await reap(client)
        message = await channel.next()
        assert message is not None and message[1] == run_id
        status = await client.action.status(run_id)
        assert (status.status, status.attempt) == (RunStatus.RUNNING, 1)
    await window_passes(raw, keys, run_id)
    await reap(client)
    status = await client.action.status(run_id)
    assert (status.status, status.attempt) == (RunStatus.TIMED_OUT, 1)
    assert "offer not accepted" in (status.error_message or "")
    assert (await client.action.stats("job")).offers_expired == 4


async def test_an_offer_not_accepted_leaves_the_rate_window(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    # One start a minute: the offer logged one; it never started, so it takes it back.
    keys = await register(client, timeout_ms=60_000, rate_limit=RateLimit(1, 60_000))
    await park(client, keys)
    run_id, _, _ = await offered(client, channel)
    assert await raw.zcard(keys.rate) == 1
    await window_passes(raw, keys, run_id)
    await reap(client)
    assert await raw.zcard(keys.rate) == 0
    assert await claimed_ids(client, keys, 1) == [run_id]


async def test_an_offer_to_a_gone_owner_comes_back_unspent(
    redis_url: str, namespace: str, client: FloClient, raw: aioredis.Redis
) -> None:
    keys = await register(client, timeout_ms=60_000, max_retries=1)
    async with FloClient(redis_url, namespace=namespace) as poller:
        pubsub = poller.redis.pubsub()
        await pubsub.ssubscribe(handoff_channel(keys.tag, poller.owner_id))
        await pubsub.get_message(timeout=1.0)
        await park(poller, keys)
        run_id = (await client.action.invoke("job", b"x")).run_id
        later = (await client.action.invoke("job", b"y")).run_id
        assert (await client.action.status(run_id)).status == RunStatus.RUNNING
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    await reclaim_gone_owners(client.session, "job", grace_ms=0)
    status = await client.action.status(run_id)
    assert (status.status, status.attempt) == (RunStatus.PENDING, 0)
    assert await claimed_ids(client, keys, 2) == [run_id, later]


# --- what accepts an offer -----------------------------------------------------------


async def accepted(client: FloClient, raw: aioredis.Redis, keys: ActionKeys, run_id: str) -> None:
    """The run's offer was accepted: it holds its whole lease, and once that runs out
    the attempt counts (its only one: it ends TIMED_OUT, not back in the queue)."""
    assert (await raw.zscore(keys.leases, run_id) or 0) >= await server_ms(raw) + 50_000
    await window_passes(raw, keys, run_id)
    await reap(client)
    status = await client.action.status(run_id)
    assert (status.status, status.attempt) == (RunStatus.TIMED_OUT, 1)


async def server_ms(raw: aioredis.Redis) -> int:
    seconds, micros = await raw.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def test_the_workers_accept_answers_each_run_on_its_own(
    client: FloClient, raw: aioredis.Redis, channel: Channel
) -> None:
    keys = await register(client, timeout_ms=60_000, max_retries=1)
    await park(client, keys, "p1#0")
    first, first_token, _ = await offered(client, channel)
    await park(client, keys, "p2#0")
    second, second_token, _ = await offered(client, channel)
    await park(client, keys, "p3#0")
    gone, gone_token, _ = await offered(client, channel)
    await window_passes(raw, keys, gone)
    await reap(client)  # back in the queue: its accept comes too late
    answers = await client.worker.accept(
        "w1",
        "job",
        [(first, first_token), (second, second_token), (gone, gone_token), (first, first_token)],
    )
    assert answers[0] is None and answers[1] is None and answers[3] is None
    assert isinstance(answers[2], ConflictError)
    for run_id in (first, second):
        await accepted(client, raw, keys, run_id)


async def test_an_accept_of_an_unknown_run_is_refused(client: FloClient) -> None:
    await register(client)
    (answer,) = await client.worker.accept("w1", "job", [("job:999", 7)])
    assert isinstance(answer, NotFoundError)


async def by_touch(client: FloClient, run_id: str, token: int) -> None:
    opts = WorkerTouchOptions(extend_ms=1000, token=token)
    await client.worker.touch("w1", "job", run_id, opts)


async def by_progress(client: FloClient, run_id: str, token: int) -> None:
    await report_progress(client.session, "w1", "job", run_id, token, b"50")


async def by_next_claim(client: FloClient, run_id: str, token: int) -> None:
    # The poller's next poll names the run it received there.
    keys = action_keys(client.namespace, "job")
    reply = await claim(client.session, keys, "w1", b"", 1, "p1#1", 0, f"{run_id} {token}")
    assert reply.runs == ()


async def by_retried_claim(client: FloClient, run_id: str, token: int) -> None:
    # The park's own claim sent again (its reply was lost) answers with the run.
    keys = action_keys(client.namespace, "job")
    (run,) = (await claim(client.session, keys, "w1", b"", 1, "p1#0")).runs
    assert (run.run_id, run.token) == (run_id, token)


async def by_claim_of_a_run_not_received(client: FloClient, run_id: str, token: int) -> None:
    # The next poll says it received nothing: the claim answers with the run.
    keys = action_keys(client.namespace, "job")
    (run,) = (await claim(client.session, keys, "w1", b"", 1, "p1#1")).runs
    assert (run.run_id, run.token) == (run_id, token)


@pytest.mark.parametrize(
    "accept",
    [by_touch, by_progress, by_next_claim, by_retried_claim, by_claim_of_a_run_not_received],
)
async def test_a_touch_progress_or_the_next_claim_accepts_an_offer(
    client: FloClient,
    raw: aioredis.Redis,
    channel: Channel,
    accept: Callable[[FloClient, str, int], Awaitable[None]],
) -> None:
    keys = await register(client, timeout_ms=60_000, max_retries=1)
    await park(client, keys)
    run_id, token, _ = await offered(client, channel)
    await accept(client, run_id, token)
    await accepted(client, raw, keys, run_id)
    assert (await client.action.stats("job")).offers_expired == 0


@pytest.mark.parametrize("retry", [True, False])
async def test_a_report_accepts_an_offer_and_a_later_accept_is_answered_ok(
    client: FloClient, channel: Channel, retry: bool
) -> None:
    keys = await register(client, timeout_ms=60_000, max_retries=3)
    await park(client, keys)
    run_id, token, _ = await offered(client, channel)
    if retry:
        await client.worker.fail("w1", "job", run_id, "e", WorkerFailOptions(token=token))
        want = (RunStatus.PENDING, 1)  # the attempt was made: it counts
    else:
        opts = WorkerCompleteOptions(token=token)
        await client.worker.complete("w1", "job", run_id, b"ok", opts)
        want = (RunStatus.COMPLETED, 1)
    # The worker's own accept, sent as the handler started, may land after the report.
    assert await client.worker.accept("w1", "job", [(run_id, token)]) == [None]
    status = await client.action.status(run_id)
    assert (status.status, status.attempt) == want


# --- a real worker accepts --------------------------------------------------------------


@pytest.mark.slow
async def test_an_idle_worker_accepts_what_it_is_handed_off_its_handlers_path(
    client: FloClient, raw: aioredis.Redis
) -> None:
    # Handlers that outlast a short window: each run is accepted as it starts, so none
    # goes back to the queue; each runs once, on its first attempt.
    await register(client, timeout_ms=60_000, max_retries=1)
    keys = action_keys(client.namespace, "job")
    worker = client.new_action_worker(concurrency=2, block_ms=30_000, offer_window_ms=200)
    ran: list[tuple[str, int]] = []

    @worker.action("job")
    async def job(ctx: ActionContext) -> bytes:
        ran.append((ctx.task_id, ctx.attempt))
        await asyncio.sleep(0.5)
        return b"done"

    async with running(worker, ready=registered):
        run_ids = []
        for _ in range(4):
            await eventually(lambda: raw.zcard(keys.parked))
            run_ids.append((await client.action.invoke("job", b"x")).run_id)
            await eventually(lambda: asyncio.sleep(0, len(ran) == len(run_ids)))
        for run_id in run_ids:
            assert (await finished(client, run_id)).status == RunStatus.COMPLETED
    assert sorted(ran) == sorted((run_id, 1) for run_id in run_ids)
    stats = await client.action.stats("job")
    assert (stats.offers_expired, stats.stale_refused) == (0, 0)
