"""Cancel notices: the worker holding a run hears at once that the run was cancelled.

``run_cancel`` (``lua/README.md``, "Cancel") publishes ``"<token> <run_id>"`` on the
holder's notice channel (:func:`flo_redis._wire.keys.notice_channel`: one per owner in each
queue's hash slot) in the same script that revokes the lease. A worker listens on its
owner's notice channels through its client's :class:`~flo_redis._session.wake.Waker` — the
wake-up connection it already has, never the liveness one — and cancels the handler as
for a lost lease. A notice can be missed (the subscription was being made again, or the
run changed hands between the cancel's two steps); the holder then learns at its next
touch, which is refused, as before.

A notice is a claim, not a proof: anyone who may publish on the channel (a producer
cancels, so it may) can send one, with an owner and token read from the run's record. So
a worker acts on a notice only once Redis confirms it: the run's record says CANCELLED
under the notice's token (:func:`flo_redis.actions.runs.cancel_confirmed`, one ``HGET``). A
notice Redis does not confirm is logged at WARNING and dropped; the handler goes on, and
its reports are fenced by its token as always.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from flo_redis._session.listener import Listener
from flo_redis._session.wake import Waker
from flo_redis._wire.keys import notice_channel
from flo_redis._wire.runner import RedisConn, redis_errors
from flo_redis.errors import FloError, is_connection_error

log = logging.getLogger("flo_redis.notices")

# A worker's listener wakes this often even when nothing happens, to check that its
# subscriptions stand (a lost one wakes it at once as well).
_RECHECK_S = 30.0
_RETRY_PAUSE_S = (0.05, 0.1, 0.25, 0.5, 1.0)


def cancel_notice(token: int, run_id: str) -> str:
    """What ``run_cancel`` publishes: the revoked lease's token, then the run id."""
    return f"{token} {run_id}"


def parse_notice(data: bytes) -> tuple[str, int] | None:
    """``(run_id, token)`` of a notice; None for anything else."""
    token, _, run_id = data.decode("utf-8", errors="replace").partition(" ")
    if not run_id or not token.isdigit():
        return None
    return run_id, int(token)


async def tell(redis: RedisConn, notice: tuple[str, str]) -> None:
    """Publish ``(channel, message)``, a notice the cancel script could not send itself
    (``flo_redis.actions.runs.cancel_reply``): best effort, as the holder's next touch tells
    it anyway."""
    channel, message = notice
    try:
        with redis_errors("cancel notice"):
            await redis.spublish(channel, message)
    except FloError as exc:
        log.info("cancel notice on %s not sent (%s); the next touch tells", channel, exc)


class _NoticeListener(Listener):
    """Hands each notice to ``on_notice`` as it arrives; wakes its keeper only when the
    subscriptions were lost (or the waker interrupted)."""

    def __init__(self, waker: Waker, channels: list[str], on_notice: Callable[[bytes], None]):
        super().__init__(waker.ensure, channels)
        self._on_notice = on_notice

    def fire(self, message: bytes | None = None) -> None:
        if message is None:
            super().fire()
        else:
            self._on_notice(message)


# Notices heard and not confirmed yet, at most (more are dropped: the touch tells).
_HEARD_MAX = 1024


class Notices:
    """One owner's cancel notices for the queues of ``tags``: calls
    ``on_cancel(run_id, token)`` for each that ``confirm(run_id, token)`` finds true in
    Redis (module docstring), while :meth:`run` keeps the subscriptions standing
    (subscribed again after a lost connection or a moved slot)."""

    def __init__(
        self,
        waker: Waker,
        owner: str,
        tags: Iterable[str],
        on_cancel: Callable[[str, int], None],
        confirm: Callable[[str, int], Awaitable[bool]],
    ) -> None:
        self._waker = waker
        self._on_cancel = on_cancel
        self._confirm = confirm
        self._heard_notices: asyncio.Queue[tuple[str, int]] = asyncio.Queue(_HEARD_MAX)
        channels = sorted({notice_channel(tag, owner) for tag in tags})
        self._listener = _NoticeListener(waker, channels, self._heard)

    def _heard(self, data: bytes) -> None:
        notice = parse_notice(data)
        if notice is None:
            log.warning("unreadable cancel notice %r", data)
            return
        try:
            self._heard_notices.put_nowait(notice)
        except asyncio.QueueFull:
            log.info("cancel notice for run %s dropped (too many to confirm)", notice[0])

    async def _confirming(self) -> None:
        """Act on each notice heard that Redis confirms (module docstring)."""
        while True:
            run_id, token = await self._heard_notices.get()
            try:
                confirmed = await self._confirm(run_id, token)
            except FloError as exc:
                log.info(
                    "cancel notice for run %s not confirmed (%s); the touch tells", run_id, exc
                )
                continue
            if confirmed:
                self._on_cancel(run_id, token)
            else:
                log.warning(
                    "cancel notice for run %s (token %d) not confirmed by Redis: the run is "
                    "not cancelled under that token; ignored",
                    run_id,
                    token,
                )

    async def hold(self) -> bool:
        """Subscribe now and wait until Redis confirms (at most 5 s); False, logged, if
        that failed (:meth:`run` keeps trying; until then touches tell of cancels)."""
        try:
            await self._listener.arm()
        except Exception as exc:
            if not (is_connection_error(exc) or isinstance(exc, FloError)):
                raise
            log.info("cancel notices not subscribed yet (%s); retrying", exc)
            return False
        return True

    async def run(self) -> None:
        """Listen until the task is cancelled: its worker does that once its last
        handler ended, so a run cancelled while the worker stops is still told."""
        await asyncio.gather(self._listening(), self._confirming())

    async def _listening(self) -> None:
        failures = 0
        async with self._waker.attached(self._listener):
            while True:
                if await self.hold():
                    failures = 0
                    await self._listener.wait(_RECHECK_S)
                else:
                    await asyncio.sleep(_RETRY_PAUSE_S[min(failures, len(_RETRY_PAUSE_S) - 1)])
                    failures += 1


__all__ = ["Notices", "cancel_notice", "parse_notice", "tell"]
