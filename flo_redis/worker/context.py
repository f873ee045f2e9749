"""What an action handler gets (:class:`ActionContext`) and may return
(:class:`ActionResult`); keeping the run's lease (``ctx.touch``) is
:mod:`flo_redis.worker.lease`."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from flo_redis._session.tracer import unpack_context
from flo_redis.actions.results import ResultSerializer, check_outcome, encode_result

log = logging.getLogger("flo_redis.worker")


class _Config(Protocol):
    worker_id: str


class RunHolder(Protocol):
    """What a context asks of the worker running it."""

    _serializer: ResultSerializer

    @property
    def config(self) -> _Config: ...

    async def _touch(self, ctx: ActionContext, extend_ms: int) -> None: ...

    async def _progress(self, ctx: ActionContext, value: Any) -> None: ...


class ActionResult:
    """A handler's result with a named outcome (``ctx.result("approved", value)``)."""

    __slots__ = ("data", "outcome")

    def __init__(self, outcome: str, data: bytes) -> None:
        self.outcome = outcome
        self.data = data

    def __repr__(self) -> str:
        return f"ActionResult(outcome={self.outcome!r}, data={self.data!r})"


@dataclass
class ActionContext:
    """What a handler gets: the run, its input, and ways to touch, check cancellation
    and name an outcome. ``token`` is this hand-out's fencing token (pass it to your own
    downstream writes to fence them); ``cancelled`` turns true when the run was cancelled
    (``client.action.cancel``) or its lease lost, or the worker gave the run back while
    shutting down."""

    task_id: str
    action_name: str
    payload: bytes
    attempt: int
    created_at: int
    namespace: str
    _worker: RunHolder = field(repr=False)
    _cancelled: bool = field(default=False, repr=False)  # see ``cancelled``
    token: int = 0
    _trace: bytes = field(default=b"", repr=False)  # the run's packed trace context

    @property
    def trace_context(self) -> dict[str, str]:
        """The trace headers (W3C ``traceparent``, ``tracestate``) of the invoke that
        created this run, for a propagator's ``extract``; {} when it carried none
        (:mod:`flo_redis.ops.tracing`)."""
        return unpack_context(self._trace)

    def input(self) -> bytes:
        return self.payload

    def json(self) -> Any:
        if not self.payload:
            raise ValueError("No input data")
        return json.loads(self.payload)

    def into(self, cls: type[Any]) -> Any:
        data = self.json()
        return cls(**data) if isinstance(data, dict) else cls(data)

    @staticmethod
    def to_bytes(value: Any) -> bytes:
        return json.dumps(value).encode()

    async def progress(self, value: Any) -> None:
        """Store ``value`` as the run's progress (bytes as they are, anything else by the
        worker's serializer; at most 1 KiB, else :class:`ValueTooLargeError`): shown in its
        status and heard by ``wait(..., on_progress=...)``. Fenced by the token:
        :class:`ConflictError` once this lease is no longer current."""
        await self._worker._progress(self, value)

    async def touch(self, extend_ms: int = 30000) -> None:
        """Extend this run's lease to ``extend_ms`` from now (fenced by the token)."""
        await self._worker._touch(self, extend_ms)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    async def check_cancelled(self) -> None:
        if self._cancelled:
            raise asyncio.CancelledError("run cancelled: its lease was lost")

    def result(self, outcome: str, value: Any = None) -> ActionResult:
        """A result with a named outcome (a str of at most 255 UTF-8 bytes, else
        :class:`ValidationError` here); ``value`` is encoded as a return value is (bytes
        as they are, anything else by the worker's serializer), None gives no data."""
        outcome = check_outcome(outcome)
        data = b"" if value is None else encode_result(value, self._worker._serializer)
        return ActionResult(outcome, data)


def cancel(ctx: ActionContext) -> None:
    """Turn ``ctx.cancelled`` true, for the worker holding its run (a plain flag: a sync
    handler reads it from its thread)."""
    ctx._cancelled = True


def new_context(
    run_id: str,
    action: str,
    payload: bytes,
    attempt: int,
    created_at: int,
    namespace: str,
    worker: RunHolder,
    token: int,
    trace: bytes,
) -> ActionContext:
    """The context of one hand-out of a run, as ``ActionContext(task_id=run_id, ...)``
    makes it: a worker makes one per run, and a call with the fields in their order takes
    half the time of one that names them."""
    return ActionContext(
        run_id, action, payload, attempt, created_at, namespace, worker, False, token, trace
    )


# An ``async def`` handler, or a plain function (run in the worker's thread pool).
ActionHandler = Callable[[ActionContext], Awaitable[Any]] | Callable[[ActionContext], Any]


__all__ = ["ActionContext", "ActionHandler", "ActionResult", "cancel", "new_context"]
