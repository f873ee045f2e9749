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

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from flo_redis._session import outage
from flo_redis._session.aio import raise_if_cancelling, wait_event
from flo_redis._session.aside import scope_of, warn_set_aside
from flo_redis._session.liveness import DEFAULT_GRACE_MS
from flo_redis._session.session import Session
from flo_redis._wire import runner
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
from flo_redis.actions.schedules import fire_due
from flo_redis.errors import (
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
    is_connection_error,
)

log = logging.getLogger("flo_redis._session.reclaim")

DEFAULT_REAP_INTERVAL_S = 0.25
"""How often a worker's reaper looks for gone owners in each queue it serves."""
RECLAIM_BATCH = 100
#: The most index entries one reclaim call may take back (the script's bound).
RECLAIM_BATCH_MAX = 1000
"""At most this many runs of gone owners are looked at per reclaim script call."""
MAX_OWNERS_PER_CALL = 100
"""Owners (and their channels, in KEYS) named in one reclaim script call."""
_MAX_FAILED_PAUSE_S = 5.0
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


class Reaper:
    """A worker process's periodic reclaim over what it serves: every ``interval_s``
    (sooner when a suspect's grace is about to end, at once while a batch left more) it
    takes back the work of gone owners, and about once a second runs each target's
    upkeep, so dead work comes back even when nobody invokes or polls.

    ``actions`` are action queues (upkeep: expired leases, due delayed runs, due
    schedules, so schedules fire while any worker of their action is up); ``targets``
    anything else with a sweep (a consumer group: ``client.stream.reap_target``).
    ``on_reclaimed(name, count)`` hears of every batch taken back, and
    ``on_unregistered(action)`` is awaited when the upkeep finds an action no longer
    registered (its Redis was flushed or restarted empty), so its owner can restore it."""

    def __init__(
        self,
        session: Session,
        actions: Sequence[str] = (),
        *,
        targets: Sequence[ReapTarget] = (),
        interval_s: float = DEFAULT_REAP_INTERVAL_S,
        grace_ms: int = DEFAULT_GRACE_MS,
        upkeep_every_s: float = 1.0,
        on_reclaimed: Callable[[str, int], None] | None = None,
        on_unregistered: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ValidationError(f"interval_s must be positive, got {interval_s}")
        check_count("grace_ms", grace_ms, 0)
        self._session = session
        self._targets = [self._action(name) for name in dict.fromkeys(actions)]
        self._targets += targets
        self._interval_s = interval_s
        self._grace_ms = grace_ms
        self._upkeep_every_s = upkeep_every_s
        self._on_reclaimed = on_reclaimed
        self._on_unregistered = on_unregistered
        self.reclaimed = 0

    def _action(self, name: str) -> ReapTarget:
        async def swept(grace_ms: int) -> ReclaimResult:
            return await reclaim_gone_owners(self._session, name, grace_ms=grace_ms)

        async def upkeep() -> None:
            try:
                await reap_queue(self._session, name)
                await fire_due(self._session, name)
            except NotFoundError:
                if self._on_unregistered is not None:
                    with contextlib.suppress(Exception):
                        await self._on_unregistered(name)

        return ReapTarget(name, swept, upkeep)

    async def run(self, stop: asyncio.Event) -> None:
        """Reap until ``stop`` is set. Failures are logged and retried, backing off to
        :data:`_MAX_FAILED_PAUSE_S` while Redis is unreachable; an ACL refusal is logged
        and raised (retrying cannot help until the ACL changes)."""
        loop = asyncio.get_running_loop()
        next_upkeep = loop.time() + self._upkeep_every_s
        failures = 0
        while not stop.is_set():
            raise_if_cancelling()
            pause = self._interval_s
            failed = False
            for target in self._targets:
                try:
                    result = await target.sweep(self._grace_ms)
                except asyncio.CancelledError:
                    raise
                except PermissionDeniedError as exc:
                    log.error("reclaim in %r refused: %s", target.name, exc)
                    raise
                except Exception as exc:
                    failed = True
                    if is_connection_error(exc):
                        outage.failed(log, self._session.redis, "reclaim", exc)
                    elif failures == 0:
                        log.warning("reclaim in %r failed (%s); trying again", target.name, exc)
                    continue
                if result.reclaimed:
                    self.reclaimed += result.reclaimed
                    if self._on_reclaimed is not None:
                        self._on_reclaimed(target.name, result.reclaimed)
                    log.info(
                        "took back %d item(s) of gone owners in %r", result.reclaimed, target.name
                    )
                if result.more:
                    pause = 0.0
                elif result.wait_ms >= 0:
                    pause = min(pause, result.wait_ms / 1000.0 + 0.005)
            failures = failures + 1 if failed else 0
            if failures:
                pause = min(self._interval_s * 2**failures, _MAX_FAILED_PAUSE_S)
            elif loop.time() >= next_upkeep:
                next_upkeep = loop.time() + self._upkeep_every_s
                for target in self._targets:
                    if target.upkeep is not None:
                        await self._upkeep(target.name, target.upkeep)
            if pause > 0:
                await wait_event(stop, pause)
            else:
                await asyncio.sleep(0)

    @staticmethod
    async def _upkeep(name: str, upkeep: Callable[[], Awaitable[None]]) -> None:
        try:
            await upkeep()
        except Exception as exc:
            log.debug("upkeep of %r failed (%s); trying again", name, exc)


__all__ = [
    "DEFAULT_REAP_INTERVAL_S",
    "ReapTarget",
    "Reaper",
    "ReclaimResult",
    "reclaim_gone_owners",
    "reclaim_owners",
    "sweep",
]
