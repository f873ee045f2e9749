"""Reclaim: a dead worker process's runs, deliveries and messages come back in about a
second.

How the reclaim scripts judge an owner (present, suspected, gone after the grace,
:data:`DEFAULT_GRACE_MS`) is in ``lua/README.md`` ("Liveness"); :func:`sweep` calls one
of them (``action_reclaim``, ``group_reclaim``, ``queue_reclaim``) about every owner of a
queue or group. :class:`Reaper` sweeps periodically in every worker process, so dead
work comes back even when nothing new is invoked or polled. The counters the scripts keep of it
are read by :mod:`flo_redis._session.liveness_stats`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from flo_redis._session.liveness import DEFAULT_GRACE_MS
from flo_redis._session.session import Session
from flo_redis._wire import runner
from flo_redis._wire.aside import scope_of, warn_set_aside
from flo_redis._wire.checks import check_count, check_names
from flo_redis._wire.codec import decoded, pack
from flo_redis._wire.gateway import ACTION_REAP, ACTION_RECLAIM, Script
from flo_redis._wire.keys import (
    ActionKeys,
    GroupKeys,
    QueueKeys,
    StreamKeys,
    action_keys,
    owner_channel,
)
from flo_redis._wire.refusals import not_registered
from flo_redis._wire.replies import Reclaimed
from flo_redis._wire.runner import Arg
from flo_redis._wire.status import Status, refusal
from flo_redis.errors import (
    ValidationError,
)

log = logging.getLogger("flo_redis.reclaim")

RECLAIM_BATCH = 100
#: The most index entries one reclaim call may take back (the script's bound).
RECLAIM_BATCH_MAX = 1000
"""At most this many runs of gone owners are looked at per reclaim script call."""
MAX_OWNERS_PER_CALL = 100
"""Owners (and their channels, in KEYS) named in one reclaim script call."""
REAP_BATCH = 100  # runs a reap step touches at most


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    """What one reclaim pass did (over a queue, or a consumer group's partitions)."""

    reclaimed: int
    """Work of gone owners taken back (runs back to wait or FAILED, entries due again)."""
    wait_ms: int
    """When the earliest suspected owner's grace ends (-1: nobody is suspected)."""
    more: bool
    """True when the batch ran out before everything of the gone owners was taken back."""

    def plus(self, other: ReclaimResult) -> ReclaimResult:
        """Both passes as one: counts added, the earlier grace end, more if either."""
        waits = [w for w in (self.wait_ms, other.wait_ms) if w >= 0]
        return ReclaimResult(
            self.reclaimed + other.reclaimed, min(waits, default=-1), self.more or other.more
        )


NOTHING = ReclaimResult(0, -1, False)

Swept = ActionKeys | QueueKeys | tuple[StreamKeys, GroupKeys]
"""The keys of what a reclaim script sweeps: an action queue, a plain queue, or one
partition of a stream with its consumer group."""


async def _reclaim_call(
    session: Session,
    script: Script[Reclaimed],
    keys: Swept,
    args: Sequence[Arg],
    owners: Sequence[str],
    refused: Callable[[int], Exception | None],
) -> ReclaimResult | None:
    """One reclaim script call for ``owners`` (their liveness channels in KEYS); None
    when ``refused`` says the refusal only means there is nothing to sweep."""
    tag = keys[0].tag if isinstance(keys, tuple) else keys.tag
    reply = await script(
        session,
        keys,
        [*args, pack(list(owners))],
        tail=[owner_channel(tag, o) for o in owners],
    )
    if reply.status != Status.OK:
        error = refused(reply.status)
        if error is None:
            return None
        raise error
    if reply.aside:
        warn_set_aside(scope_of(keys), reply.aside)
    return ReclaimResult(reply.reclaimed, reply.wait_ms, reply.more)


async def sweep(
    session: Session,
    script: Script[Reclaimed],
    keys: Swept,
    args: Sequence[Arg],
    refused: Callable[[int], Exception | None],
) -> ReclaimResult:
    """Ask ``script`` (``action_reclaim``, ``queue_reclaim`` or ``group_reclaim``) about
    every owner holding work under ``keys``, :data:`MAX_OWNERS_PER_CALL` per call,
    each call with ``args`` then the packed owners. A non-OK status raises
    ``refused(status)``, or, when that is None, ends the sweep quietly (the queue or
    group is gone).

    The owner list read first is only a hint of whom to ask about: each script call
    checks every owner and every item again, atomically."""
    owners_key = keys[1].owners if isinstance(keys, tuple) else keys.owners
    with runner.redis_errors("reclaim"):
        raw = await session.redis.hkeys(owners_key)
    owners = sorted(decoded(o) for o in raw)
    total = NOTHING
    for i in range(0, len(owners), MAX_OWNERS_PER_CALL):
        chunk = owners[i : i + MAX_OWNERS_PER_CALL]
        result = await _reclaim_call(session, script, keys, args, chunk, refused)
        if result is None:
            break
        total = total.plus(result)
    return total


async def reap_queue(session: Session, name: str, namespace: str | None = None) -> int:
    """Upkeep of one queue (expired leases, due delayed runs, retention), bounded;
    returns how many runs became ready. :class:`NotFoundError` if not registered."""
    keys = action_keys(session.get_namespace(namespace), name)
    reply = await ACTION_REAP(session, keys, [REAP_BATCH])
    if reply.status != Status.OK:
        raise not_registered(keys)
    if reply.aside:
        warn_set_aside(scope_of(keys), reply.aside)
    return reply.ready


def _action_refused(name: str, keys: ActionKeys) -> Callable[[int], Exception]:
    def refused(status: int) -> Exception:
        if status == Status.NO_ACTION:
            return refusal(
                status,
                f"action {name!r} is not registered in namespace {keys.namespace!r}; "
                "register it first",
            )
        return refusal(status, f"reclaim in action {name!r}: grace_ms or batch out of range")

    return refused


async def reclaim_owners(
    session: Session,
    name: str,
    owners: Sequence[str],
    *,
    grace_ms: int = DEFAULT_GRACE_MS,
    batch: int = RECLAIM_BATCH,
    namespace: str | None = None,
) -> ReclaimResult:
    """One atomic reclaim script call for up to :data:`MAX_OWNERS_PER_CALL` owners of
    action ``name``'s queue. Takes back only runs whose recorded owner is exactly one of
    ``owners`` and whose liveness channel stayed without a subscriber for ``grace_ms``;
    a present owner's runs are never touched, whatever the caller asks."""
    check_count("grace_ms", grace_ms, 0, 2**32 - 1)
    check_count("batch", batch, 1, RECLAIM_BATCH_MAX)
    owners = check_names("owners", owners)
    if not owners:
        return NOTHING
    if len(owners) > MAX_OWNERS_PER_CALL:
        raise ValidationError(f"at most {MAX_OWNERS_PER_CALL} owners per reclaim call")
    keys = action_keys(session.get_namespace(namespace), name)
    refused = _action_refused(name, keys)
    result = await _reclaim_call(session, ACTION_RECLAIM, keys, [grace_ms, batch], owners, refused)
    assert result is not None  # _action_refused never answers None
    return result


async def reclaim_gone_owners(
    session: Session,
    name: str,
    *,
    grace_ms: int = DEFAULT_GRACE_MS,
    batch: int = RECLAIM_BATCH,
    namespace: str | None = None,
) -> ReclaimResult:
    """Look at every owner holding work in action ``name``'s queue and take back what
    gone owners hold (see :func:`reclaim_owners` and :func:`sweep`); suspects are marked
    for later."""
    check_count("grace_ms", grace_ms, 0, 2**32 - 1)
    check_count("batch", batch, 1, RECLAIM_BATCH_MAX)
    keys = action_keys(session.get_namespace(namespace), name)
    return await sweep(
        session, ACTION_RECLAIM, keys, [grace_ms, batch], _action_refused(name, keys)
    )


@dataclass(frozen=True, slots=True)
class ReapTarget:
    """One thing a :class:`Reaper` sweeps: ``name`` (for logs and ``on_reclaimed``),
    ``sweep(grace_ms)`` (one reclaim pass over it), and ``upkeep()``, run about once a
    second (None: it needs none)."""

    name: str
    sweep: Callable[[int], Awaitable[ReclaimResult]]
    upkeep: Callable[[], Awaitable[None]] | None = None


__all__ = [
    "ReapTarget",
    "ReclaimResult",
    "reclaim_gone_owners",
    "reclaim_owners",
    "sweep",
]
