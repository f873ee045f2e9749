"""A run's lease while its worker holds it, in one place: the touch (``ctx.touch``, and
the worker's ``auto_touch``) and the lease's end as the worker knows it (loop time by
which the lease has surely ended, for the resends of its reports)."""

from __future__ import annotations

import asyncio
import logging

from flo_redis._session.session import Session
from flo_redis.actions import reports
from flo_redis.actions.reports import MAX_TOUCH_EXTEND_MS
from flo_redis.errors import ServerError, is_connection_error
from flo_redis.types import Reason, StatusCode
from flo_redis.worker.context import ActionContext
from flo_redis.worker.handlers import Running

log = logging.getLogger("flo_redis.worker")

MIN_TOUCH_INTERVAL_MS = 100
TOUCH_FINAL = (StatusCode.CONFLICT, StatusCode.NOT_FOUND, StatusCode.BAD_REQUEST)


def first_end(claimed_at: float, lease_s: float | None) -> float | None:
    """The loop time by which a run's lease surely ends, from the loop time of its
    claim (the claim ran before its reply arrived) and the action's lease (None: the
    lease never ends)."""
    return None if lease_s is None else claimed_at + lease_s


def end_of(ctx: ActionContext) -> float | None:
    """The loop time by which ``ctx``'s lease has surely ended (None: never)."""
    return ctx._lease_end


class LeaseLost(Exception):
    """The run's lease is gone (taken back or finished elsewhere); report nothing."""


async def touch(session: Session, worker_id: str, ctx: ActionContext, extend_ms: int) -> None:
    """Extend ``ctx``'s lease; a refusal that no later touch can undo sets the context
    cancelled and raises :class:`LeaseLost`."""
    try:
        await reports.touch(
            session, worker_id, ctx.action_name, ctx.task_id, ctx.token, extend_ms, ctx.namespace
        )
    except ServerError as exc:
        if exc.status_code in TOUCH_FINAL and exc.reason != Reason.OUT_OF_RANGE:
            ctx._cancel()
            log.warning("lease of %s lost (%s); cancelling its handler", ctx.task_id, exc)
            raise LeaseLost(str(exc)) from exc
        raise
    finally:
        # Answered or not, a touch that may have run moved the lease's end to at
        # most now + extend_ms (the script ran before this moment).
        if ctx._lease_end is not None and 0 < extend_ms <= MAX_TOUCH_EXTEND_MS:
            end = asyncio.get_running_loop().time() + extend_ms / 1000.0
            ctx._lease_end = max(ctx._lease_end, end)


def start_auto_touch(
    session: Session,
    worker_id: str,
    ctx: ActionContext,
    running: Running,
    timeout_ms: int,
) -> asyncio.Task[None] | None:
    """A task keeping alive a lease of ``timeout_ms`` (touching at a third of it) while
    its handler runs; None when the run's lease never ends."""
    if timeout_ms <= 0:
        return None
    extend_ms = min(timeout_ms, MAX_TOUCH_EXTEND_MS)
    interval_s = max(extend_ms / 3, MIN_TOUCH_INTERVAL_MS) / 1000.0
    return asyncio.create_task(
        _keep_touching(session, worker_id, ctx, running, extend_ms, interval_s),
        name=f"flo-touch-{ctx.task_id}",
    )


async def _keep_touching(
    session: Session,
    worker_id: str,
    ctx: ActionContext,
    running: Running,
    extend_ms: int,
    interval_s: float,
) -> None:
    """Touch ``ctx``'s run every ``interval_s`` until cancelled; once its lease is lost,
    stop its handler."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await touch(session, worker_id, ctx, extend_ms)
        except LeaseLost:
            running.stop()
            return
        except ServerError as exc:
            log.warning("touch of %s refused (%s); trying again later", ctx.task_id, exc)
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            log.info("touch of %s failed (%s); trying again later", ctx.task_id, exc)


__all__ = ["LeaseLost", "end_of", "first_end", "start_auto_touch", "touch"]
