"""Run progress: a handler's small progress value, stored on its run by ``run_progress``.

``await ctx.progress(value)`` (:class:`flo_redis.worker.context.ActionContext`) sends it; the run's
status shows it (``progress``, ``progress_at_ms``) and ``client.action.wait(...,
on_progress=...)`` hears it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flo_redis._wire.checks import token_arg
from flo_redis._wire.gateway import RUN_PROGRESS
from flo_redis._wire.keys import action_keys
from flo_redis._wire.refusals import raise_run_refusal
from flo_redis._wire.status import Status, refusal
from flo_redis.actions.results import ResultSerializer, serialized
from flo_redis.errors import ValidationError, ValueTooLargeError
from flo_redis.types import RunStatus

if TYPE_CHECKING:
    from flo_redis._session.session import Session

MAX_PROGRESS_BYTES = 1024
"""The largest progress value a run keeps (``lua/run_progress.lua`` holds the same)."""


def _unencodable(value: Any, serializer: ResultSerializer, exc: Exception) -> Exception:
    return ValidationError(
        f"progress value of type {type(value).__qualname__} cannot be encoded by the "
        f"{serializer.name} serializer ({exc}); pass bytes or an encodable value"
    )


def encode_progress(value: Any, serializer: ResultSerializer) -> bytes:
    """``value`` as stored: bytes as they are, anything else by ``serializer``; refused
    (:class:`ValidationError`) if it cannot be encoded or is over the limit."""
    data = serialized(value, serializer, _unencodable)
    if len(data) > MAX_PROGRESS_BYTES:
        raise ValueTooLargeError(
            f"progress value is {len(data)} bytes encoded; a run keeps at most "
            f"{MAX_PROGRESS_BYTES} (report a percentage or a short summary, not data)"
        )
    return data


async def report_progress(
    session: Session, worker_id: str, action: str, run_id: str, token: int, data: bytes
) -> None:
    """Store ``data`` as the run's progress, for its current holder only:
    :class:`ConflictError` (``STALE_REPORT``) once the holder's lease is no longer
    current (taken back, cancelled or finished)."""
    keys = action_keys(session.namespace, action)
    reply = await RUN_PROGRESS(session, keys, [run_id, token_arg(token), worker_id, data])
    if reply.status == Status.STALE:
        raise refusal(
            reply.status,
            f"progress of run {run_id!r} by worker {worker_id!r} refused: the run is "
            f"{RunStatus(reply.run_status).name} and this lease is no longer current",
        )
    if reply.status == Status.TOO_LARGE:
        raise ValueTooLargeError(f"progress value is over {reply.limit} bytes")
    raise_run_refusal(reply.status, keys, run_id)


__all__ = ["MAX_PROGRESS_BYTES", "encode_progress", "report_progress"]
