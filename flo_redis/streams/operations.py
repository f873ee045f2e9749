"""flo's ``client.stream`` on Redis Streams: plain streams here, the rest in its rooms.

Every state change is one Lua script (``lua/stream_*.lua``, ``lua/group_*.lua``); each
call validates its arguments before anything is sent, calls the scripts, waits for
wake-ups between attempts of a blocking read, and turns replies into flo's result
classes. :class:`StreamOperations` is composed of:

- plain streams (this module): append, read, info, trim;
- :mod:`flo_redis.streams.groups`: consumer groups (join, read, pending, claim, their
  settings, and what gone consumers held);
- :mod:`flo_redis.streams.acks`: their acks and nacks, one entry or many;
- :mod:`flo_redis.streams.dead_letters`: a group's dead letters and their replay;
- :mod:`flo_redis.streams.inspect`: listing streams and counting each group's work;
- :mod:`flo_redis.streams.partitions`: partition fan-out, which all of them build on.

A stream may be created with several partitions (:meth:`StreamOperations.create`), each
its own hash slot, so on Redis Cluster one stream spreads over the nodes. Every call
spans all partitions unless its options name one; records say which partition they came
from, and acks and nacks name it (``lua/README.md``, section Cluster).
"""

from __future__ import annotations

import asyncio
import builtins

from flo_redis._session.tracer import append_span, with_trace_headers
from flo_redis._session.wake import Attempt
from flo_redis._wire import runner
from flo_redis._wire.aside import warn_unreadable
from flo_redis._wire.checks import check_options
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
from flo_redis.errors import ValidationError, ValueTooLargeError
from flo_redis.streams.acks import GroupAcks
from flo_redis.streams.dead_letters import DeadLetter, DeadLetters, StreamDeadLetterOptions
from flo_redis.streams.groups import ConsumerGroups, StreamGroupSettings, reap_target
from flo_redis.streams.inspect import StreamInspection
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


