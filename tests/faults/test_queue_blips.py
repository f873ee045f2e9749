"""``client.queue`` through blips: a dequeue whose reply is lost and then meets an outage
is resent under its poll id until Redis answers, so what the lost reply carried is handed
over (not stranded, no delivery spent unseen), and gives up, naming its poll id, only once
those deliveries would have timed out anyway; and a DLQ requeue never hands out a token
again, so a report from a delivery before the dead letter stays refused."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from polling import eventually
from proxy import Proxy
from redis_server import RedisServer

from flo_redis import (
    AckOptions,
    ConflictError,
    DequeueOptions,
    DequeueReplyLostError,
    FloClient,
    Message,
    NackOptions,
    NotConnectedError,
    Reason,
)
from flo_redis._wire.keys import queue_keys
from flo_redis._wire.runner import SCRIPTS

Q = "blips"
DEQUEUE_SHA = SCRIPTS["queue_dequeue"].sha.encode()


def delivered(messages: list[Message]) -> list[tuple[int, int]]:
    return [(m.seq, m.delivery_count) for m in messages]


async def acked(client: FloClient, seq: int, token: int) -> bool:
    try:
        await client.queue.ack(Q, [seq], AckOptions(tokens={seq: token}))
    except NotConnectedError:
        return False
    return True


async def lose_reply_then_black_out(proxy: Proxy) -> None:
    """Let the next dequeue run in Redis, drop its reply, and make Redis unreachable at
    once, before the client can resend (the proxy shares the test's event loop)."""
    proxy.drop_reply_after(DEQUEUE_SHA)
    await eventually(lambda: asyncio.sleep(0, proxy.dropped_replies), interval=0)
    proxy.blackout()


# --- a lost reply, then an outage ---------------------------------------------------------


async def test_a_lost_dequeue_reply_then_an_outage_hands_over_what_it_carried(
    proxy: Proxy, raw: aioredis.Redis, namespace: str
) -> None:
    once = DequeueOptions(visibility_timeout_ms=3000, max_deliveries=1)
    async with FloClient(proxy.url, namespace=namespace) as client:
        seq = await client.queue.enqueue(Q, b"job")
        dequeue = asyncio.create_task(client.queue.dequeue(Q, 1, once))
        await lose_reply_then_black_out(proxy)
        await asyncio.sleep(1.0)  # the outage's length
        assert not dequeue.done()  # still asking, through the outage
        proxy.restore()
        got = (await dequeue).messages
        # The replay is the delivery the lost reply carried: the same token, nothing
        # spent unseen, nothing dead-lettered.
        assert delivered(got) == [(seq, 1)]
        assert proxy.forwarded_count(DEQUEUE_SHA) >= 2
        keys = queue_keys(namespace, Q)
        assert await raw.zcard(keys.leases) == 1 and await raw.zcard(keys.dead) == 0
        # A pooled connection cut by the outage may fail the first ack; a resent ack is
        # answered as success, so resend it as a caller would.
        await eventually(lambda: acked(client, seq, 1))
        assert await raw.hlen(keys.msgs) == 0
        assert (await client.queue.dlq_list(Q)).messages == []


async def test_a_dequeue_unanswered_past_its_visibility_timeout_names_its_poll_id(
    proxy: Proxy, namespace: str
) -> None:
    short = DequeueOptions(visibility_timeout_ms=800)
    async with FloClient(proxy.url, namespace=namespace) as client:
        seq = await client.queue.enqueue(Q, b"job")
        dequeue = asyncio.create_task(client.queue.dequeue(Q, 1, short))
        await lose_reply_then_black_out(proxy)
        with pytest.raises(DequeueReplyLostError) as info:
            await dequeue
        proxy.restore()
        error = info.value
        assert isinstance(error, NotConnectedError)  # still a lost connection to callers
        assert error.visibility_timeout_ms == 800 and error.poll_id in str(error)
        assert "visibility timeout (800 ms), which runs out about now" in str(error)
        # The delivery the lost reply carried times out: the message comes back, counted.
        again = await eventually(lambda: client.queue.dequeue(Q, 1), lambda got: bool(got.messages))
        assert delivered(again.messages) == [(seq, 2)]


async def test_a_given_up_dequeue_resent_with_its_poll_id_gets_what_it_was_handed(
    proxy: Proxy, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Giving up long before the visibility timeout (here 0.5 s, not 60 s), to see the
    # caller's way to the deliveries it would otherwise wait for.
    monkeypatch.setattr("flo_redis.queue.operations.RESEND_AT_MOST_S", 0.5)
    mine = DequeueOptions(visibility_timeout_ms=60_000, poll_id="consumer-7#41")
    async with FloClient(proxy.url, namespace=namespace) as client:
        seq = await client.queue.enqueue(Q, b"job")
        dequeue = asyncio.create_task(client.queue.dequeue(Q, 1, mine))
        await lose_reply_then_black_out(proxy)
        with pytest.raises(DequeueReplyLostError) as info:
            await dequeue
        proxy.restore()
        assert info.value.poll_id == "consumer-7#41"
        assert "DequeueOptions(poll_id='consumer-7#41')" in str(info.value)
        again = await client.queue.dequeue(Q, 1, DequeueOptions(poll_id=info.value.poll_id))
        assert delivered(again.messages) == [(seq, 1)]  # the lost delivery, not a new one
        sent = [d for d in proxy.forwarded if DEQUEUE_SHA in d]
        assert len(sent) == 2 and all(b"consumer-7#41" in d for d in sent)


# --- a DLQ requeue never reuses a token --------------------------------------------------


async def dead_letter(client: FloClient, seq: int) -> Message:
    """Deliver ``seq`` once, let that delivery time out and be dead-lettered; the delivery."""
    once = DequeueOptions(visibility_timeout_ms=100, max_deliveries=1)
    (msg,) = (await client.queue.dequeue(Q, 1, once)).messages

    async def dead() -> list[int]:
        await client.queue.dequeue(Q, 1)  # a dequeue takes expired deliveries back
        return [m.seq for m in (await client.queue.dlq_list(Q)).messages]

    await eventually(dead, lambda seqs: seqs == [seq])
    return msg


async def test_a_stale_ack_from_before_a_dlq_requeue_is_refused_and_changes_nothing(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    seq = await client.queue.enqueue(Q, b"job")
    old = await dead_letter(client, seq)
    assert old.delivery_count == 1
    await client.queue.dlq_requeue(Q, [seq])
    # The visible count goes on from where it was (it is the token) ...
    assert delivered((await client.queue.peek(Q, 5)).messages) == [(seq, 1)]
    (new,) = (
        await client.queue.dequeue(Q, 1, DequeueOptions(visibility_timeout_ms=60_000))
    ).messages
    assert new.delivery_count == 2 > old.delivery_count
    keys = queue_keys(namespace, Q)
    before = (await raw.hget(keys.msgs, str(seq)), await raw.zscore(keys.leases, str(seq)))
    # ... so the long-stale holder of delivery 1 is refused, whatever it reports.
    with pytest.raises(ConflictError) as info:
        await client.queue.ack(Q, [seq], AckOptions(tokens={seq: old.delivery_count}))
    assert info.value.reason == Reason.STALE_REPORT
    with pytest.raises(ConflictError):
        await client.queue.nack(Q, [seq], NackOptions(tokens={seq: old.delivery_count}))
    assert (await raw.hget(keys.msgs, str(seq)), await raw.zscore(keys.leases, str(seq))) == before
    assert await raw.hget(keys.bodies, str(seq)) == b"job"
    # The current holder's ack is taken.
    await client.queue.ack(Q, [seq], AckOptions(tokens={seq: new.delivery_count}))
    assert await raw.hlen(keys.msgs) == 0 and await raw.zcard(keys.leases) == 0


async def test_after_a_dlq_requeue_max_deliveries_counts_the_deliveries_since(
    client: FloClient,
) -> None:
    seq = await client.queue.enqueue(Q, b"poison")
    twice = DequeueOptions(max_deliveries=2)
    for _round in range(2):
        tokens = []
        for _ in range(2):
            (msg,) = (await client.queue.dequeue(Q, 1, twice)).messages
            tokens.append(msg.delivery_count)
            await client.queue.nack(Q, [seq], NackOptions(tokens={seq: msg.delivery_count}))
        assert (await client.queue.dequeue(Q, 1, twice)).messages == []
        assert delivered((await client.queue.dlq_list(Q)).messages) == [(seq, tokens[-1])]
        await client.queue.dlq_requeue(Q, [seq])
    # Tokens only grew: 1, 2, then 3, 4 after the first requeue; now 5.
    assert tokens == [3, 4]
    (back,) = (await client.queue.dequeue(Q, 1, twice)).messages
    assert back.delivery_count == 5


async def test_a_dequeue_that_never_reaches_redis_fails_at_once() -> None:
    # Nothing could have been handed out, so there is nothing to resend for: the error
    # comes as it is (NotConnectedError), not after the visibility timeout.
    server = RedisServer().start()
    try:
        async with FloClient(server.url, namespace="down") as client:
            await client.queue.enqueue(Q, b"x")
            server.stop()
            options = DequeueOptions(visibility_timeout_ms=600_000)
            with pytest.raises(NotConnectedError) as info:
                await asyncio.wait_for(client.queue.dequeue(Q, 1, options), 30)
            assert not isinstance(info.value, DequeueReplyLostError)
    finally:
        server.discard()
