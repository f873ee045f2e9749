"""flo's ``client.stream`` on Redis Streams: plain streams and consumer groups.

Every state change is one Lua script (``lua/stream_*.lua``, ``lua/group_*.lua``); this
module validates arguments before anything is sent, calls the scripts, waits for wake-ups
between attempts of a blocking read, and turns replies into flo's result classes.

What flo leaves open is settled here (``lua/README.md`` has the details): a group starts
at the beginning of its stream; a nacked entry, or one left unacked past the group's ack
timeout, is handed out again by a later ``group_read`` before new entries, with its
delivery count raised; an entry delivered ``max_deliver`` times without an ack moves to
the group's dead letters; an ack or nack that names its delivery's count (``token``) is
refused with ``STALE_REPORT`` once the entry was delivered again.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _scripts
from ._status import Status, refusal
from ._stream_codec import (
    MAX_COUNT,
    block_ms_arg,
    count_arg,
    decode_headers,
    deliveries,
    headers_arg,
    ids_arg,
    positive_arg,
    records,
    sid,
    stream_id_arg,
)
from .codec import pack, text
from .errors import ValidationError, ValueTooLargeError
from .keys import GroupKeys, StreamKeys, check_name, stream_keys
from .types import (
    PendingEntry,
    StreamAppendOptions,
    StreamAppendResult,
    StreamClaimResult,
    StreamGroupAckOptions,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamInfo,
    StreamInfoOptions,
    StreamReadOptions,
    StreamReadResult,
    StreamRecord,
    StreamTrimOptions,
    StreamTrimResult,
)

if TYPE_CHECKING:
    from .client import FloClient

DEFAULT_COUNT = 100
CLAIM_SCAN = 1000  # pending entries one group_claim call inspects at most
TRIM_BATCH = 1000  # records one trim script call removes (or counts) at most
DEFAULT_ACK_TIMEOUT_MS = 30_000
DEFAULT_MAX_DELIVER = 10


# -----------------------------------------------------------------------------
# Results beyond flo's
# -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamGroupSettings:
    """A group's settings: ``ack_timeout_ms`` (0: never redeliver on timeout) and
    ``max_deliver`` (deliveries before an entry is dead-lettered)."""

    ack_timeout_ms: int = DEFAULT_ACK_TIMEOUT_MS
    max_deliver: int = DEFAULT_MAX_DELIVER


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An entry a group gave up on: ``id`` is its place among the group's dead letters,
    ``original_id`` its id in the stream, ``delivery_count`` how often it was delivered,
    ``reason`` why it was given up (``nacked``, ``ack_timeout`` or ``max_deliver``),
    ``consumer``/``owner`` who held its last delivery, ``dead_at_ms`` when (server time)."""

    id: StreamID
    original_id: StreamID
    payload: bytes
    headers: dict[str, str] | None
    delivery_count: int
    reason: str
    consumer: str
    owner: str
    dead_at_ms: int


@dataclass
class StreamDeadLetterOptions:
    """Options for ``dead_letters``: from ``start`` (inclusive, None: the oldest), at
    most ``count`` (1..1000)."""

    namespace: str | None = None
    start: StreamID | None = None
    count: int = DEFAULT_COUNT


def _dead_letter(entry_id: bytes, fields: dict[bytes, bytes]) -> DeadLetter:
    return DeadLetter(
        id=sid(entry_id),
        original_id=sid(fields[b"id"]),
        payload=bytes(fields.get(b"p", b"")),
        headers=decode_headers(fields.get(b"h", b"")),
        delivery_count=int(fields.get(b"n", 0)),
        reason=text(fields.get(b"r")) or "",
        consumer=text(fields.get(b"c")) or "",
        owner=text(fields.get(b"o")) or "",
        dead_at_ms=int(fields.get(b"t", 0)),
    )


# -----------------------------------------------------------------------------
# client.stream
# -----------------------------------------------------------------------------


