"""Plain streams: append, read, info and trim, as functions over a
:class:`~flo_redis.streams.partitions.StreamState`.

Each checks its arguments before anything is sent, calls the scripts
(``lua/stream_*.lua``) on every partition it spans, and turns the replies into flo's
result classes; what each guarantees is said on ``client.stream``'s methods
(:class:`~flo_redis.streams.operations.StreamOperations`).
"""

from __future__ import annotations

import asyncio
import builtins

from flo_redis._session.tracer import traced, with_trace_headers
from flo_redis._session.wake import Attempt
from flo_redis._wire import runner
from flo_redis._wire.aside import warn_unreadable
from flo_redis._wire.checks import check_bytes, check_options
from flo_redis._wire.gateway import STREAM_APPEND, STREAM_INFO, STREAM_READ, STREAM_TRIM
from flo_redis._wire.keys import StreamKeys, stream_keys
from flo_redis._wire.status import Status, refusal
from flo_redis._wire.stream_codec import (
    DEFAULT_COUNT,
    block_ms_arg,
    count_arg,
    headers_arg,
    merge,
    positive_arg,
    stream_id_arg,
)
from flo_redis.durability import DurabilityLike, as_durability
from flo_redis.errors import ValidationError
from flo_redis.streams.partitions import StreamState
from flo_redis.streams.placement import partition_of_key
from flo_redis.types import (
    StreamAppendOptions,
    StreamAppendResult,
    StreamID,
    StreamInfo,
    StreamInfoOptions,
    StreamReadOptions,
    StreamReadResult,
    StreamRecord,
    StreamTrimOptions,
    StreamTrimResult,
)
from flo_redis.types.base import LUA_INT

TRIM_BATCH = 1000  # records one trim script call removes (or counts) at most


async def append(
    state: StreamState,
    stream: str,
    payload: bytes,
    options: StreamAppendOptions | None,
    durability: DurabilityLike | None = None,
) -> StreamAppendResult:
    """Append one record to its partition (by ``partition_key``, else in turn), at
    ``durability`` (checked before anything is written)."""
    opts = check_options(options, StreamAppendOptions)
    if durability is not None:
        durability = as_durability(durability)
    first = state.keys(stream, opts.namespace)
    session = state.session
    data = check_bytes("payload", payload, session.max_payload_bytes)
    if opts.partition_key is not None and not isinstance(opts.partition_key, str):
        raise ValidationError(
            f"partition_key must be a str, got {type(opts.partition_key).__name__}"
        )
    headers = headers_arg(opts.headers)
    count = await state.counts.get(first.namespace, stream, first.meta)
    partition = 0
    if count > 1:
        if opts.partition_key is not None:
            partition = partition_of_key(opts.partition_key, count)
        else:
            partition = state.next_turn(first.namespace, stream) % count
    keys = first if partition == 0 else stream_keys(first.namespace, stream, partition)
    # Listed first: a user refused the registry is refused before anything is written.
    await state.remember(first.namespace, stream)
    with traced(session.tracer).appending(first.namespace, stream, partition) as span:
        if span.headers:
            headers = headers_arg(with_trace_headers(opts.headers, span.headers))
        reply = await STREAM_APPEND(session, keys, [data, headers], durability=durability)
        span.sent((reply.id.to_redis(),))
    return StreamAppendResult(id=reply.id, partition=partition)


