"""Acks and nacks of consumer-group entries, one or many, fenced by their delivery
counts: functions over a :class:`~flo_redis.streams.partitions.StreamState`, called by
``client.stream`` and the StreamWorker alike.

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
from dataclasses import dataclass

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
from flo_redis._wire.lane import Arg
from flo_redis._wire.status import Status, refusal
from flo_redis._wire.stream_codec import MAX_COUNT, ids_arg
from flo_redis._wire.stream_replies import Settled
from flo_redis.durability import DurabilityLike
from flo_redis.errors import ServerError, ValidationError
from flo_redis.streams.groups import no_group
from flo_redis.streams.partitions import StreamState
from flo_redis.types import StreamGroupAckOptions, StreamGroupNackOptions, StreamID
from flo_redis.types.base import LUA_INT


@dataclass(frozen=True, slots=True)
class Settle:
    """One way to settle entries: its name, its script and its options."""

    verb: str
    script: Script[Settled]
    options: type[StreamGroupAckOptions] | type[StreamGroupNackOptions]


@dataclass(frozen=True, slots=True)
class Nacked:
    """Where a nack's entries went: given back for redelivery, or to the dead letters
    (delivered ``max_deliver`` times); an entry no longer pending counts in neither.
    All 0 for an ack."""

    redelivered: int = 0
    dead: int = 0


ACK = Settle("ack", GROUP_ACK, StreamGroupAckOptions)
"""The entries leave the group's pending list for good."""
NACK = Settle("nack", GROUP_NACK, StreamGroupNackOptions)
"""The entries are handed out again (or dead-lettered)."""


async def settle(
    state: StreamState,
    how: Settle,
    stream: str,
    group: str,
    ids: Sequence[StreamID],
    options: object,
    durability: DurabilityLike | None = None,
) -> Nacked:
    """Ack or nack ``ids`` (of one partition), 1000 per script call; refused with
    ``STALE_REPORT``, changing nothing, when the options' token is stale. ``durability``:
    each ack call's level (a nack takes none). A nack answers where its entries went."""
    done = Nacked()
    if not ids:
        return done
    opts = check_options(options, how.options)
    keys = await state.part(stream, opts.namespace, opts.partition)
    gk = keys.group(group)
    consumer = check_optional_name("consumer", opts.consumer)
    token = opts.token
    if token is not None:
        check_count("token", token, 1, LUA_INT, fix="a record's delivery_count")
    redis_ids = ids_arg(ids)
    fence = "" if token is None else str(token)
    for i in range(0, len(redis_ids), MAX_COUNT):
        chunk = redis_ids[i : i + MAX_COUNT]
        args: list[Arg] = [group, consumer, fence, pack(chunk)]
        reply = await how.script(state.session, (keys, gk), args, durability=durability)
        if reply.status == Status.NO_GROUP:
            raise no_group(keys, group)
        if reply.status == Status.STALE:
            raise refusal(
                reply.status,
                f"entry {reply.stale_id} of stream {stream!r} (group {group!r}) was "
                f"delivered again since delivery {token} (now delivery "
                f"{reply.current_count}, held by {reply.holder!r}); the {how.verb} was "
                "refused and changed nothing",
            )
        done = Nacked(done.redelivered + reply.redelivered, done.dead + reply.dead)
    return done


def ack_items(items: Sequence[tuple[StreamID, int | None]]) -> builtins.list[builtins.list[str]]:
    """``(entry id, token or None)`` pairs as :func:`ack_many` takes them: ``[entry id,
    token or ""]`` each, in Redis's writing; checked."""
    pairs = check_list("items", items)
    for n, item in enumerate(pairs):
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise ValidationError(f"items[{n}] must be an (entry id, token or None) pair")
    tokens = [
        "" if t is None else token_arg(t)  # token_arg: an int in [1, 2**53]
        for _, t in pairs
    ]
    return [[i, t] for i, t in zip(ids_arg([item[0] for item in pairs]), tokens, strict=True)]


async def ack_many(
    state: StreamState,
    stream: str,
    group: str,
    keys: StreamKeys,
    consumer: str,
    packed: Sequence[Sequence[str]],
    durability: DurabilityLike | None = None,
) -> builtins.list[ServerError | None]:
    """Ack checked items, each ``[entry id, token or ""]`` in Redis's writing, on the
    partition of ``keys``: one call per 1000, and each item answered on its own (None:
    acked, or already was; else its ``STALE_REPORT`` refusal). :class:`NotFoundError`
    when the group does not exist."""
    gk = keys.group(group)
    owner = state.session.owner_id  # most likely the reader: its index looked at first
    answers: builtins.list[ServerError | None] = []
    for start in range(0, len(packed), MAX_COUNT):
        chunk = packed[start : start + MAX_COUNT]
        reply = await GROUP_ACK_MANY(
            state.session, (keys, gk), [group, consumer, pack(chunk), owner], durability=durability
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
