"""A worker process's reaper: the periodic reclaim and upkeep over what it serves.

Each pass takes back the work of gone owners (:func:`flo_redis._session.reclaim.sweep`
for each target), and about once a second runs each action's upkeep: expired leases,
due delayed runs and due schedules, so dead work comes back and schedules fire even when
nobody invokes or polls. Schedules are also fired at their occurrence: each firing says
when the action's next one is due (on Redis's clock), and the reaper wakes then, so a
run is created when its occurrence comes, not at the next upkeep up to a second later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from flo_redis._aio import raise_if_cancelling, wait_event
from flo_redis._session import outage
from flo_redis._session.liveness import DEFAULT_GRACE_MS
from flo_redis._session.reclaim import (
    ReapTarget,
    ReclaimResult,
    reap_queue,
    reclaim_gone_owners,
)
from flo_redis._session.session import Session
from flo_redis._wire.checks import check_count
from flo_redis.actions.schedules import fire_schedules
from flo_redis.errors import (
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
    is_connection_error,
)

log = logging.getLogger("flo_redis.reclaim")

DEFAULT_REAP_INTERVAL_S = 0.25
"""How often a worker's reaper looks for gone owners in each queue it serves."""
_MAX_FAILED_PAUSE_S = 5.0
_FIRE_MARGIN_S = 0.002


class Reaper:
    """A worker process's periodic reclaim over what it serves: every ``interval_s``
    (sooner when a suspect's grace is about to end, at once while a batch left more) it
    takes back the work of gone owners, and about once a second runs each target's
    upkeep, so dead work comes back even when nobody invokes or polls; an action's
    schedules are fired at their occurrences as well (module docstring).

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
        # Action -> loop time its next schedule occurrence is due (learnt by firing).
        self._fire_at: dict[str, float] = {}
        self._firing: dict[str, Callable[[], Awaitable[None]]] = {}
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

        async def fire() -> None:
            self._fire_at.pop(name, None)  # a firing that fails waits for the upkeep
            result = await fire_schedules(self._session, name)
            if result.next_in_ms >= 0:
                # A little after it, so Redis's clock has reached it (else: not due yet).
                delay = result.next_in_ms / 1000 + _FIRE_MARGIN_S
                self._fire_at[name] = asyncio.get_running_loop().time() + delay

        async def upkeep() -> None:
            try:
                await reap_queue(self._session, name)
                await fire()
            except NotFoundError:
                if self._on_unregistered is not None:
                    with contextlib.suppress(Exception):
                        await self._on_unregistered(name)

        self._firing[name] = fire
        self._fire_at[name] = 0.0  # at the first pass: what fell due while none was up
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
            else:
                for name, at in list(self._fire_at.items()):
                    if at <= loop.time():
                        await self._upkeep(name, self._firing[name])
            if self._fire_at and not failures:
                pause = min(pause, max(min(self._fire_at.values()) - loop.time(), 0.0))
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


__all__ = ["DEFAULT_REAP_INTERVAL_S", "Reaper"]
