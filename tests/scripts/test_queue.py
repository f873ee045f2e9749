"""``client.queue`` end to end: flo's signatures with at-least-once delivery — strict
priorities, blocking dequeue woken by enqueue, ack, nack, visibility timeout, dead letters
and requeue, fencing, a SIGKILLed consumer's messages back through owner liveness, bad
input refused before anything is written."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from polling import eventually, watched
from proxy import Proxy

from flo_redis import (
    AckOptions,
    BlockTooLongError,
    ConflictError,
    DequeueOptions,
    DlqListOptions,
    EnqueueOptions,
    FloClient,
    Message,
    NackOptions,
    NotFoundError,
    Reason,
    StatusCode,
    ValidationError,
    ValueTooLargeError,
)
from flo_redis._session.liveness import DEFAULT_GRACE_MS as GRACE
from flo_redis._wire.keys import owner_channel, queue_keys
from flo_redis._wire.runner import SCRIPTS

HERE = Path(__file__).resolve().parents[1] / "support"
Q = "tasks"
NOW = DequeueOptions(block_ms=0)


def seqs(messages: list[Message]) -> list[int]:
    return [m.seq for m in messages]


async def queue_key_count(raw: aioredis.Redis, namespace: str) -> int:
    return len([k async for k in raw.scan_iter(match=f"flo:q:{{{namespace}:*", count=1000)])


# --- delivery order and peek -----------------------------------------------------------


async def test_priorities_are_strict_and_fifo_within_one(client: FloClient) -> None:
    order = [(10, b"a"), (0, b"b"), (0, b"c"), (255, b"d"), (10, b"e")]
    sent = [await client.queue.enqueue(Q, p, EnqueueOptions(priority=pr)) for pr, p in order]
    assert sent == sorted(sent) and len(set(sent)) == 5
    got = (await client.queue.dequeue(Q, 10, NOW)).messages
    assert [m.payload for m in got] == [b"b", b"c", b"a", b"e", b"d"]
    assert [m.priority for m in got] == [0, 0, 10, 10, 255]
    assert all(m.delivery_count == 1 and m.enqueued_at_ms > 0 for m in got)


async def test_dequeue_takes_at_most_count(client: FloClient) -> None:
    for i in range(5):
        await client.queue.enqueue(Q, b"%d" % i)
    first = await client.queue.dequeue(Q, 2)
    second = await client.queue.dequeue(Q, 10)
    assert [m.payload for m in first.messages] == [b"0", b"1"]
    assert [m.payload for m in second.messages] == [b"2", b"3", b"4"]
    assert (await client.queue.dequeue(Q, 10)).messages == []


async def test_peek_looks_without_taking(client: FloClient) -> None:
    assert (await client.queue.peek(Q, 5)).messages == []
    a = await client.queue.enqueue(Q, b"a", EnqueueOptions(priority=5))
    b = await client.queue.enqueue(Q, b"b")
    peeked = (await client.queue.peek(Q, 5)).messages
    assert seqs(peeked) == [b, a]
    assert [m.delivery_count for m in peeked] == [0, 0]
    assert seqs((await client.queue.peek(Q, 1)).messages) == [b]
    assert seqs((await client.queue.dequeue(Q, 5)).messages) == [b, a]  # nothing was taken
    assert (await client.queue.peek(Q, 5)).messages == []  # delivered ones are invisible


# --- blocking --------------------------------------------------------------------------


async def test_a_blocking_dequeue_is_woken_by_enqueue(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    wake = queue_keys(namespace, Q).wake
    waiting = asyncio.create_task(client.queue.dequeue(Q, 1, DequeueOptions(block_ms=120_000)))
    await watched(raw, wake)  # parked on the wake channel
    assert not waiting.done()
    seq = await client.queue.enqueue(Q, b"wake")
    got = await asyncio.wait_for(waiting, 30)  # long before its 120 s block_ms
    assert seqs(got.messages) == [seq]


async def test_a_blocking_dequeue_with_nothing_returns_empty(client: FloClient) -> None:
    got = await client.queue.dequeue(Q, 1, DequeueOptions(block_ms=50))
    assert got.messages == []


# --- lost replies ---------------------------------------------------------------------


async def test_a_dequeue_whose_reply_is_lost_is_answered_again_not_stranded(
    redis_url: str, raw: aioredis.Redis, namespace: str
) -> None:
    proxy = await Proxy.to(redis_url)
    try:
        async with FloClient(proxy.url, namespace=namespace) as client:
            sent = [await client.queue.enqueue(Q, b"%d" % i) for i in range(3)]
            sha = SCRIPTS["queue_dequeue"].sha.encode()
            await raw.script_load(SCRIPTS["queue_dequeue"].source)
            proxy.drop_reply_after(sha)
            got = (await client.queue.dequeue(Q, 2)).messages
            assert proxy.dropped_replies == 1 and proxy.forwarded_count(sha) == 2
            # The resend was answered with what the lost reply carried, as that delivery.
            assert [(m.seq, m.delivery_count) for m in got] == [(sent[0], 1), (sent[1], 1)]
            assert await raw.zcard(queue_keys(namespace, Q).leases) == 2
            rest = (await client.queue.dequeue(Q, 5)).messages
            assert seqs(rest) == [sent[2]]
    finally:
        await proxy.stop()


async def test_a_poll_id_reused_gets_what_that_poll_still_holds(client: FloClient) -> None:
    first = await client.queue.enqueue(Q, b"a")
    second = await client.queue.enqueue(Q, b"b")
    poll = DequeueOptions(poll_id="poll-1")
    taken = (await client.queue.dequeue(Q, 1, poll)).messages
    again = (await client.queue.dequeue(Q, 1, poll)).messages
    assert (
        [(m.seq, m.delivery_count) for m in again]
        == [(first, 1)]
        == [(m.seq, m.delivery_count) for m in taken]
    )
    assert seqs((await client.queue.dequeue(Q, 5)).messages) == [second]
    await client.queue.ack(Q, [first])
    assert (await client.queue.dequeue(Q, 1, poll)).messages == []  # nothing held: afresh


# --- ack, nack, visibility timeout ------------------------------------------------------


async def test_ack_removes_and_a_resent_ack_changes_nothing(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    seq = await client.queue.enqueue(Q, b"x")
    (msg,) = (await client.queue.dequeue(Q, 1)).messages
    await client.queue.ack(Q, [msg.seq])
    await client.queue.ack(Q, [msg.seq])  # a resend after a lost reply
    await client.queue.ack(Q, [])  # as flo: nothing to send
    assert (await client.queue.peek(Q, 5)).messages == []
    assert (await client.queue.dequeue(Q, 5)).messages == []
    keys = queue_keys(namespace, Q)
    assert await raw.hlen(keys.msgs) == 0 and await raw.hlen(keys.bodies) == 0
    assert await raw.zcard(keys.leases) == 0 and await raw.zcard(keys.owned) == 0
    assert seq == msg.seq


async def test_nack_redelivers_with_a_higher_delivery_count(client: FloClient) -> None:
    first = await client.queue.enqueue(Q, b"first")
    second = await client.queue.enqueue(Q, b"second")
    (msg,) = (await client.queue.dequeue(Q, 1)).messages
    assert (msg.seq, msg.delivery_count) == (first, 1)
    await client.queue.nack(Q, [first])
    again = (await client.queue.dequeue(Q, 2)).messages
    assert [(m.seq, m.delivery_count) for m in again] == [(first, 2), (second, 1)]


async def test_an_unacked_message_comes_back_after_its_visibility_timeout(
    client: FloClient,
) -> None:
    seq = await client.queue.enqueue(Q, b"slow")
    short = DequeueOptions(visibility_timeout_ms=200)
    (msg,) = (await client.queue.dequeue(Q, 1, short)).messages
    assert (await client.queue.dequeue(Q, 1)).messages == []  # invisible meanwhile
    again = await client.queue.dequeue(Q, 1, DequeueOptions(block_ms=30_000))
    assert [(m.seq, m.delivery_count) for m in again.messages] == [(seq, 2)]
    # The first delivery's late ack is fenced off; the current one's is taken.
    with pytest.raises(ConflictError) as info:
        await client.queue.ack(Q, [seq], AckOptions(tokens={seq: msg.delivery_count}))
    assert info.value.reason == Reason.STALE_REPORT
    await client.queue.ack(Q, [seq], AckOptions(tokens={seq: 2}))
    assert (await client.queue.peek(Q, 1)).messages == []


async def test_reports_are_fenced_by_owner_and_token(redis_url: str, namespace: str) -> None:
    async with (
        FloClient(redis_url, namespace=namespace) as one,
        FloClient(redis_url, namespace=namespace) as other,
    ):
        seq = await one.queue.enqueue(Q, b"x")
        never = await one.queue.enqueue(Q, b"never-dequeued", EnqueueOptions(priority=9))
        (msg,) = (await one.queue.dequeue(Q, 1)).messages
        for report in (other.queue.ack, other.queue.nack):
            with pytest.raises(ConflictError):
                await report(Q, [seq])  # delivered to another client
        with pytest.raises(ConflictError):
            await one.queue.nack(Q, [seq], NackOptions(tokens={seq: 7}))  # wrong delivery
        with pytest.raises(ConflictError):
            await one.queue.ack(Q, [never])  # ready, never delivered
        # One refused seq does not hold the others back.
        with pytest.raises(ConflictError):
            await one.queue.ack(Q, [msg.seq, never])
        assert seqs((await one.queue.peek(Q, 5)).messages) == [never]
        assert (await one.queue.dequeue(Q, 5)).messages[0].seq == never


# --- dead letters -------------------------------------------------------------------


async def test_past_max_deliveries_a_message_is_dead_lettered_and_can_be_requeued(
    client: FloClient,
) -> None:
    seq = await client.queue.enqueue(Q, b"poison", EnqueueOptions(priority=3))
    twice = DequeueOptions(max_deliveries=2)
    for delivery in (1, 2):
        (msg,) = (await client.queue.dequeue(Q, 1, twice)).messages
        assert msg.delivery_count == delivery
        await client.queue.nack(Q, [seq])
    assert (await client.queue.dequeue(Q, 1, twice)).messages == []
    assert (await client.queue.peek(Q, 5)).messages == []
    dead = (await client.queue.dlq_list(Q)).messages
    assert [(m.seq, m.payload, m.delivery_count, m.priority) for m in dead] == [
        (seq, b"poison", 2, 3)
    ]
    await client.queue.dlq_requeue(Q, [seq])
    assert (await client.queue.dlq_list(Q)).messages == []
    peeked = (await client.queue.peek(Q, 5)).messages
    assert [(m.seq, m.delivery_count) for m in peeked] == [(seq, 2)]  # the token goes on
    (back,) = (await client.queue.dequeue(Q, 1)).messages
    assert (back.seq, back.payload, back.delivery_count) == (seq, b"poison", 3)
    with pytest.raises(NotFoundError):
        await client.queue.dlq_requeue(Q, [seq])  # no longer a dead letter


async def test_an_expired_last_delivery_is_dead_lettered(client: FloClient) -> None:
    seq = await client.queue.enqueue(Q, b"x")
    once = DequeueOptions(visibility_timeout_ms=100, max_deliveries=1)
    await client.queue.dequeue(Q, 1, once)

    async def dead() -> list[int]:
        await client.queue.dequeue(Q, 1, NOW)  # a dequeue takes expired deliveries back
        return seqs((await client.queue.dlq_list(Q)).messages)

    assert await eventually(dead, lambda s: s == [seq]) == [seq]


async def test_dlq_list_is_oldest_first_and_limited(client: FloClient) -> None:
    once = DequeueOptions(max_deliveries=1)
    sent = [await client.queue.enqueue(Q, b"%d" % i) for i in range(3)]
    for seq in sent:
        await client.queue.dequeue(Q, 1, once)
        await client.queue.nack(Q, [seq])
    assert seqs((await client.queue.dlq_list(Q)).messages) == sent
    assert seqs((await client.queue.dlq_list(Q, DlqListOptions(limit=2))).messages) == sent[:2]


# --- a dead consumer -----------------------------------------------------------------


@contextlib.contextmanager
def consumer_process(url: str, namespace: str, n: int) -> Iterator[subprocess.Popen[bytes]]:
    """A real consumer process holding up to ``n`` messages until it is killed."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "queue_proc.py"), url, namespace, Q, str(n)],
        cwd=HERE,
        stdout=subprocess.PIPE,
    )
    with proc:  # closes its stdout pipe once it is reaped
        try:
            yield proc
        finally:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
