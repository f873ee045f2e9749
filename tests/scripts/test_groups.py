"""Consumer groups against a real Redis: delivery, redelivery, claims, fencing, dead letters."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from polling import eventually, watched

from flo_redis import (
    BlockTooLongError,
    ConflictError,
    FloClient,
    NotFoundError,
    Reason,
    StatusCode,
    StreamAppendOptions,
    StreamGroupAckOptions,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamRecord,
    StreamTrimOptions,
    ValidationError,
)
from flo_redis._wire.keys import stream_keys
from flo_redis.streams import StreamDeadLetterOptions, StreamGroupSettings
from flo_redis.streams import groups as stream_groups

WAIT_S = 10.0  # generous deadline for conditions that should hold within milliseconds


async def fill(client: FloClient, n: int, stream: str = "s") -> list[StreamID]:
    return [(await client.stream.append(stream, f"e{i}".encode())).id for i in range(n)]


async def read(
    client: FloClient, consumer: str, count: int = 100, group: str = "g", **kw: object
) -> list[StreamRecord]:
    options = StreamGroupReadOptions(count=count, **kw)  # type: ignore[arg-type]
    return (await client.stream.group_read("s", group, consumer, options)).records


async def join(client: FloClient, ack_timeout_ms: int = 0, max_deliver: int = 10) -> None:
    await client.stream.group_join(
        "s",
        "g",
        "c1",
        StreamGroupJoinOptions(ack_timeout_ms=ack_timeout_ms, max_deliver=max_deliver),
    )


def pairs(records: list[StreamRecord]) -> list[tuple[StreamID, int]]:
    return [(r.id, r.delivery_count) for r in records]


# --- joining, reading, acking ------------------------------------------------------------


async def test_a_new_group_starts_at_the_beginning_of_the_stream(client: FloClient) -> None:
    ids = await fill(client, 3)
    await client.stream.group_join("s", "g", "c1")
    records = await read(client, "c1")
    assert pairs(records) == [(i, 1) for i in ids]
    assert [r.payload for r in records] == [b"e0", b"e1", b"e2"]
    assert all(r.stream == "s" for r in records)


async def test_group_read_creates_a_missing_stream_and_group(client: FloClient) -> None:
    assert await read(client, "c1") == []
    ids = await fill(client, 2)
    assert [r.id for r in await read(client, "c1")] == ids


async def test_each_entry_goes_to_one_consumer(client: FloClient) -> None:
    ids = await fill(client, 5)
    first = await read(client, "c1", count=2)
    second = await read(client, "c2", count=10)
    assert [r.id for r in first] == ids[:2]
    assert [r.id for r in second] == ids[2:]
    assert await read(client, "c3") == []


async def test_headers_travel_through_a_group(client: FloClient) -> None:
    await client.stream.append("s", b"x", StreamAppendOptions(headers={"trace": "abc"}))
    (record,) = await read(client, "c1")
    assert record.headers == {"trace": "abc"}


async def test_ack_removes_entries_from_pending(client: FloClient) -> None:
    ids = await fill(client, 3)
    await read(client, "c1", count=2)
    await read(client, "c2", count=1)

    pending = await client.stream.group_pending("s", "g")
    assert [(p.id, p.consumer, p.delivery_count) for p in pending] == [
        (ids[0], "c1", 1),
        (ids[1], "c1", 1),
        (ids[2], "c2", 1),
    ]
    assert all(p.idle_ms >= 0 for p in pending)
    mine = await client.stream.group_pending("s", "g", "c2")
    assert [p.id for p in mine] == [ids[2]]

    await client.stream.group_ack("s", "g", [ids[0], ids[2]])
    assert [p.id for p in await client.stream.group_pending("s", "g")] == [ids[1]]
    # A resend of the same ack is answered OK and changes nothing.
    await client.stream.group_ack("s", "g", [ids[0]], StreamGroupAckOptions(token=1))
    assert [p.id for p in await client.stream.group_pending("s", "g")] == [ids[1]]


async def test_pending_of_a_missing_stream_or_group_is_empty(client: FloClient) -> None:
    assert await client.stream.group_pending("nothing", "g") == []
    await fill(client, 1)
    assert await client.stream.group_pending("s", "no-group", "c1") == []


async def test_ack_and_nack_of_a_missing_group_are_not_found(client: FloClient) -> None:
    sid = StreamID(1, 0)
    for call in (client.stream.group_ack, client.stream.group_nack):
        with pytest.raises(NotFoundError) as missing_stream:
            await call("nothing", "g", [sid])
        assert missing_stream.value.status_code == StatusCode.NOT_FOUND
        await fill(client, 1)
        with pytest.raises(NotFoundError):
            await call("s", "no-group", [sid])
    # flo returns without sending anything for an empty list.
    await client.stream.group_ack("nothing", "g", [])
    await client.stream.group_nack("nothing", "g", [])


# --- redelivery -------------------------------------------------------------------------


async def test_a_nacked_entry_comes_back_before_new_ones(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 2)
    (first,) = await read(client, "c1", count=1)
    await client.stream.group_nack("s", "g", [first.id])
    later = await fill(client, 1)

    again = await read(client, "c2", count=2)
    assert pairs(again) == [(ids[0], 2), (ids[1], 1)]
    assert pairs(await read(client, "c2")) == [(later[0], 1)]
    owners = {p.id.as_tuple(): p.consumer for p in await client.stream.group_pending("s", "g")}
    assert owners[ids[0].as_tuple()] == "c2"


@pytest.mark.slow
async def test_an_unacked_entry_is_redelivered_after_the_ack_timeout(client: FloClient) -> None:
    await join(client, ack_timeout_ms=200)
    ids = await fill(client, 1)
    assert pairs(await read(client, "c1")) == [(ids[0], 1)]
    assert await read(client, "c1") == []  # not due yet

    async def timed_out() -> bool:
        return all(p.idle_ms > 250 for p in await client.stream.group_pending("s", "g"))

    await eventually(timed_out, what="the entry to pass its ack timeout")
    newer = await fill(client, 1)
    # The timed-out entry comes first, ahead of the newer one, with its count raised.
    assert pairs(await read(client, "c2", count=1)) == [(ids[0], 2)]
    assert pairs(await read(client, "c2")) == [(newer[0], 1)]


async def test_redeliveries_and_new_entries_share_the_count(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 4)
    records = await read(client, "c1", count=3)
    await client.stream.group_nack("s", "g", [r.id for r in records])
    await fill(client, 2)
    batch = await read(client, "c1", count=2)
    assert pairs(batch) == [(ids[0], 2), (ids[1], 2)]
    batch = await read(client, "c1", count=2)
    assert pairs(batch) == [(ids[2], 2), (ids[3], 1)]


async def test_ack_timeout_zero_never_redelivers_by_itself(client: FloClient) -> None:
    await join(client, ack_timeout_ms=0)
    await fill(client, 1)
    await read(client, "c1")
    await asyncio.sleep(0.1)  # time passes (the behaviour under test): no redelivery
    assert await read(client, "c1") == []
    assert len(await client.stream.group_pending("s", "g")) == 1


async def test_a_trimmed_pending_entry_is_dropped_not_redelivered(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 2)
    await read(client, "c1")
    await client.stream.group_nack("s", "g", ids)
    await client.stream.trim("s", StreamTrimOptions(before=ids[0]))
    assert pairs(await read(client, "c1")) == [(ids[1], 2)]
    assert [p.id for p in await client.stream.group_pending("s", "g")] == [ids[1]]


# --- fencing -----------------------------------------------------------------------------


async def test_a_superseded_delivery_cannot_ack_or_nack(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 1)
    (old,) = await read(client, "c1")
    await client.stream.group_nack("s", "g", [old.id], StreamGroupNackOptions(token=1))
    (new,) = await read(client, "c2")
    assert new.delivery_count == 2

    with pytest.raises(ConflictError) as stale_ack:
        await client.stream.group_ack(
            "s", "g", [ids[0]], StreamGroupAckOptions(consumer="c1", token=1)
        )
    with pytest.raises(ConflictError) as stale_nack:
        await client.stream.group_nack(
            "s", "g", [ids[0]], StreamGroupNackOptions(consumer="c1", token=1)
        )
    for refused in (stale_ack, stale_nack):
        assert refused.value.reason == Reason.STALE_REPORT
        assert refused.value.status_code == StatusCode.CONFLICT

    (entry,) = await client.stream.group_pending("s", "g")
    assert (entry.consumer, entry.delivery_count) == ("c2", 2)
    await client.stream.group_ack(
        "s", "g", [ids[0]], StreamGroupAckOptions(consumer="c2", token=new.delivery_count)
    )
    assert await client.stream.group_pending("s", "g") == []


async def test_a_stale_token_refuses_the_whole_call(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 2)
    await read(client, "c1")
    await client.stream.group_nack("s", "g", [ids[1]])
    await read(client, "c1")  # ids[1] is now delivery 2
    with pytest.raises(ConflictError):
        await client.stream.group_ack("s", "g", ids, StreamGroupAckOptions(token=1))
    assert len(await client.stream.group_pending("s", "g")) == 2


async def test_token_less_ack_keeps_flos_any_consumer_behaviour(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 1)
    await read(client, "c1")
    await client.stream.group_nack("s", "g", ids)
    await read(client, "c2")
    await client.stream.group_ack("s", "g", ids, StreamGroupAckOptions(consumer="c1"))
    assert await client.stream.group_pending("s", "g") == []


async def test_a_token_must_be_a_positive_int(client: FloClient) -> None:
    await fill(client, 1)
    with pytest.raises(ValidationError):
        await client.stream.group_ack("s", "g", [StreamID(1, 0)], StreamGroupAckOptions(token=0))


# --- dead letters ------------------------------------------------------------------------


async def test_an_entry_nacked_max_deliver_times_is_dead_lettered(client: FloClient) -> None:
    await join(client, max_deliver=2)
    ids = await fill(client, 1, stream="s")
    await client.stream.append("s", b"kept", StreamAppendOptions(headers={"h": "1"}))
    for expected in (1, 2):
        (record, *_) = await read(client, "c1", count=1)
        assert (record.id, record.delivery_count) == (ids[0], expected)
        await client.stream.group_nack("s", "g", [record.id])

    (letter,) = await client.stream.dead_letters("s", "g")
    assert letter.original_id == ids[0]
    assert (letter.payload, letter.delivery_count, letter.reason) == (b"e0", 2, "nacked")
    assert letter.consumer == "c1" and letter.owner == client.owner_id
    pending = await client.stream.group_pending("s", "g")
    assert ids[0] not in [p.id for p in pending]
    assert [r.payload for r in await read(client, "c1")] == [b"kept"]


async def test_an_entry_timing_out_max_deliver_times_is_dead_lettered(
    client: FloClient,
) -> None:
    await join(client, ack_timeout_ms=100, max_deliver=1)
    ids = await fill(client, 1)
    await read(client, "c1")

    async def buried() -> bool:
        await read(client, "c2")
        return bool(await client.stream.dead_letters("s", "g"))

    await eventually(buried, what="the entry to be dead-lettered")
    (letter,) = await client.stream.dead_letters("s", "g")
    assert (letter.original_id, letter.delivery_count, letter.reason) == (
        ids[0],
        1,
        "ack_timeout",
    )
    assert await client.stream.group_pending("s", "g") == []


async def test_dead_letters_can_be_replayed(client: FloClient) -> None:
    await join(client, max_deliver=1)
    await client.stream.append("s", b"poison", StreamAppendOptions(headers={"k": "v"}))
    await client.stream.append("s", b"bad")
    records = await read(client, "c1")
    await client.stream.group_nack("s", "g", [r.id for r in records])
    letters = await client.stream.dead_letters("s", "g")
    assert [d.payload for d in letters] == [b"poison", b"bad"]
    page = await client.stream.dead_letters(
        "s", "g", StreamDeadLetterOptions(start=letters[1].id, count=5)
    )
    assert [d.id for d in page] == [letters[1].id]

    new_ids = await client.stream.replay_dead_letters("s", "g", [letters[0].id])
    assert len(new_ids) == 1
    assert [d.id for d in await client.stream.dead_letters("s", "g")] == [letters[1].id]
    (replayed,) = await read(client, "c2")
    assert (replayed.id, replayed.payload, replayed.headers) == (new_ids[0], b"poison", {"k": "v"})
    assert replayed.delivery_count == 1

    rest = await client.stream.replay_dead_letters("s", "g")
    assert len(rest) == 1
    assert await client.stream.dead_letters("s", "g") == []


async def test_group_settings_are_set_on_join_and_kept(client: FloClient) -> None:
    assert await client.stream.group_settings("s", "g") == StreamGroupSettings(30_000, 10)
    await client.stream.group_join("s", "g", "c1")
    assert await client.stream.group_settings("s", "g") == StreamGroupSettings(30_000, 10)
    await join(client, ack_timeout_ms=1234, max_deliver=3)
    await client.stream.group_join("s", "g", "c2")
    assert await client.stream.group_settings("s", "g") == StreamGroupSettings(1234, 3)
    with pytest.raises(ValueError):
        StreamGroupJoinOptions(max_deliver=0)


# --- claims ------------------------------------------------------------------------------


async def test_claim_pages_through_own_pending_to_done(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 25)
    await read(client, "c1")
    seen: list[StreamID] = []
    cursor = StreamID()
    pages = 0
    while True:
        page = await client.stream.group_claim("s", "g", "c1", 0, cursor, 10)
        pages += 1
        assert all(r.delivery_count == 2 for r in page.records)
        seen += [r.id for r in page.records]
        if page.done:
            assert page.next_cursor == StreamID.MAX
            break
        assert page.next_cursor > cursor
        cursor = page.next_cursor
    assert pages == 3
    assert seen == ids


async def test_claim_with_zero_idle_never_steals(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 3)
    await read(client, "c1")
    result = await client.stream.group_claim("s", "g", "c2", 0, StreamID(), 10)
    assert result.records == [] and result.done
    pending = await client.stream.group_pending("s", "g")
    assert [(p.id, p.consumer, p.delivery_count) for p in pending] == [(i, "c1", 1) for i in ids]


async def test_claim_with_min_idle_takes_entries_left_idle(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 2)
    await read(client, "c1", count=1)
    await read(client, "c2", count=1)

    async def idle_enough() -> bool:
        pending = await client.stream.group_pending("s", "g", "c1")
        return all(p.idle_ms >= 100 for p in pending)

    await eventually(idle_enough, what="c1's entry to be idle")
    result = await client.stream.group_claim("s", "g", "c2", 100, StreamID(), 10)
    assert result.done
    # c2's own (fresh) entry and c1's idle one, in id order.
    assert pairs(result.records) == [(ids[0], 2), (ids[1], 2)]
    assert {p.consumer for p in await client.stream.group_pending("s", "g")} == {"c2"}
    with pytest.raises(ConflictError):
        await client.stream.group_ack("s", "g", [ids[0]], StreamGroupAckOptions(token=1))


async def test_claim_inspects_a_bounded_number_of_entries(
    client: FloClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_groups, "CLAIM_SCAN", 5)
    await join(client)
    await fill(client, 12)
    await read(client, "c1")
    cursor, pages, claimed = StreamID(), 0, 0
    while True:
        page = await client.stream.group_claim("s", "g", "c2", 3_600_000, cursor, 10)
        pages += 1
        claimed += len(page.records)
        if page.done:
            break
        cursor = page.next_cursor
    assert claimed == 0  # nothing idle an hour: c1's entries stay c1's
    assert pages == 3


async def test_claim_dead_letters_entries_past_max_deliver(client: FloClient) -> None:
    await join(client, max_deliver=2)
    ids = await fill(client, 1)
    await read(client, "c1")
    first = await client.stream.group_claim("s", "g", "c1", 0, StreamID(), 10)
    assert pairs(first.records) == [(ids[0], 2)]
    second = await client.stream.group_claim("s", "g", "c1", 0, StreamID(), 10)
    assert second.records == []
    (letter,) = await client.stream.dead_letters("s", "g")
    assert (letter.original_id, letter.delivery_count, letter.reason) == (ids[0], 2, "max_deliver")


async def test_claim_on_a_missing_stream_or_group_is_done(client: FloClient) -> None:
    result = await client.stream.group_claim("nothing", "g", "c1", 0, StreamID(), 10)
    assert result.records == [] and result.done


async def test_claim_arguments_are_checked(client: FloClient) -> None:
    bad: list[tuple[str, int, object, int]] = [
        ("c1", -1, StreamID(), 10),
        ("c1", 0, "0-0", 10),
        ("c1", 0, StreamID(), 0),
        ("c1", 0, StreamID(), 1001),
        ("", 0, StreamID(), 10),
    ]
    for consumer, min_idle_ms, start, count in bad:
        with pytest.raises(ValidationError):
            await client.stream.group_claim(
                "s",
                "g",
                consumer,
                min_idle_ms,
                start,  # type: ignore[arg-type]
                count,
            )


# --- leaving -----------------------------------------------------------------------------


async def test_leave_keeps_a_consumer_until_its_entries_are_settled(
    client: FloClient, raw: aioredis.Redis
) -> None:
    log = stream_keys(client.namespace, "s").log
    ids = await fill(client, 1)
    await client.stream.group_join("s", "g", "c1")
    await client.stream.group_join("s", "g", "idle")
    await read(client, "c1")

    async def consumers() -> set[str]:
        return {c["name"].decode() for c in await raw.xinfo_consumers(log, "g")}

    await client.stream.group_leave("s", "g", "idle")
    await client.stream.group_leave("s", "g", "c1")
    assert await consumers() == {"c1"}
    await client.stream.group_ack("s", "g", ids)
    await client.stream.group_leave("s", "g", "c1")
    assert await consumers() == set()
    await client.stream.group_leave("nothing", "g", "c1")  # a missing group is fine


# --- lost replies ------------------------------------------------------------------------


async def test_a_retried_poll_gets_the_same_entries(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 3)
    first = await read(client, "c1", count=2, poll_id="poll-1")
    retry = await read(client, "c1", count=2, poll_id="poll-1")
    assert pairs(retry) == pairs(first) == [(ids[0], 1), (ids[1], 1)]
    assert [p.delivery_count for p in await client.stream.group_pending("s", "g")] == [1, 1]
    assert pairs(await read(client, "c1", count=2, poll_id="poll-2")) == [(ids[2], 1)]
    # An entry acked meanwhile is not handed out again.
    await client.stream.group_ack("s", "g", [ids[0]])
    assert pairs(await read(client, "c1", count=2, poll_id="poll-1")) == [(ids[1], 1)]


async def test_a_poll_id_whose_entries_are_acked_reads_afresh(client: FloClient) -> None:
    await join(client)
    ids = await fill(client, 2)
    [first] = await read(client, "c1", count=1, poll_id="poll-1")
    await client.stream.group_ack("s", "g", [first.id])
    assert pairs(await read(client, "c1", count=1, poll_id="poll-1")) == [(ids[1], 1)]
    # A blocking read reusing the id is not stuck on the finished hand-out either.
    await client.stream.group_ack("s", "g", [ids[1]])
    [new] = await fill(client, 1)
    again = await read(client, "c1", count=1, poll_id="poll-1", block_ms=20_000)
    assert pairs(again) == [(new, 1)]


# --- long polls --------------------------------------------------------------------------


async def test_a_blocking_group_read_wakes_on_append(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await join(client)
    reader = asyncio.create_task(read(client, "c1", block_ms=60_000))
    await watched(raw, stream_keys(client.namespace, "s").wake)
    assert not reader.done()
    (new,) = await fill(client, 1)
    assert pairs(await asyncio.wait_for(reader, WAIT_S)) == [(new, 1)]


async def test_a_blocking_group_read_wakes_on_nack(client: FloClient, raw: aioredis.Redis) -> None:
    await join(client)
    ids = await fill(client, 1)
    await read(client, "c1")
    reader = asyncio.create_task(read(client, "c2", block_ms=60_000))
    await watched(raw, stream_keys(client.namespace, "s").wake)
    assert not reader.done()
    await client.stream.group_nack("s", "g", ids)
    assert pairs(await asyncio.wait_for(reader, WAIT_S)) == [(ids[0], 2)]


async def test_a_blocking_group_read_wakes_when_an_entry_falls_due(client: FloClient) -> None:
    await join(client, ack_timeout_ms=200)
    ids = await fill(client, 1)
    await read(client, "c1")
    records = await asyncio.wait_for(read(client, "c2", block_ms=120_000), WAIT_S)
    assert pairs(records) == [(ids[0], 2)]


async def test_an_ack_is_not_delayed_behind_a_waiting_read(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await join(client)
    ids = await fill(client, 1)
    await read(client, "c1")
    reader = asyncio.create_task(read(client, "c2", block_ms=60_000))
    await watched(raw, stream_keys(client.namespace, "s").wake)
    await asyncio.wait_for(client.stream.group_ack("s", "g", ids), WAIT_S)
    assert not reader.done()
    assert await client.stream.group_pending("s", "g") == []
    (new,) = await fill(client, 1)
    assert pairs(await asyncio.wait_for(reader, WAIT_S)) == [(new, 1)]


async def test_interrupt_ends_a_blocking_group_read_empty(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await join(client)
    reader = asyncio.create_task(read(client, "c1", block_ms=120_000))
    await watched(raw, stream_keys(client.namespace, "s").wake)
    assert not reader.done()
    client.interrupt()
    assert await asyncio.wait_for(reader, WAIT_S) == []


async def test_a_blocking_group_read_times_out_empty(client: FloClient) -> None:
    assert await read(client, "c1", block_ms=50) == []


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (StreamGroupReadOptions(block_ms=300_001), BlockTooLongError),
        (StreamGroupReadOptions(block_ms=-5), ValidationError),
        (StreamGroupReadOptions(count=0), ValidationError),
        (StreamGroupReadOptions(count=5000), ValidationError),
        (StreamGroupReadOptions(poll_id="a{b"), ValidationError),
    ],
)
async def test_invalid_group_read_options_are_refused(
    client: FloClient, options: StreamGroupReadOptions, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await client.stream.group_read("s", "g", "c1", options)


@pytest.mark.parametrize(("group", "consumer"), [("", "c"), ("g{", "c"), ("g", ""), ("g", "c}")])
async def test_invalid_group_and_consumer_names_are_refused(
    client: FloClient, group: str, consumer: str
) -> None:
    with pytest.raises(ValidationError):
        await client.stream.group_join("s", group, consumer)
    with pytest.raises(ValidationError):
        await client.stream.group_read("s", group, consumer)


async def test_bad_ids_are_refused(client: FloClient) -> None:
    await fill(client, 1)
    await client.stream.group_join("s", "g", "c1")
    with pytest.raises(ValidationError):
        await client.stream.group_ack("s", "g", ["1-0"])  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        await client.stream.group_nack("s", "g", StreamID(1, 0))  # type: ignore[arg-type]


# --- bounded work ------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_large_backlog_is_served_a_batch_at_a_time(
    client: FloClient, raw: aioredis.Redis
) -> None:
    keys = stream_keys(client.namespace, "s")
    async with raw.pipeline(transaction=False) as pipe:
        for i in range(5000):
            pipe.xadd(keys.log, {"p": f"e{i}".encode()})
        await pipe.execute()
    await join(client, ack_timeout_ms=1)
    first = await read(client, "c1", count=1000)
    assert len(first) == 1000

    async def due() -> bool:
        return all(p.idle_ms >= 5 for p in await client.stream.group_pending("s", "g"))

    await eventually(due, what="the backlog to fall due")
    # 1000 entries are due; one call hands out only its count, the rest stay pending.
    batch = await read(client, "c2", count=10)
    assert len(batch) == 10 and all(r.delivery_count == 2 for r in batch)
    assert {r.id.as_tuple() for r in batch} <= {r.id.as_tuple() for r in first}
    pending = await client.stream.group_pending("s", "g")
    assert sum(1 for p in pending if p.delivery_count == 1) == 990
