"""Seeing a namespace's streams: which exist, and per consumer group its lag, pending
deliveries, consumers, dead letters and records set aside (functions over a
:class:`~flo_redis.streams.partitions.StreamState`).

Streams are listed from the namespace's stream registry (written when a stream is
created or a group joins it); a group's figures come from Redis's own bookkeeping of the
consumer group (``XINFO GROUPS``: ``lag`` is what the group has not been handed yet,
``pending`` what it was handed and not acked) plus the length of its dead-letter stream,
summed over the stream's partitions. Each call costs a few commands per partition.
"""

from __future__ import annotations

import asyncio
import builtins
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rex

from flo_redis._wire import runner
from flo_redis._wire.checks import MAX_LIST_LIMIT, check_count
from flo_redis._wire.codec import decoded
from flo_redis._wire.keys import StreamKeys, namespace_keys
from flo_redis.streams.partitions import StreamState


@dataclass(frozen=True, slots=True)
class GroupCounts:
    """One consumer group of a stream, over all its partitions.

    ``lag``: records appended that the group has not been handed yet (None when Redis
    cannot tell, after records were deleted from the middle of a partition);
    ``pending``: records handed out and not acked yet; ``consumers``: consumers known to
    the group; ``dead_letters``: records it gave up on, kept for replay;
    ``quarantined``: records set aside because their headers do not decode
    (:class:`~flo_redis.quarantine.GroupQuarantine`)."""

    stream: str
    group: str
    partitions: int
    consumers: int
    pending: int
    lag: int | None
    dead_letters: int
    quarantined: int = 0


async def names(state: StreamState, namespace: str | None, limit: int) -> tuple[str, ...]:
    """The streams of the namespace's registry, in name order (at most ``limit``)."""
    check_count("limit", limit, 1, MAX_LIST_LIMIT)
    index = namespace_keys(state.session.get_namespace(namespace)).streams
    with runner.redis_errors("stream list"):
        found = await state.session.redis.zrange(index, 0, limit - 1)
    return tuple(decoded(n) for n in found)


async def groups(state: StreamState, stream: str, namespace: str | None) -> tuple[GroupCounts, ...]:
    """Every consumer group of ``stream``, summed over the partitions, by name."""
    parts = await state.parts(stream, namespace)
    per_partition = await asyncio.gather(*(_groups_of(state, k) for k in parts))
    merged: dict[str, GroupCounts] = {}
    for found in per_partition:
        for g in found:
            seen = merged.get(g.group)
            if seen is None:
                merged[g.group] = g
                continue
            lag = None if seen.lag is None or g.lag is None else seen.lag + g.lag
            merged[g.group] = GroupCounts(
                stream=stream,
                group=g.group,
                partitions=seen.partitions + 1,
                consumers=max(seen.consumers, g.consumers),
                pending=seen.pending + g.pending,
                lag=lag,
                dead_letters=seen.dead_letters + g.dead_letters,
                quarantined=seen.quarantined + g.quarantined,
            )
    return tuple(merged[name] for name in sorted(merged))


async def _groups_of(state: StreamState, keys: StreamKeys) -> builtins.list[GroupCounts]:
    conn = state.session.redis
    with runner.redis_errors("stream groups"):
        try:
            infos: Any = await conn.xinfo_groups(keys.log)
        except rex.ResponseError as exc:
            if "no such key" not in str(exc).lower():
                raise
            return []  # no such stream
        names = [decoded(info["name"]) for info in infos]
        dead = await asyncio.gather(*(conn.xlen(keys.group(n).dead) for n in names))
        aside = await asyncio.gather(*(conn.xlen(keys.group(n).quarantine) for n in names))
    return [
        GroupCounts(
            stream=keys.stream,
            group=name,
            partitions=1,
            consumers=int(info["consumers"]),
            pending=int(info["pending"]),
            lag=None if info.get("lag") is None else int(info["lag"]),
            dead_letters=int(n_dead),
            quarantined=int(n_aside),
        )
        for name, info, n_dead, n_aside in zip(names, infos, dead, aside, strict=True)
    ]