async def test_a_sigkilled_consumers_messages_come_back_in_about_a_second(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    """Visibility timeout 5 minutes: only owner liveness explains a return within seconds."""
    n = 5
    sent = [await client.queue.enqueue(Q, b"%d" % i) for i in range(n)]
    with consumer_process(redis_url, namespace, n) as proc:
        assert proc.stdout is not None
        line = await asyncio.to_thread(proc.stdout.readline)
        assert sorted(int(s) for s in line.split()) == sent
        keys = queue_keys(namespace, Q)
        assert await raw.zcard(keys.leases) == n
        killed_at = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        back: list[Message] = []
        # Back through liveness: the 5 minute visibility timeout is far beyond this deadline.
        deadline = time.monotonic() + 30
        while len(back) < n and time.monotonic() < deadline:
            got = await client.queue.dequeue(Q, n, DequeueOptions(block_ms=5000))
            back += got.messages
        took = time.monotonic() - killed_at
    print(f"\nSIGKILL -> all {n} messages back in {took * 1000:.0f} ms (grace {GRACE} ms)")
    assert sorted(seqs(back)) == sent
    assert all(m.delivery_count == 2 for m in back)  # the dead consumer's delivery counted
    stats = await raw.hmget(keys.meta, ["stat:reclaimed_owner_gone", "stat:owners_gone"])
    assert [int(v) for v in stats] == [n, 1]


async def test_a_live_consumers_messages_are_never_taken_back(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    async with FloClient(redis_url, namespace=namespace) as holder:
        await client.queue.enqueue(Q, b"x")
        (msg,) = (await holder.queue.dequeue(Q, 1)).messages
        keys = queue_keys(namespace, Q)
        assert holder.liveness.is_held(keys.tag)
        for _ in range(3):
            result = await client.queue.reclaim_gone_owners(Q)
            assert result.reclaimed == 0
        assert (await client.queue.dequeue(Q, 1)).messages == []
        await holder.queue.ack(Q, [msg.seq])
    assert owner_channel(keys.tag, holder.owner_id).endswith(holder.owner_id)


# --- bad input and unknown ids -------------------------------------------------------


@pytest.mark.slow
async def test_bad_input_is_refused_before_anything_is_written(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    q = client.queue
    bad_calls = [
        (ValidationError, q.enqueue(Q, b"x", EnqueueOptions(priority=256))),
        (ValidationError, q.enqueue(Q, b"x", EnqueueOptions(priority=-1))),
        (ValidationError, q.enqueue(Q, b"x", EnqueueOptions(priority="1"))),  # type: ignore[arg-type]
        (ValidationError, q.enqueue(Q, "text")),  # type: ignore[arg-type]
        (ValueTooLargeError, q.enqueue(Q, b"x" * (client.max_payload_bytes + 1))),
        (ValidationError, q.enqueue("a{b}", b"x")),
        (ValidationError, q.enqueue("", b"x")),
        (ValidationError, q.dequeue(Q, 0)),
        (ValidationError, q.dequeue(Q, 1001)),
        (BlockTooLongError, q.dequeue(Q, 1, DequeueOptions(block_ms=300_001))),
        (ValidationError, q.dequeue(Q, 1, DequeueOptions(block_ms=-1))),
        (ValidationError, q.dequeue(Q, 1, DequeueOptions(visibility_timeout_ms=0))),
        (ValidationError, q.dequeue(Q, 1, DequeueOptions(max_deliveries=0))),
        (ValidationError, q.dequeue(Q, 1, DequeueOptions(poll_id="a{b}"))),
        (ValidationError, q.peek(Q, 0)),
        (ValidationError, q.ack(Q, "1")),  # type: ignore[arg-type]
        (ValidationError, q.ack(Q, [1.0])),  # type: ignore[list-item]
        (ValidationError, q.nack(Q, [1], NackOptions(tokens={1: 0.5}))),  # type: ignore[dict-item]
        (ValidationError, q.dlq_list(Q, DlqListOptions(limit=0))),
    ]
    for error, call in bad_calls:
        with pytest.raises(error):
            await call
    assert await queue_key_count(raw, namespace) == 0


@pytest.mark.parametrize("seq", [999, 0, -5, 2**64, 2**45])
async def test_an_unknown_seq_is_not_found(client: FloClient, seq: int) -> None:
    await client.queue.enqueue(Q, b"x")
    for call in (client.queue.ack, client.queue.nack, client.queue.dlq_requeue):
        with pytest.raises(NotFoundError) as info:
            await call(Q, [seq])
        assert info.value.status_code == StatusCode.NOT_FOUND


async def test_queues_and_namespaces_are_apart(client: FloClient, namespace: str) -> None:
    from flo_redis import PeekOptions

    await client.queue.enqueue("a", b"1")
    await client.queue.enqueue("a", b"2", EnqueueOptions(namespace=f"{namespace}-x"))
    assert (await client.queue.peek("b", 5)).messages == []
    assert [m.payload for m in (await client.queue.peek("a", 5)).messages] == [b"1"]
    other = await client.queue.peek("a", 5, PeekOptions(namespace=f"{namespace}-x"))
    assert [m.payload for m in other.messages] == [b"2"]


async def test_an_ack_of_many_unknown_seqs_names_the_first_few_and_counts_the_rest(
    client: FloClient,
) -> None:
    await client.queue.enqueue("jobs", b"x")
    with pytest.raises(NotFoundError) as info:
        await client.queue.ack("jobs", list(range(1000, 4000)))
    message = str(info.value)
    assert "[1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, ... 2990 more]" in message
    assert len(message) < 300
    with pytest.raises(NotFoundError, match=r"seq\(s\) \[1000, 1001\] of queue 'jobs'"):
        await client.queue.ack("jobs", [1000, 1001])
