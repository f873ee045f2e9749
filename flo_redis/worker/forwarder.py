"""A worker process's graph forwarder: it carries its actions' dependency messages
(:func:`flo_redis.actions.graph.forward`) when a script nudges it (on the action's
``nudge`` channel, published as a run with dependents ends), when a message it saw
falls due (a group's tally, due milliseconds after its members' ends) and at least once
a second, so a message a forwarder left half done (it died) is carried again once its
lease ends, and nothing waits on a nudge that was missed. Each upkeep also carries the messages of
the namespace's open batches whose turn has come (every few seconds each).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from flo_redis._aio import raise_if_cancelling, wait_event
from flo_redis._session import outage
from flo_redis._session.listener import Listener
from flo_redis._session.session import Session
from flo_redis._wire.keys import ActionKeys, action_keys
from flo_redis.actions.batches import forward_due_batches
from flo_redis.actions.graph import GROUP_TELL_MS, forward
from flo_redis.errors import NotConnectedError, PermissionDeniedError, is_connection_error

log = logging.getLogger("flo_redis.graph")

UPKEEP_S = 1.0  # the longest a due message waits for a forwarder without a nudge
_MAX_FAILED_PAUSE_S = 5.0


class _Nudges(Listener):
    """Woken by the graph's nudges on one action's ``nudge`` channel (or a lost
    subscription, after which it arms again)."""

    def __init__(self, ensure: Any, channel: str, woken: asyncio.Event) -> None:
        super().__init__(ensure, [channel])
        self._woken = woken
        self.nudged = True  # a first round for every action
        self.due_at: float | None = None  # (loop time) the earliest message left is due

    def fire(self, message: bytes | None = None) -> None:
        self.nudged = True
        self._woken.set()


class Forwarder:
    """Carries the graph messages of ``actions``' outboxes until cancelled."""

    def __init__(self, session: Session, actions: Sequence[str]) -> None:
        self._session = session
        self._keys = [action_keys(session.namespace, name) for name in dict.fromkeys(actions)]
        self.carried = 0

    async def _round(
        self, which: Sequence[tuple[ActionKeys, _Nudges | None]], ahead_ms: int = 0
    ) -> None:
        """Forward the outboxes of ``which`` once (with the messages due within
        ``ahead_ms``), noting when each one's next message is due (none when a round
        carried nothing though one is due: it waits for the upkeep rather than be taken
        again at once)."""
        loop = asyncio.get_running_loop()
        for keys, nudges in which:
            if nudges is not None:
                nudges.nudged = False
            result = await forward(self._session, keys, ahead_ms=ahead_ms)
            self.carried += result.messages
            due = result.due_in_s
            if nudges is not None:
                stuck = due == 0 and result.messages == 0
                nudges.due_at = None if due is None or stuck else loop.time() + due

    async def flush(self) -> None:
        """One last round, as the worker stops: the ends of its last runs are told now
        (its groups' tallies too), not at another worker's upkeep (a failure leaves them
        to that)."""
        try:
            await self._round([(keys, None) for keys in self._keys], GROUP_TELL_MS)
        except Exception as exc:
            log.debug("a last forwarding round failed (%s); left to the upkeep", exc)

    async def run(self) -> None:
        """Forward until cancelled (after the worker's last reports: :meth:`flush`);
        failures are logged and retried (an ACL that refuses the graph scripts is logged
        and raised: retrying cannot help)."""
        if not self._keys:
            return
        waker = self._session.waker
        woken = asyncio.Event()
        nudges = [_Nudges(waker.ensure, keys.nudge, woken) for keys in self._keys]
        failures = 0
        loop = asyncio.get_running_loop()
        upkeep_at = loop.time()
        async with contextlib.AsyncExitStack() as stack:
            for listener in nudges:
                await stack.enter_async_context(waker.attached(listener))
            while True:
                raise_if_cancelling()
                try:
                    woken.clear()
                    for listener in nudges:
                        await listener.arm()  # before the round: a nudge during it is kept
                    now = loop.time()
                    upkeep = now >= upkeep_at
                    if upkeep:
                        upkeep_at = now + UPKEEP_S
                    which = [
                        (keys, listener)
                        for keys, listener in zip(self._keys, nudges, strict=True)
                        if upkeep
                        or listener.nudged
                        or (listener.due_at is not None and listener.due_at <= now)
                    ]
                    await self._round(which)
                    pause = (
                        min([upkeep_at] + [n.due_at for n in nudges if n.due_at is not None])
                        - loop.time()
                    )
                    if upkeep:
                        await forward_due_batches(self._session, self._session.namespace)
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except PermissionDeniedError as exc:
                    log.error("forwarding dependency messages refused: %s", exc)
                    raise
                except Exception as exc:
                    failures += 1
                    pause = min(0.1 * 2**failures, _MAX_FAILED_PAUSE_S)
                    if is_connection_error(exc) or isinstance(exc, NotConnectedError):
                        outage.failed(log, self._session.redis, "graph forwarding", exc)
                    elif failures == 1:
                        log.warning("forwarding dependency messages failed (%s); retrying", exc)
                    await asyncio.sleep(pause)
                    continue
                if pause > 0:
                    await wait_event(woken, pause)


__all__ = ["Forwarder"]