class StreamOperations(ConsumerGroups, GroupAcks, DeadLetters, StreamInspection):
    """``client.stream``: append-only streams and consumer groups on Redis Streams, their
    dead letters, and (from :class:`StreamInspection`) the namespace's streams and each
    group's lag."""

    async def append(
        self,
        stream: str,
        payload: bytes,
        options: StreamAppendOptions | None = None,
    ) -> StreamAppendResult:
        """Append one record (``payload`` bytes, optional ``headers``) and wake blocked
        readers. The id is Redis's ``<ms>-<seq>``, increasing within its partition. A missing
        stream is created. On a partitioned stream, records with the same
        ``partition_key`` go to the same partition (in order); records without one are
        spread round-robin. :class:`ValueTooLargeError` for a payload over the client's
        ``max_payload_bytes``."""
        opts = check_options(options, StreamAppendOptions)
        first = self._keys(stream, opts.namespace)
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise ValidationError(f"payload must be bytes, got {type(payload).__name__}")
        data = bytes(payload)
        if len(data) > self._session.max_payload_bytes:
            raise ValueTooLargeError(
                f"payload is {len(data)} bytes; the limit is {self._session.max_payload_bytes} "
                "(raise the client's max_payload_bytes or store large data elsewhere)"
            )
        if opts.partition_key is not None and not isinstance(opts.partition_key, str):
            raise ValidationError(
                f"partition_key must be a str, got {type(opts.partition_key).__name__}"
            )
        headers = headers_arg(opts.headers)
        count = await self._counts.get(first.namespace, stream, first.meta)
        partition = 0
        if count > 1:
            if opts.partition_key is not None:
                partition = partition_of_key(opts.partition_key, count)
            else:
                partition = self._next_turn(first.namespace, stream) % count
        keys = first if partition == 0 else stream_keys(first.namespace, stream, partition)
        # Listed first: a user refused the registry is refused before anything is written.
        await self._remember_stream(first.namespace, stream)
        with append_span(self._session.tracer, first.namespace, stream, partition) as span:
            if span.headers:
                headers = headers_arg(with_trace_headers(opts.headers, span.headers))
            reply = await STREAM_APPEND(self._session, keys, [data, headers])
            span.sent((reply.id.to_redis(),))
        return StreamAppendResult(id=reply.id, partition=partition)

    async def read(
        self,
        stream: str,
        options: StreamReadOptions | None = None,
    ) -> StreamReadResult:
        """Up to ``count`` (default 100, at most 1000) records between ``start`` and ``end``
        (both inclusive; default the whole stream), oldest first; with ``tail`` the newest
        ``count`` of them (still oldest first). With ``block_ms`` > 0 and nothing to read,
        waits up to that long for an append. A missing stream reads as empty. A partitioned
        stream is read in every partition (or only ``partition``), merged in id order. A
        record whose stored headers do not decode is read with ``headers`` None (and
        logged once at WARNING)."""
        since = self._session.waker.generation  # an interrupt from here on ends this read
        opts = check_options(options, StreamReadOptions)
        parts = await self._partitions(stream, opts.namespace, opts.partition)
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
            reply = await STREAM_READ(self._session, keys, args)
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

        return StreamReadResult(records=await self._long_poll(parts, block_ms, attempt, since))

    async def info(
        self,
        stream: str,
        options: StreamInfoOptions | None = None,
    ) -> StreamInfo:
        """Record count, bytes held (payloads and headers), first and last id (MIN when
        empty) and partition count; of all partitions together (the lowest first id and
        the highest last id). A missing stream answers as empty."""
        opts = check_options(options, StreamInfoOptions)
        parts = await self._partitions(stream, opts.namespace)
        replies = await asyncio.gather(*(STREAM_INFO(self._session, k) for k in parts))
        held = [r for r in replies if r.count > 0]
        return StreamInfo(
            count=sum(r.count for r in replies),
            bytes_size=sum(r.bytes_size for r in replies),
            first_id=min((r.first_id for r in held), default=StreamID()),
            last_id=max((r.last_id for r in held), default=StreamID()),
            partition_count=len(parts),
        )

    async def trim(
        self,
        stream: str,
        options: StreamTrimOptions | None = None,
    ) -> StreamTrimResult:
        """Remove the oldest records by exactly one bound: ``before`` (ids up to and
        including it), ``max_len`` (keep the newest n) or ``max_age_seconds`` (older than
        that, by server time). With ``dry_run`` nothing is removed and ``removed`` says what
        would be. Works in bounded steps (each atomic), so trimming a huge stream never
        stalls Redis. ``first_seq`` is the ordinal (1 = first ever appended) of the first
        record left. :class:`NotFoundError` for a missing stream. A partitioned stream is
        trimmed in every partition by the same bound (``max_len`` keeps the newest n of
        each partition)."""
        opts = check_options(options, StreamTrimOptions)
        parts = await self._partitions(stream, opts.namespace)
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
            raise ValidationError(
                f"set exactly one of before, max_len, max_age_seconds (got {got})"
            )
        mode: str
        bound: str
        if opts.before is not None:
            mode, bound = "before", stream_id_arg("before", opts.before).to_redis()
        elif opts.max_len is not None:
            mode, bound = "max_len", str(positive_arg("max_len", opts.max_len))
        else:
            age = positive_arg("max_age_seconds", opts.max_age_seconds, LUA_INT // 1000)
            mode, bound = "max_age", str(age)
        outcomes = await asyncio.gather(
            *(self._trim_partition(k, mode, bound, opts.dry_run) for k in parts)
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
        self, keys: StreamKeys, mode: str, bound: str, dry_run: bool
    ) -> tuple[int, int, int] | None:
        """Trim one partition in bounded steps: (removed, records left, entries ever
        added), or None when the partition does not exist."""
        dry = "1" if dry_run else "0"
        removed, after = 0, ""
        while True:
            reply = await STREAM_TRIM(self._session, keys, [mode, bound, dry, after, TRIM_BATCH])
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


__all__ = [
    "DeadLetter",
    "StreamDeadLetterOptions",
    "StreamGroupSettings",
    "StreamOperations",
    "reap_target",
]