class StreamOperations:
    """``client.stream``: append-only streams and consumer groups on Redis Streams."""

    def __init__(self, client: FloClient) -> None:
        self._client = client

    def _keys(self, stream: str, namespace: str | None) -> StreamKeys:
        return stream_keys(self._client.get_namespace(namespace), stream)

    def _group_keys(
        self, stream: str, group: str, namespace: str | None
    ) -> tuple[StreamKeys, GroupKeys]:
        keys = self._keys(stream, namespace)
        return keys, keys.group(group)

    async def _poll(
        self,
        wake: str,
        block_ms: int,
        attempt: Callable[[], Awaitable[tuple[builtins.list[StreamRecord], int]]],
    ) -> builtins.list[StreamRecord]:
        """Run ``attempt`` until it yields records or ``block_ms`` passes, sleeping on the
        stream's wake channel (never on a blocking command) in between. ``attempt``
        answers its records and ms until something falls due by itself (-1: nothing).
        ``client.interrupt()`` ends the wait at once, empty."""
        if block_ms == 0:
            records, _ = await attempt()
            return records
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block_ms / 1000.0
        async with self._client.waker.watching([wake]) as watch:
            while True:
                await watch.arm()
                records, wait_ms = await attempt()
                if records:
                    return records
                remaining = deadline - loop.time()
                if remaining <= 0 or watch.interrupted:
                    return []
                if wait_ms >= 0:
                    remaining = min(remaining, max(wait_ms, 1) / 1000.0)
                await watch.wait(remaining)
                if watch.interrupted:
                    return []  # client.interrupt(): stop waiting, take nothing more
                if loop.time() >= deadline:
                    records, _ = await attempt()
                    return records

    # --- plain streams -------------------------------------------------------------

    async def append(
        self,
        stream: str,
        payload: bytes,
        options: StreamAppendOptions | None = None,
    ) -> StreamAppendResult:
        """Append one record (``payload`` bytes, optional ``headers``) and wake blocked
        readers. The id is Redis's ``<ms>-<seq>``, increasing. A missing stream is created.
        :class:`ValueTooLargeError` for a payload over the client's ``max_payload_bytes``."""
        opts = options or StreamAppendOptions()
        keys = self._keys(stream, opts.namespace)
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise ValidationError(f"payload must be bytes, got {type(payload).__name__}")
        data = bytes(payload)
        if len(data) > self._client.max_payload_bytes:
            raise ValueTooLargeError(
                f"payload is {len(data)} bytes; the limit is {self._client.max_payload_bytes} "
                "(raise the client's max_payload_bytes or store large data elsewhere)"
            )
        if opts.partition_key is not None and not isinstance(opts.partition_key, str):
            raise ValidationError(
                f"partition_key must be a str, got {type(opts.partition_key).__name__}"
            )
        headers = headers_arg(opts.headers)
        reply = await _scripts.call(
            self._client.redis,
            "stream_append",
            [keys.log, keys.meta, keys.wake],
            [data, headers],
        )
        return StreamAppendResult(id=sid(reply[1]))

    async def read(
        self,
        stream: str,
        options: StreamReadOptions | None = None,
    ) -> StreamReadResult:
        """Up to ``count`` (default 100, at most 1000) records between ``start`` and ``end``
        (both inclusive; default the whole stream), oldest first; with ``tail`` the newest
        ``count`` of them (still oldest first). With ``block_ms`` > 0 and nothing to read,
        waits up to that long for an append. A missing stream reads as empty."""
        opts = options or StreamReadOptions()
        if opts.partition not in (None, 0):
            raise ValidationError(
                f"partition {opts.partition!r} does not exist; this stream has 1 partition (0)"
            )
        keys = self._keys(stream, opts.namespace)
        count = count_arg("count", opts.count, DEFAULT_COUNT)
        block_ms = block_ms_arg(opts.block_ms)
        if opts.tail and opts.start is not None:
            raise ValidationError("tail and start exclude each other; set one of them")
        start = "-" if opts.start is None else stream_id_arg("start", opts.start).to_redis()
        end = "+" if opts.end is None else stream_id_arg("end", opts.end).to_redis()
        if opts.start is not None and opts.end is not None and opts.start > opts.end:
            raise ValidationError(f"start {opts.start} is after end {opts.end}")
        args: builtins.list[_scripts.Arg] = [start, end, count, "1" if opts.tail else "0"]

        async def attempt() -> tuple[builtins.list[StreamRecord], int]:
            reply = await _scripts.call(self._client.redis, "stream_read", [keys.log], args)
            return records(stream, reply, 1), -1

        return StreamReadResult(records=await self._poll(keys.wake, block_ms, attempt))

    async def info(
        self,
        stream: str,
        options: StreamInfoOptions | None = None,
    ) -> StreamInfo:
        """Record count, bytes held (payloads and headers), first and last id (MIN when
        empty) and partition count. A missing stream answers as empty."""
        opts = options or StreamInfoOptions()
        keys = self._keys(stream, opts.namespace)
        reply = await _scripts.call(self._client.redis, "stream_info", [keys.log, keys.meta], [])
        return StreamInfo(
            count=int(reply[1]),
            bytes_size=int(reply[2]),
            first_id=sid(reply[3]),
            last_id=sid(reply[4]),
            partition_count=1,
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
        record left. :class:`NotFoundError` for a missing stream."""
        opts = options or StreamTrimOptions()
        keys = self._keys(stream, opts.namespace)
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
            mode, bound = "max_age", str(positive_arg("max_age_seconds", opts.max_age_seconds))
        dry = "1" if opts.dry_run else "0"
        removed, after = 0, ""
        while True:
            reply = await _scripts.call(
                self._client.redis,
                "stream_trim",
                [keys.log, keys.meta],
                [mode, bound, dry, after, TRIM_BATCH],
            )
            if int(reply[0]) == Status.NOT_FOUND:
                raise refusal(
                    Status.NOT_FOUND,
                    f"stream {stream!r} not found in namespace {keys.namespace!r}; nothing to trim",
                )
            removed += int(reply[1])
            if reply[4]:
                mode, bound = "below", text(reply[4]) or ""
            length, added = int(reply[5]), int(reply[6])
            if not int(reply[2]):
                break
            if opts.dry_run:
                after = text(reply[3]) or ""
        left = length - removed if opts.dry_run else length
        return StreamTrimResult(removed=removed, first_seq=added - left + 1)

    # --- consumer groups -----------------------------------------------------------

    async def group_join(
        self,
        stream: str,
        group: str,
        consumer: str,
        options: StreamGroupJoinOptions | None = None,
    ) -> None:
        """Join ``consumer`` to ``group``, creating the group when missing (at the
        beginning of the stream, so it reads every record still held) and the stream too.
        ``ack_timeout_ms`` / ``max_deliver`` given in the options are applied to the group."""
        opts = options or StreamGroupJoinOptions()
        keys, gk = self._group_keys(stream, group, opts.namespace)
        check_name("consumer", consumer)
        opts.__post_init__()
        await _scripts.call(
            self._client.redis,
            "group_join",
            [keys.log, gk.config],
            [
                group,
                consumer,
                "" if opts.ack_timeout_ms is None else opts.ack_timeout_ms,
                "" if opts.max_deliver is None else opts.max_deliver,
            ],
        )

    async def group_leave(
        self,
        stream: str,
        group: str,
        consumer: str,
        options: StreamGroupJoinOptions | None = None,
    ) -> None:
        """Remove ``consumer`` from ``group``. A consumer still holding pending entries is
        kept until they are settled, so none is lost. A missing group is not an error."""
        opts = options or StreamGroupJoinOptions()
        keys, gk = self._group_keys(stream, group, opts.namespace)
        check_name("consumer", consumer)
        await _scripts.call(
            self._client.redis, "group_leave", [keys.log, gk.config], [group, consumer]
        )

    async def group_read(
        self,
        stream: str,
        group: str,
        consumer: str,
        options: StreamGroupReadOptions | None = None,
    ) -> StreamReadResult:
        """Hand up to ``count`` (default 100, at most 1000) entries to ``consumer``: first
        entries due again (nacked, or unacked past the group's ack timeout) with their
        delivery count raised, then new ones; all in one atomic step. An entry already
        delivered ``max_deliver`` times goes to the dead letters instead. With
        ``block_ms`` > 0 and nothing to hand out, waits up to that long. The group is
        created when missing. Each record's ``delivery_count`` is the delivery's fencing
        token. A retry with the same ``poll_id`` (within two minutes)
        gets the entries that poll was handed instead of new ones."""
        opts = options or StreamGroupReadOptions()
        keys, gk = self._group_keys(stream, group, opts.namespace)
        check_name("consumer", consumer)
        count = count_arg("count", opts.count, DEFAULT_COUNT)
        block_ms = block_ms_arg(opts.block_ms)
        if opts.poll_id is not None:
            check_name("poll_id", opts.poll_id)
        script_keys = [
            keys.log,
            gk.config,
            gk.due,
            gk.deliveries,
            gk.dead,
            gk.polls,
            gk.poll_times,
        ]
        args: builtins.list[_scripts.Arg] = [
            group,
            consumer,
            self._client.owner_id,
            count,
            opts.poll_id or "",
        ]

        async def attempt() -> tuple[builtins.list[StreamRecord], int]:
            reply = await _scripts.call(self._client.redis, "group_read", script_keys, args)
            return deliveries(stream, reply, 2), int(reply[1])

        return StreamReadResult(records=await self._poll(keys.wake, block_ms, attempt))

    async def group_pending(
        self,
        stream: str,
        group: str,
        consumer: str = "",
        options: StreamGroupReadOptions | None = None,
    ) -> builtins.list[PendingEntry]:
        """The group's pending (delivered, not acked) entries in id order, at most
        ``count`` (default and maximum 1000): the whole group's, or with ``consumer`` only
        that consumer's. A missing stream or group has none."""
        opts = options or StreamGroupReadOptions()
        keys, gk = self._group_keys(stream, group, opts.namespace)
        if consumer:
            check_name("consumer", consumer)
        count = count_arg("count", opts.count, MAX_COUNT)
        reply = await _scripts.call(
            self._client.redis,
            "group_pending",
            [keys.log, gk.config],
            [group, consumer, "-", count],
        )
        n = int(reply[1])
        return [
            PendingEntry(
                id=sid(reply[i]),
                consumer=text(reply[i + 1]) or "",
                delivery_count=int(reply[i + 3]),
                idle_ms=int(reply[i + 2]),
            )
            for i in range(2, 2 + 4 * n, 4)
        ]

    async def group_claim(
        self,
        stream: str,
        group: str,
        consumer: str,
        min_idle_ms: int,
        start_id: StreamID,
        count: int,
        options: StreamGroupReadOptions | None = None,
    ) -> StreamClaimResult:
        """Take a page of the group's pending entries for ``consumer``, scanning in id
        order from ``start_id``: its own entries, and with ``min_idle_ms`` > 0 also
        entries other consumers left idle at least that long (with 0 never theirs). Each
        is delivered again (delivery count raised; one already delivered ``max_deliver``
        times is dead-lettered instead). Pass ``next_cursor`` as the next ``start_id``
        until ``done``; a page inspects at most a bounded number of entries, so a page may
        be empty without being done. A missing stream or group answers done."""
        opts = options or StreamGroupReadOptions()
        keys, gk = self._group_keys(stream, group, opts.namespace)
        check_name("consumer", consumer)
        if isinstance(min_idle_ms, bool) or not isinstance(min_idle_ms, int) or min_idle_ms < 0:
            raise ValidationError(f"min_idle_ms must be an int >= 0, got {min_idle_ms!r}")
        start = stream_id_arg("start_id", start_id).to_redis()
        take = count_arg("count", count, DEFAULT_COUNT)
        reply = await _scripts.call(
            self._client.redis,
            "group_claim",
            [keys.log, gk.config, gk.due, gk.deliveries, gk.dead],
            [group, consumer, self._client.owner_id, min_idle_ms, start, take, CLAIM_SCAN],
        )
        done = bool(int(reply[1]))
        return StreamClaimResult(
            records=deliveries(stream, reply, 3),
            next_cursor=StreamID.MAX if done else sid(reply[2]),
            done=done,
        )

    async def group_ack(
        self,
        stream: str,
        group: str,
        ids: builtins.list[StreamID],
        options: StreamGroupAckOptions | None = None,
    ) -> None:
        """Acknowledge entries: they leave the group's pending list for good. Entries not
        pending (already acked) are skipped, so a resend succeeds. With ``token`` (the
        delivery count the caller was handed) the ack is refused with
        :class:`ConflictError` (reason ``STALE_REPORT``), changing nothing, if any entry
        was delivered again since; without it any consumer may ack (flo's behaviour).
        :class:`NotFoundError` if the stream or group does not exist."""
        if not ids:
            return
        opts = options or StreamGroupAckOptions()
        await self._settle(
            "group_ack", stream, group, ids, opts.namespace, opts.consumer, opts.token
        )

    async def group_nack(
        self,
        stream: str,
        group: str,
        ids: builtins.list[StreamID],
        options: StreamGroupNackOptions | None = None,
    ) -> None:
        """Give entries back for redelivery: a later ``group_read`` hands each out again,
        before new entries, with its delivery count raised; one already delivered
        ``max_deliver`` times goes to the dead letters now. ``token`` fences as for
        :meth:`group_ack`. :class:`NotFoundError` if the stream or group does not exist."""
        if not ids:
            return
        opts = options or StreamGroupNackOptions()
        await self._settle(
            "group_nack", stream, group, ids, opts.namespace, opts.consumer, opts.token
        )

    async def _settle(
        self,
        script: str,
        stream: str,
        group: str,
        ids: Sequence[StreamID],
        namespace: str | None,
        consumer: str,
        token: int | None,
    ) -> None:
        keys, gk = self._group_keys(stream, group, namespace)
        if consumer:
            check_name("consumer", consumer)
        if token is not None and (
            isinstance(token, bool) or not isinstance(token, int) or token < 1
        ):
            raise ValidationError(f"token must be an int >= 1 (a delivery count), got {token!r}")
        redis_ids = ids_arg(ids)
        script_keys = [keys.log, gk.config, gk.due, gk.deliveries]
        if script == "group_nack":
            script_keys += [gk.dead, keys.wake]
        token_arg = "" if token is None else str(token)
        for i in range(0, len(redis_ids), MAX_COUNT):
            chunk = redis_ids[i : i + MAX_COUNT]
            reply = await _scripts.call(
                self._client.redis, script, script_keys, [group, consumer, token_arg, pack(chunk)]
            )
            status = int(reply[0])
            if status == Status.NO_GROUP:
                raise refusal(
                    status,
                    f"group {group!r} of stream {stream!r} not found in namespace "
                    f"{keys.namespace!r}; join it first (group_join)",
                )
            if status == Status.STALE:
                verb = "ack" if script == "group_ack" else "nack"
                at = -3
                raise refusal(
                    status,
                    f"entry {text(reply[at])} of stream {stream!r} (group {group!r}) was "
                    f"delivered again since delivery {token} (now delivery "
                    f"{int(reply[at + 1])}, held by {text(reply[at + 2])!r}); the {verb} was "
                    "refused and changed nothing",
                )

    # --- beyond flo: settings and dead letters --------------------------------------

    async def group_settings(
        self, stream: str, group: str, namespace: str | None = None
    ) -> StreamGroupSettings:
        """The group's settings (the defaults for a group not created yet). Change them
        with ``group_join(..., StreamGroupJoinOptions(ack_timeout_ms=..., max_deliver=...))``."""
        _, gk = self._group_keys(stream, group, namespace)
        with _scripts.redis_errors("group_settings"):
            raw = await self._client.redis.hmget(gk.config, ["ack_timeout_ms", "max_deliver"])
        return StreamGroupSettings(
            ack_timeout_ms=int(raw[0]) if raw[0] is not None else DEFAULT_ACK_TIMEOUT_MS,
            max_deliver=int(raw[1]) if raw[1] is not None else DEFAULT_MAX_DELIVER,
        )

    async def dead_letters(
        self,
        stream: str,
        group: str,
        options: StreamDeadLetterOptions | None = None,
    ) -> builtins.list[DeadLetter]:
        """The group's dead letters, oldest first, from ``start`` (inclusive), at most
        ``count``. Dead letters are kept up to about 10000 per group (oldest dropped)."""
        opts = options or StreamDeadLetterOptions()
        _, gk = self._group_keys(stream, group, opts.namespace)
        count = count_arg("count", opts.count, DEFAULT_COUNT)
        start = "-" if opts.start is None else stream_id_arg("start", opts.start).to_redis()
        with _scripts.redis_errors("dead_letters"):
            entries: Any = await self._client.redis.xrange(gk.dead, start, "+", count=count)
        return [_dead_letter(entry_id, fields) for entry_id, fields in entries]

    async def replay_dead_letters(
        self,
        stream: str,
        group: str,
        ids: builtins.list[StreamID] | None = None,
        count: int = DEFAULT_COUNT,
        namespace: str | None = None,
    ) -> builtins.list[StreamID]:
        """Append dead letters back to the stream as new records (same payload and
        headers) and remove them from the dead letters, atomically: the ones named by
        ``ids`` (dead-letter ids; unknown ones are skipped), or the oldest ``count``.
        Returns the new record ids. Every group of the stream reads them as new records."""
        keys, gk = self._group_keys(stream, group, namespace)
        take = count_arg("count", count, DEFAULT_COUNT)
        named = b""
        if ids is not None:
            names = ids_arg(ids)
            if not names:
                return []
            if len(names) > MAX_COUNT:
                raise ValidationError(f"replay at most {MAX_COUNT} dead letters per call")
            take, named = len(names), pack(names)
        reply = await _scripts.call(
            self._client.redis,
            "group_replay",
            [keys.log, keys.meta, gk.dead, keys.wake],
            [named, take],
        )
        n = int(reply[1])
        return [sid(reply[i + 1]) for i in range(2, 2 + 2 * n, 2)]
