"""Acks and nacks of ``client.stream``'s consumer groups: one entry or many, fenced by
their delivery counts.

An ack takes entries off the group's pending list for good; a nack gives them back for
redelivery before new entries (or to the dead letters once delivered ``max_deliver``
times). Both skip entries no longer pending, so a resend succeeds, and with a ``token`` (the
delivery count the caller was handed) both are refused with ``STALE_REPORT``, changing
nothing, once an entry was delivered again (``lua/group_ack.lua``,
``lua/group_nack.lua``).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from flo_redis._wire.checks import (
    check_count,
    check_list,
    check_optional_name,
    check_options,
    token_arg,
)
from flo_redis._wire.codec import pack
from flo_redis._wire.gateway import GROUP_ACK, GROUP_ACK_MANY, GROUP_NACK, Script
from flo_redis._wire.keys import StreamKeys
from flo_redis._wire.status import Status, refusal
from flo_redis._wire.stream_codec import MAX_COUNT, ids_arg
from flo_redis._wire.stream_replies import Settled
from flo_redis.errors import ServerError, ValidationError
from flo_redis.streams.groups import no_group
from flo_redis.streams.partitions import PartitionedStreams
from flo_redis.types import StreamGroupAckOptions, StreamGroupNackOptions, StreamID
from flo_redis.types.base import LUA_INT


class GroupAcks(PartitionedStreams):
    """``client.stream``'s acks and nacks of consumer-group entries."""

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
        The ids are those of partition ``options.partition`` (0 unless the stream is
        partitioned). :class:`NotFoundError` if the stream or group does not exist."""
        if ids:
            opts = check_options(options, StreamGroupAckOptions)
            await self._settle(GROUP_ACK, "ack", stream, group, ids, opts)

    async def group_ack_many(
        self,
        stream: str,
        group: str,
        items: Sequence[tuple[StreamID, int | None]],
        consumer: str = "",
        partition: int = 0,
        namespace: str | None = None,
    ) -> builtins.list[ServerError | None]:
        """Acknowledge several entries, each with its own token (``None``: any consumer),
        under exactly :meth:`group_ack`'s rules, one call per 1000: ``None`` where the
        entry is acked (or already was), else the :class:`ConflictError`
        (``STALE_REPORT``) its single ack would have raised."""
        keys = await self._partition(stream, namespace, partition)
        consumer = check_optional_name("consumer", consumer)
        pairs = check_list("items", items)
        for n, item in enumerate(pairs):
            if not isinstance(item, tuple | list) or len(item) != 2:
                raise ValidationError(f"items[{n}] must be an (entry id, token or None) pair")
        tokens = [
            "" if t is None else token_arg(t)  # token_arg: an int in [1, 2**53]
            for _, t in pairs
        ]
        packed = [[i, t] for i, t in zip(ids_arg([item[0] for item in pairs]), tokens, strict=True)]
        return await self._ack_many(stream, group, keys, consumer, packed)

    async def _ack_checked(
        self,
        stream: str,
        group: str,
        consumer: str,
        partition: int,
        packed: Sequence[Sequence[str]],
    ) -> builtins.list[ServerError | None]:
        """:meth:`group_ack_many` for a worker whose items need no checks: each
        ``[entry id, token or ""]`` as Redis writes them, of a ``partition`` it read."""
        keys = await self._partition(stream, None, partition)
        return await self._ack_many(stream, group, keys, consumer, packed)

    async def _ack_many(
        self,
        stream: str,
        group: str,
        keys: StreamKeys,
        consumer: str,
        packed: Sequence[Sequence[str]],
    ) -> builtins.list[ServerError | None]:
        """:meth:`group_ack_many` of checked items: ``[entry id, token or ""]`` each, in
        Redis's writing, on the partition of ``keys``."""
        gk = keys.group(group)
        owner = self._session.owner_id  # most likely the reader: its index looked at first
        answers: builtins.list[ServerError | None] = []
        for start in range(0, len(packed), MAX_COUNT):
            chunk = packed[start : start + MAX_COUNT]
            reply = await GROUP_ACK_MANY(
                self._session, (keys, gk), [group, consumer, pack(chunk), owner]
            )
            if reply.status == Status.NO_GROUP:
                raise no_group(keys, group)
            if reply.statuses.count(Status.OK) == len(chunk):  # the common case: all acked
                answers += [None] * len(chunk)
                continue
            for (entry_id, token), status, current in zip(
                chunk, reply.statuses, reply.counts, strict=True
            ):
                answers.append(
                    None
                    if status == Status.OK
                    else refusal(
                        status,
                        f"entry {entry_id} of stream {stream!r} (group {group!r}) was "
                        f"delivered again since delivery {token} (now delivery {current}); "
                        "the ack was dropped",
                    )
                )
        return answers

    async def group_nack(
        self,
        stream: str,
        group: str,
        ids: builtins.list[StreamID],
        options: StreamGroupNackOptions | None = None,
    ) -> None:
        """Give entries back for redelivery: a later ``group_read`` hands each out again,
        before new entries, with its delivery count raised; one already delivered
        ``max_deliver`` times goes to the dead letters now. ``token`` and ``partition``
        as for :meth:`group_ack`. :class:`NotFoundError` if the stream or group does not
        exist."""
        if ids:
            opts = check_options(options, StreamGroupNackOptions)
            await self._settle(GROUP_NACK, "nack", stream, group, ids, opts)

    async def _settle(
        self,
        script: Script[Settled],
        verb: str,
        stream: str,
        group: str,
        ids: Sequence[StreamID],
        opts: StreamGroupAckOptions | StreamGroupNackOptions,
    ) -> None:
        """Ack or nack ``ids`` (``verb`` names which), 1000 per script call."""
        keys = await self._partition(stream, opts.namespace, opts.partition)
        gk = keys.group(group)
        consumer = check_optional_name("consumer", opts.consumer)
        token = opts.token
        if token is not None:
            check_count("token", token, 1, LUA_INT, fix="a record's delivery_count")
        redis_ids = ids_arg(ids)
        fence = "" if token is None else str(token)
        for i in range(0, len(redis_ids), MAX_COUNT):
            chunk = redis_ids[i : i + MAX_COUNT]
            reply = await script(self._session, (keys, gk), [group, consumer, fence, pack(chunk)])
            if reply.status == Status.NO_GROUP:
                raise no_group(keys, group)
            if reply.status == Status.STALE:
                raise refusal(
                    reply.status,
                    f"entry {reply.stale_id} of stream {stream!r} (group {group!r}) was "
                    f"delivered again since delivery {token} (now delivery "
                    f"{reply.current_count}, held by {reply.holder!r}); the {verb} was "
                    "refused and changed nothing",
                )