async def read(
    state: StreamState, stream: str, options: StreamReadOptions | None
) -> StreamReadResult:
    """Records of every partition (or one), merged in id order; waiting up to
    ``block_ms`` for an append."""
    since = state.session.waker.generation  # an interrupt from here on ends this read
    opts = check_options(options, StreamReadOptions)
    parts = await state.parts(stream, opts.namespace, opts.partition)
    count = count_arg("count", opts.count, DEFAULT_COUNT)
    block_ms = block_ms_arg(opts.block_ms)
    if opts.tail and opts.start is not None:
        raise ValidationError("tail and start exclude each other; set one of them")
    start = "-" if opts.start is None else stream_id_arg("start", opts.start).to_redis()
    end = "+" if opts.end is None else stream_id_arg("end", opts.end).to_redis()
    if opts.start is not None and opts.end is not None and opts.start > opts.end:
        raise ValidationError(f"start {opts.start} is after end {opts.end}")
    args: builtins.list[runner.Arg] = [start, end, count, "1" if opts.tail else "0"]

    async def read_one(keys: StreamKeys) -> builtins.list[StreamRecord]:
        reply = await STREAM_READ(state.session, keys, args)
        for bad in reply.bad:  # read without its headers; a group sets it aside
            warn_unreadable(
                ("entry", keys.tag, bad.record.id.to_redis()),
                f"stream {stream!r} (partition {keys.partition}, namespace "
                f"{keys.namespace!r}): record {bad.record.id} has headers that do not "
                f"decode ({bad.reason}); read without them (a consumer group that "
                "reads it sets it aside into the group's quarantine)",
            )
        return reply.records

    async def attempt() -> Attempt[StreamRecord]:
        if len(parts) == 1:
            return Attempt(await read_one(parts[0]))
        batches = await asyncio.gather(*(read_one(k) for k in parts))
        return Attempt(merge(batches, count, opts.tail))

    return StreamReadResult(records=await state.long_poll(parts, block_ms, attempt, since))


async def info(state: StreamState, stream: str, options: StreamInfoOptions | None) -> StreamInfo:
    """The figures of all partitions together."""
    opts = check_options(options, StreamInfoOptions)
    parts = await state.parts(stream, opts.namespace)
    replies = await asyncio.gather(*(STREAM_INFO(state.session, k) for k in parts))
    held = [r for r in replies if r.count > 0]
    return StreamInfo(
        count=sum(r.count for r in replies),
        bytes_size=sum(r.bytes_size for r in replies),
        first_id=min((r.first_id for r in held), default=StreamID()),
        last_id=max((r.last_id for r in held), default=StreamID()),
        partition_count=len(parts),
    )


def trim_bound(opts: StreamTrimOptions) -> tuple[str, str]:
    """The trim's mode and bound as ``stream_trim`` takes them; exactly one is set."""
    set_bounds = [
        name
        for name, value in (
            ("before", opts.before),
            ("max_len", opts.max_len),
            ("max_age_seconds", opts.max_age_seconds),
        )
        if value is not None
    ]
    if len(set_bounds) != 1:
        got = ", ".join(set_bounds) or "none"
        raise ValidationError(f"set exactly one of before, max_len, max_age_seconds (got {got})")
    if opts.before is not None:
        return "before", stream_id_arg("before", opts.before).to_redis()
    if opts.max_len is not None:
        return "max_len", str(positive_arg("max_len", opts.max_len))
    return "max_age", str(positive_arg("max_age_seconds", opts.max_age_seconds, LUA_INT // 1000))


async def trim(
    state: StreamState, stream: str, options: StreamTrimOptions | None
) -> StreamTrimResult:
    """Trim every partition by the same bound, in bounded steps."""
    opts = check_options(options, StreamTrimOptions)
    parts = await state.parts(stream, opts.namespace)
    mode, bound = trim_bound(opts)
    outcomes = await asyncio.gather(
        *(_trim_partition(state, k, mode, bound, opts.dry_run) for k in parts)
    )
    found = [o for o in outcomes if o is not None]
    if not found:
        raise refusal(
            Status.NOT_FOUND,
            f"stream {stream!r} not found in namespace {parts[0].namespace!r}; nothing to trim",
        )
    removed = sum(o[0] for o in found)
    left = sum(o[1] for o in found)
    added = sum(o[2] for o in found)
    return StreamTrimResult(removed=removed, first_seq=added - left + 1)


async def _trim_partition(
    state: StreamState, keys: StreamKeys, mode: str, bound: str, dry_run: bool
) -> tuple[int, int, int] | None:
    """Trim one partition in bounded steps: (removed, records left, entries ever
    added), or None when the partition does not exist."""
    dry = "1" if dry_run else "0"
    removed, after = 0, ""
    while True:
        reply = await STREAM_TRIM(state.session, keys, [mode, bound, dry, after, TRIM_BATCH])
        if reply.status == Status.NOT_FOUND:
            return None
        removed += reply.removed
        if reply.cutoff:
            mode, bound = "below", reply.cutoff
        length, added = reply.length, reply.entries_added
        if not reply.more:
            break
        if dry_run:
            after = reply.last_id
    left = length - removed if dry_run else length
    return removed, left, added
