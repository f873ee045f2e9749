"""Plain streams against a real Redis: append, read, info, trim, long polls, validation."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from polling import watched

from flo_redis import (
    BlockTooLongError,
    FloClient,
    NotFoundError,
    StreamAppendOptions,
    StreamID,
    StreamInfoOptions,
    StreamReadOptions,
    StreamTrimOptions,
    ValidationError,
    ValueTooLargeError,
)
from flo_redis._wire.keys import stream_keys
from flo_redis.streams import records as streams_module

WAIT_S = 10.0  # generous deadline for conditions that should hold within milliseconds


async def fill(client: FloClient, stream: str, n: int, prefix: str = "e") -> list[StreamID]:
    return [(await client.stream.append(stream, f"{prefix}{i}".encode())).id for i in range(n)]


# --- append / read ---------------------------------------------------------------------


async def test_append_then_read_round_trips_payload_and_headers(client: FloClient) -> None:
    first = await client.stream.append("events", b"\x00raw\xff")
    second = await client.stream.append(
        "events", b"{}", StreamAppendOptions(headers={"type": "click", "ü": "✓"})
    )
    assert first.id < second.id

    records = (await client.stream.read("events")).records

    assert [r.id for r in records] == [first.id, second.id]
    assert [r.payload for r in records] == [b"\x00raw\xff", b"{}"]
    assert records[0].headers is None
    assert records[1].headers == {"type": "click", "ü": "✓"}
    assert all(r.stream == "events" for r in records)
    assert all(r.delivery_count == 0 for r in records)


async def test_a_missing_stream_reads_as_empty_and_has_empty_info(client: FloClient) -> None:
    assert (await client.stream.read("nothing-here")).records == []
    info = await client.stream.info("nothing-here")
    assert (info.count, info.bytes_size, info.partition_count) == (0, 0, 1)
    assert info.first_id == StreamID.MIN and info.last_id == StreamID.MIN


async def test_read_bounds_are_inclusive_and_count_limits(client: FloClient) -> None:
    ids = await fill(client, "s", 6)

    window = await client.stream.read("s", StreamReadOptions(start=ids[1], end=ids[3]))
    assert [r.id for r in window.records] == ids[1:4]

    limited = await client.stream.read("s", StreamReadOptions(start=ids[2], count=2))
    assert [r.id for r in limited.records] == ids[2:4]

    upto = await client.stream.read("s", StreamReadOptions(end=ids[1]))
    assert [r.id for r in upto.records] == ids[:2]


async def test_tail_reads_the_newest_records_oldest_first(client: FloClient) -> None:
    ids = await fill(client, "s", 5)
    tail = await client.stream.read("s", StreamReadOptions(tail=True, count=2))
    assert [r.id for r in tail.records] == ids[3:]
    assert [r.payload for r in tail.records] == [b"e3", b"e4"]


async def test_read_defaults_to_at_most_100_records(client: FloClient) -> None:
    await fill(client, "s", 120)
    assert len((await client.stream.read("s")).records) == 100


async def test_info_reports_count_bytes_and_bounds(client: FloClient) -> None:
    a = await client.stream.append("s", b"12345", StreamAppendOptions(headers={"k": "v"}))
    b = await client.stream.append("s", b"123")
    info = await client.stream.info("s", StreamInfoOptions())
    assert info.count == 2
    assert info.first_id == a.id and info.last_id == b.id
    assert info.bytes_size >= 8  # payloads, plus the packed headers
    assert info.partition_count == 1


async def test_namespaces_keep_streams_apart(redis_url: str, client: FloClient) -> None:
    await client.stream.append("shared", b"mine")
    async with FloClient(redis_url, namespace=f"{client.namespace}-other") as other:
        assert (await other.stream.read("shared")).records == []
        await other.stream.append("shared", b"theirs")
    records = (await client.stream.read("shared")).records
    assert [r.payload for r in records] == [b"mine"]


# --- long polls --------------------------------------------------------------------------


async def test_blocking_read_returns_on_append(client: FloClient, raw: aioredis.Redis) -> None:
    reader = asyncio.create_task(client.stream.read("s", StreamReadOptions(block_ms=60_000)))
    await watched(raw, stream_keys(client.namespace, "s").wake)
    assert not reader.done()
    appended = await client.stream.append("s", b"hello")
    result = await asyncio.wait_for(reader, WAIT_S)
    assert [r.id for r in result.records] == [appended.id]


async def test_blocking_read_past_existing_records_waits_for_a_new_one(
    client: FloClient, raw: aioredis.Redis
) -> None:
    ids = await fill(client, "s", 2)
    after = StreamID(ids[-1].timestamp_ms, ids[-1].sequence + 1)
    reader = asyncio.create_task(
        client.stream.read("s", StreamReadOptions(start=after, block_ms=60_000))
    )
    await watched(raw, stream_keys(client.namespace, "s").wake)
    new = await client.stream.append("s", b"new")
    result = await asyncio.wait_for(reader, WAIT_S)
    assert [r.id for r in result.records] == [new.id]


async def test_blocking_read_times_out_empty(client: FloClient) -> None:
    result = await client.stream.read("s", StreamReadOptions(block_ms=50))
    assert result.records == []


async def test_block_ms_zero_or_none_answers_at_once(client: FloClient) -> None:
    assert (await client.stream.read("s", StreamReadOptions(block_ms=0))).records == []
    assert (await client.stream.read("s", StreamReadOptions(block_ms=None))).records == []


# --- trim --------------------------------------------------------------------------------


async def test_trim_before_is_inclusive(client: FloClient) -> None:
    ids = await fill(client, "s", 5)
    result = await client.stream.trim("s", StreamTrimOptions(before=ids[2]))
    assert result.removed == 3
    assert result.first_seq == 4  # the 4th record ever appended is now the first
    assert [r.id for r in (await client.stream.read("s")).records] == ids[3:]
    info = await client.stream.info("s")
    assert info.count == 2 and info.first_id == ids[3]


async def test_trim_max_len_keeps_the_newest(client: FloClient) -> None:
    ids = await fill(client, "s", 5)
    before_bytes = (await client.stream.info("s")).bytes_size
    result = await client.stream.trim("s", StreamTrimOptions(max_len=2))
    assert result.removed == 3
    assert [r.id for r in (await client.stream.read("s")).records] == ids[3:]
    assert (await client.stream.info("s")).bytes_size == before_bytes - 3 * len(b"e0")
    again = await client.stream.trim("s", StreamTrimOptions(max_len=2))
    assert again.removed == 0


async def test_trim_max_age_removes_only_old_records(
    client: FloClient, raw: aioredis.Redis
) -> None:
    keys = stream_keys(client.namespace, "s")
    await raw.xadd(keys.log, {"p": b"ancient"}, id="1000-0")  # appended in 1970
    fresh = await fill(client, "s", 2)
    result = await client.stream.trim("s", StreamTrimOptions(max_age_seconds=3600))
    assert result.removed == 1
    assert [r.id for r in (await client.stream.read("s")).records] == fresh


@pytest.mark.parametrize(
    "options",
    [
        StreamTrimOptions(before=StreamID.MAX, dry_run=True),
        StreamTrimOptions(max_len=1, dry_run=True),
        StreamTrimOptions(max_age_seconds=3600, dry_run=True),
    ],
    ids=["before", "max_len", "max_age"],
)
async def test_trim_dry_run_reports_without_removing(
    client: FloClient, raw: aioredis.Redis, options: StreamTrimOptions
) -> None:
    keys = stream_keys(client.namespace, "s")
    await raw.xadd(keys.log, {"p": b"old1"}, id="1000-0")
    await raw.xadd(keys.log, {"p": b"old2"}, id="1001-0")
    await fill(client, "s", 1)
    expected = 3 if options.before is not None else 2
    result = await client.stream.trim("s", options)
    assert result.removed == expected
    assert (await client.stream.info("s")).count == 3


async def test_trim_works_in_bounded_steps(
    client: FloClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams_module, "TRIM_BATCH", 7)
    ids = await fill(client, "s", 40)

    dry = await client.stream.trim("s", StreamTrimOptions(before=ids[24], dry_run=True))
    assert dry.removed == 25
    assert (await client.stream.info("s")).count == 40

    cut = await client.stream.trim("s", StreamTrimOptions(before=ids[24]))
    assert cut.removed == 25
    assert [r.id for r in (await client.stream.read("s")).records] == ids[25:]

    kept = await client.stream.trim("s", StreamTrimOptions(max_len=3))
    assert kept.removed == 12
    assert [r.id for r in (await client.stream.read("s")).records] == ids[37:]


async def test_trim_a_missing_stream_is_not_found(client: FloClient) -> None:
    with pytest.raises(NotFoundError):
        await client.stream.trim("nothing", StreamTrimOptions(max_len=1))


@pytest.mark.parametrize(
    "options",
    [
        StreamTrimOptions(),
        StreamTrimOptions(before=StreamID(1, 0), max_len=3),
        StreamTrimOptions(max_len=3, max_age_seconds=10),
        StreamTrimOptions(before=StreamID(1, 0), max_len=1, max_age_seconds=1),
        StreamTrimOptions(max_len=0),
        StreamTrimOptions(max_age_seconds=-1),
        StreamTrimOptions(before="1-0"),  # type: ignore[arg-type]
    ],
)
async def test_trim_needs_exactly_one_valid_bound(
    client: FloClient, options: StreamTrimOptions
) -> None:
    await fill(client, "s", 2)
    with pytest.raises(ValidationError):
        await client.stream.trim("s", options)
    assert (await client.stream.info("s")).count == 2


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "a{b", "a}b", "tab\there", "x" * 300])
async def test_invalid_stream_names_are_refused(client: FloClient, name: str) -> None:
    with pytest.raises(ValidationError):
        await client.stream.append(name, b"x")
    with pytest.raises(ValidationError):
        await client.stream.read(name)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (StreamReadOptions(block_ms=300_001), BlockTooLongError),
        (StreamReadOptions(block_ms=-1), ValidationError),
        (StreamReadOptions(block_ms=True), ValidationError),
        (StreamReadOptions(block_ms=1.5), ValidationError),  # type: ignore[arg-type]
        (StreamReadOptions(count=0), ValidationError),
        (StreamReadOptions(count=1001), ValidationError),
        (StreamReadOptions(tail=True, start=StreamID(1, 0)), ValidationError),
        (StreamReadOptions(start=StreamID(5, 0), end=StreamID(4, 0)), ValidationError),
        (StreamReadOptions(start="0-1"), ValidationError),  # type: ignore[arg-type]
        (StreamReadOptions(partition=1), ValidationError),
    ],
)
async def test_invalid_read_options_are_refused_before_sending(
    client: FloClient, options: StreamReadOptions, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await client.stream.read("s", options)


async def test_a_stream_id_mutated_out_of_range_is_refused(client: FloClient) -> None:
    bad = StreamID(1, 0)
    bad.sequence = -1
    with pytest.raises(ValidationError):
        await client.stream.read("s", StreamReadOptions(start=bad))


async def test_payload_and_headers_are_checked(redis_url: str, namespace: str) -> None:
    async with FloClient(redis_url, namespace=namespace, max_payload_bytes=10) as small:
        with pytest.raises(ValueTooLargeError):
            await small.stream.append("s", b"x" * 11)
        with pytest.raises(ValidationError):
            await small.stream.append("s", "text")  # type: ignore[arg-type]
        with pytest.raises(ValidationError):
            await small.stream.append(
                "s",
                b"x",
                StreamAppendOptions(headers={"n": 1}),  # type: ignore[dict-item]
            )
        assert (await small.stream.info("s")).count == 0


def test_every_key_of_a_stream_and_its_groups_shares_one_hash_tag() -> None:
    keys = stream_keys("ns", "orders")
    group = keys.group("billing")
    names = [keys.log, keys.meta, keys.wake, *(getattr(group, f) for f in group.__slots__)]
    tagged = [n for n in names if n != "billing"]
    assert all("{ns:orders}" in n for n in tagged)
    assert len(set(tagged)) == len(tagged)
    other = stream_keys("ns", "orders", partition=1)
    assert "{ns:orders/1}" in other.log and other.log != keys.log


async def test_trim_by_an_age_older_than_the_epoch_removes_nothing(client: FloClient) -> None:
    await client.stream.append("s", b"x")
    result = await client.stream.trim("s", StreamTrimOptions(max_age_seconds=10**10))
    assert result.removed == 0
    assert (await client.stream.info("s")).count == 1
