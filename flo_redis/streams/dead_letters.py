"""A consumer group's dead letters: the entries it gave up on, and replaying them;
functions over a :class:`~flo_redis.streams.partitions.StreamState`.

An entry is dead-lettered when it was nacked or left unacked past the group's ack
timeout once too often (``max_deliver``); ``lib/stream.lua`` moves it, with its payload,
headers and the reason, to the group's dead-letter stream of its partition (kept up to
about 10000 entries, oldest dropped). ``lua/group_replay.lua`` appends dead letters back
to their partition as new records, atomically with removing them.
"""

from __future__ import annotations

import asyncio
import builtins
from dataclasses import dataclass
from typing import Any

from flo_redis._wire import runner
from flo_redis._wire.aside import warn_unreadable
from flo_redis._wire.checks import check_options
from flo_redis._wire.codec import BadRecord, pack, text
from flo_redis._wire.gateway import GROUP_REPLAY
from flo_redis._wire.keys import StreamKeys, check_name
from flo_redis._wire.stream_codec import (
    DEFAULT_COUNT,
    MAX_COUNT,
    count_arg,
    decode_headers,
    ids_arg,
    sid,
    stream_id_arg,
)
from flo_redis.errors import ValidationError
from flo_redis.streams.partitions import StreamState, merged
from flo_redis.types import StreamID


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
    partition: int = 0


@dataclass
class StreamDeadLetterOptions:
    """Options for ``dead_letters``: from ``start`` (inclusive, None: the oldest), at
    most ``count`` (1..1000); ``partition`` limits it to one partition (None: all)."""

    namespace: str | None = None
    start: StreamID | None = None
    count: int = DEFAULT_COUNT
    partition: int | None = None


def _dead_letter(entry_id: bytes, fields: dict[bytes, bytes], partition: int) -> DeadLetter:
    try:
        headers = decode_headers(fields.get(b"h", b""))
    except BadRecord as exc:  # listed without them; a replay appends the bytes as they are
        headers = None
        warn_unreadable(
            ("dead letter", entry_id.decode(errors="replace")),
            f"dead letter {entry_id.decode(errors='replace')} (partition {partition}) has "
            f"headers that do not decode ({exc}); listed without them",
        )
    return DeadLetter(
        id=sid(entry_id),
        original_id=sid(fields[b"id"]),
        payload=bytes(fields.get(b"p", b"")),
        headers=headers,
        delivery_count=int(fields.get(b"n", 0)),
        reason=text(fields.get(b"r")) or "",
        consumer=text(fields.get(b"c")) or "",
        owner=text(fields.get(b"o")) or "",
        dead_at_ms=int(fields.get(b"t", 0)),
        partition=partition,
    )


async def listed(
    state: StreamState, stream: str, group: str, options: StreamDeadLetterOptions | None
) -> builtins.list[DeadLetter]:
    """The group's dead letters of every partition (or one), oldest first."""
    opts = check_options(options, StreamDeadLetterOptions)
    check_name("group name", group)
    count = count_arg("count", opts.count, DEFAULT_COUNT)
    start = "-" if opts.start is None else stream_id_arg("start", opts.start).to_redis()
    parts = await state.parts(stream, opts.namespace, opts.partition)

    async def letters(keys: StreamKeys) -> builtins.list[DeadLetter]:
        with runner.redis_errors("dead_letters"):
            entries: Any = await state.session.redis.xrange(
                keys.group(group).dead, start, "+", count=count
            )
        return [_dead_letter(i, fields, keys.partition) for i, fields in entries]

    return merged(await asyncio.gather(*(letters(k) for k in parts)), count)


async def replay(
    state: StreamState,
    stream: str,
    group: str,
    ids: builtins.list[StreamID] | None,
    count: int,
    namespace: str | None,
    partition: int | None,
) -> builtins.list[StreamID]:
    """Append the named (or the oldest ``count``) dead letters back to their partition,
    atomically with removing them; the new record ids."""
    check_name("group name", group)
    take = count_arg("count", count, DEFAULT_COUNT)
    named = b""
    if ids is not None:
        names = ids_arg(ids)
        if not names:
            return []
        if len(names) > MAX_COUNT:
            raise ValidationError(f"replay at most {MAX_COUNT} dead letters per call")
        take, named = len(names), pack(names)
        partition = partition or 0
    parts = await state.parts(stream, namespace, partition)
    replayed: builtins.list[StreamID] = []
    for keys in parts:
        if len(replayed) >= take:
            break
        reply = await GROUP_REPLAY(
            state.session, (keys, keys.group(group)), [named, take - len(replayed)]
        )
        replayed += reply.new_ids
    return replayed
