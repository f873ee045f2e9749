"""A run while its worker holds it: the worker's record of the hand-out
(:class:`HeldRun`) and, in one place, its lease: the touch (``ctx.touch``, and the
worker's ``auto_touch``) and the lease's end as the worker knows it (loop time by which
the lease has surely ended, for the resends of its reports)."""

from __future__ import annotations

import asyncio
import logging

from flo_redis._session.session import Session
from flo_redis.actions import reports
from flo_redis.actions.reports import MAX_TOUCH_EXTEND_MS
from flo_redis.errors import ServerError, is_connection_error
from flo_redis.types import Reason, StatusCode
from flo_redis.worker.context import ActionContext, cancel
from flo_redis.worker.handlers import Running

log = logging.getLogger("flo_redis.worker")

MIN_TOUCH_INTERVAL_MS = 100
TOUCH_FINAL = (StatusCode.CONFLICT, StatusCode.NOT_FOUND, StatusCode.BAD_REQUEST)


class HeldRun:
    """One hand-out of a run, as the worker holding it keeps it: the handler's context,
    the loop time by which the lease has surely ended (None: never), the handler while
    it runs, and whether the hand-out was revoked (cancelled, or its offer ran out: it
    reports nothing). Once its handler returned it carries its complete, as
    :class:`flo_redis.actions.reports.OwnComplete` reads one (``task_id``, ``token``,
    ``result``, ``outcome``): one record per run, nothing more made per complete."""

    __slots__ = ("ctx", "lease_end", "outcome", "result", "revoked", "running", "task_id", "token")
    result: bytes
    outcome: str

    def __init__(self, ctx: ActionContext, claimed_at: float, lease_s: float | None) -> None:
        """``claimed_at``: the loop time the claim was answered (it ran before), so the
        lease surely ends by then plus the action's lease ``lease_s`` (None: never)."""
        self.ctx = ctx
        self.task_id = ctx.task_id
        self.token: int | None = ctx.token
        self.lease_end = None if lease_s is None else claimed_at + lease_s
        self.running: Running | None = None
        self.revoked = False
        # result and outcome: set by the run reporter as the run completes.

    def cancel(self) -> None:
        """Turn its context's ``cancelled`` true (its handler is being stopped)."""
        cancel(self.ctx)

    def revoke(self) -> None:
        """The run is no longer this hand-out's: its handler is cancelled as for a lost
        lease (a sync handler sees ``ctx.cancelled``) and it reports nothing."""
        self.revoked = True
        cancel(self.ctx)
        if self.running is not None:
            self.running.stop()


class LeaseLost(Exception):
    """The run's lease is gone (taken back or finished elsewhere); report nothing."""


async def touch(
    session: Session, worker_id: str, ctx: ActionContext, extend_ms: int, held: HeldRun | None
) -> None:
    """Extend ``ctx``'s lease (``held``: the worker's record of it, while the worker
    holds it); a refusal that no later touch can undo sets the context cancelled and
    raises :class:`LeaseLost`."""
    try:
        await reports.touch(
            session, worker_id, ctx.action_name, ctx.task_id, ctx.token, extend_ms, ctx.namespace
        )
    except ServerError as exc:
        if exc.status_code in TOUCH_FINAL and exc.reason != Reason.OUT_OF_RANGE:
            cancel(ctx)
            log.warning("lease of %s lost (%s); cancelling its handler", ctx.task_id, exc)
            raise LeaseLost(str(exc)) from exc
        raise
    finally:
        # Answered or not, a touch that may have run moved the lease's end to at
        # most now + extend_ms (the script ran before this moment).
        if held is not None and held.lease_end is not None and 0 < extend_ms <= MAX_TOUCH_EXTEND_MS:
            end = asyncio.get_running_loop().time() + extend_ms / 1000.0
            held.lease_end = max(held.lease_end, end)


def start_auto_touch(
    session: Session, worker_id: str, held: HeldRun, running: Running, timeout_ms: int
) -> asyncio.Task[None] | None:
    """A task keeping alive a lease of ``timeout_ms`` (touching at a third of it) while
    its handler runs; None when the run's lease never ends."""
    if timeout_ms <= 0:
        return None
    extend_ms = min(timeout_ms, MAX_TOUCH_EXTEND_MS)
    interval_s = max(extend_ms / 3, MIN_TOUCH_INTERVAL_MS) / 1000.0
    return asyncio.create_task(
        _keep_touching(session, worker_id, held, running, extend_ms, interval_s),
        name=f"flo-touch-{held.task_id}",
    )


async def _keep_touching(
    session: Session,
    worker_id: str,
    held: HeldRun,
    running: Running,
    extend_ms: int,
    interval_s: float,
) -> None:
    """Touch ``ctx``'s run every ``interval_s`` until cancelled; once its lease is lost,
    stop its handler."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await touch(session, worker_id, held.ctx, extend_ms, held)
        except LeaseLost:
            running.stop()
            return
        except ServerError as exc:
            log.warning("touch of %s refused (%s); trying again later", held.task_id, exc)
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            log.info("touch of %s failed (%s); trying again later", held.task_id, exc)


__all__ = ["HeldRun", "LeaseLost", "start_auto_touch", "touch"]
