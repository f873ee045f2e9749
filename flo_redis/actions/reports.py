"""Reporting runs: ``client.worker``'s accept, touch, complete, fail and release, and the
worker's counters they move.

Every report is one Lua script (``lua/run_*.lua``), fenced by the run's token: a report
from a holder whose lease was taken back is refused and changes nothing, and an
identical resend of a report that took effect is answered as success.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from flo_redis._session.session import Operations
from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside
from flo_redis._wire.checks import (
    check_bytes,
    check_count,
    check_list,
    check_options,
    check_text,
    token_arg,
)
from flo_redis._wire.codec import pack
from flo_redis._wire.gateway import (
    RUN_ACCEPT,
    RUN_COMPLETE,
    RUN_COMPLETE_MANY,
    RUN_FAIL,
    RUN_RELEASE,
    RUN_TOUCH,
    WORKER_TALLY,
)
from flo_redis._wire.keys import (
    MAX_NAME_SIZE,
    ActionKeys,
    action_of_run,
    check_name,
    namespace_keys,
)
from flo_redis._wire.refusals import not_registered, raise_run_refusal
from flo_redis._wire.replies import Reported
from flo_redis._wire.status import Status, refusal
from flo_redis.errors import ServerError, ValidationError, ValueTooLargeError, server_error
from flo_redis.types import (
    Ran,
    Reason,
    RunStatus,
    StatusCode,
    WorkerCompleteOptions,
    WorkerFailOptions,
    WorkerTouchOptions,
)

MAX_TOUCH_EXTEND_MS = 3_600_000
COMPLETE_BATCH = 1000  # runs per run_complete_many call
ACCEPT_BATCH = 1000  # runs per run_accept call
# Counter changes a tally may carry (each way): far beyond any real batch.
MAX_TALLY = 2**32 - 1


def _out_of_range(message: str) -> ServerError:
    return server_error(StatusCode.BAD_REQUEST, Reason.OUT_OF_RANGE, message, Ran.UNKNOWN)


@dataclass(frozen=True, slots=True)
class CompleteItem:
    """One complete in a :meth:`WorkerOperations.complete_many` batch."""

    task_id: str
    result: bytes
    outcome: str = "success"
    token: int | None = None


class OwnComplete(Protocol):
    """A worker's own complete of a run it claimed: what a :class:`CompleteItem` says,
    read from the worker's own record of the run (no item is made per run)."""

    @property
    def task_id(self) -> str: ...

    @property
    def result(self) -> bytes: ...

    @property
    def outcome(self) -> str: ...

    @property
    def token(self) -> int | None: ...


class RunReports(Operations):
    """The reporting half of ``client.worker``."""

    async def accept(
        self,
        worker_id: str,
        action_name: str,
        handed: Sequence[tuple[str, int]],
        namespace: str | None = None,
    ) -> builtins.list[ServerError | None]:
        """Accept runs offered to the caller's poller by a hand-off (a claim that parked
        with ``offer_ms``; ``lua/README.md``, "Hand-off"), each ``(run id, token)`` as
        its message named it, one call per 1000, each answered on its own: ``None``
        where the run is the caller's (accepted now, or already by a report, a touch
        or a claim), else the refusal -- :class:`ConflictError` (``STALE_REPORT``) when
        the offer was not accepted in time and the run went back to its queue or on to
        another holder: stop its handler and report nothing. ``worker_id`` only names
        the caller in a refusal's message (the token decides)."""
        check_name("worker id", worker_id)
        keys = self._action_keys(action_name, namespace)
        packed: builtins.list[str | int] = []
        for index, item in enumerate(check_list("handed", handed)):
            if not (
                isinstance(item, tuple)
                and len(item) == 2
                and isinstance(item[0], str)
                and type(item[1]) is int
            ):
                raise ValidationError(f"handed[{index}] must be a (run id, token) pair")
            self._run_keys(action_name, item[0], namespace)
            packed += item
        return await self._accept(worker_id, keys, packed)

    async def _accept(
        self, worker_id: str, keys: ActionKeys, packed: Sequence[str | int]
    ) -> builtins.list[ServerError | None]:
        """:meth:`accept` of ``packed``, run id and token of each run in turn (a worker's
        own, as its hand-off messages named them: nothing to check)."""
        replies: builtins.list[ServerError | None] = []
        for start in range(0, len(packed), 2 * ACCEPT_BATCH):
            chunk = packed[start : start + 2 * ACCEPT_BATCH]
            reply = await RUN_ACCEPT(self._session, keys, [pack(chunk)])
            if reply.status != Status.OK:
                raise _out_of_range(f"accept: at most {ACCEPT_BATCH} runs per call")
            if reply.statuses.count(Status.OK) == len(chunk) // 2:  # the common case
                replies += [None] * (len(chunk) // 2)
                continue
            for at, status, detail in zip(
                range(0, len(chunk), 2), reply.statuses, reply.details, strict=True
            ):
                try:
                    report = Reported(status, False, detail, -1)
                    self._check_report(report, keys, str(chunk[at]), worker_id, "accept")
                except ServerError as exc:
                    replies.append(exc)
                else:
                    replies.append(None)
        return replies

    async def touch(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        options: WorkerTouchOptions | None = None,
    ) -> None:
        """Extend the run's lease to ``extend_ms`` from now (at most one hour). Refused
        with :class:`ConflictError` (``STALE_REPORT``) if the caller no longer holds it."""
        opts = check_options(options, WorkerTouchOptions)
        check_name("worker id", worker_id)
        check_count(
            "extend_ms",
            opts.extend_ms,
            1,
            MAX_TOUCH_EXTEND_MS,
            fix="one hour at most; touch again later to hold a run longer",
            error=_out_of_range,
        )
        keys = self._run_keys(action_name, task_id, opts.namespace)
        reply = await RUN_TOUCH(
            self._session, keys, [task_id, token_arg(opts.token), worker_id, opts.extend_ms]
        )
        self._check_report(reply, keys, task_id, worker_id, "touch")

    async def complete(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        result: bytes,
        options: WorkerCompleteOptions | None = None,
    ) -> None:
        """Complete the run with ``result``, for its current holder only. Resending an
        identical complete that already succeeded answers success and changes nothing;
        a complete from a holder whose lease was taken back is refused
        (:class:`ConflictError`, ``STALE_REPORT``) and changes nothing."""
        opts = check_options(options, WorkerCompleteOptions)
        check_name("worker id", worker_id)
        check_text("outcome", opts.outcome, limit=MAX_NAME_SIZE)
        data = check_bytes("result", result, self._session.max_payload_bytes)
        keys = self._run_keys(action_name, task_id, opts.namespace)
        reply = await RUN_COMPLETE(
            self._session, keys, [task_id, token_arg(opts.token), worker_id, data, opts.outcome]
        )
        if reply.status == Status.TOO_LARGE:
            raise ValueTooLargeError(
                f"result is {len(data)} bytes; action {action_name!r} accepts at most {reply.limit}"
            )
        self._check_report(reply, keys, task_id, worker_id, "complete")
        if not reply.duplicate:
            await self._tally(worker_id, keys.namespace, -1, 1, 0)

    async def complete_many(
        self,
        worker_id: str,
        action_name: str,
        items: Sequence[CompleteItem],
        namespace: str | None = None,
        *,
        tally: bool = True,
    ) -> builtins.list[ServerError | None]:
        """Complete several runs of one action in one call per 1000, each under exactly
        :meth:`complete`'s rules and answered on its own: ``None`` where the complete took
        effect (or was an identical resend), else the refusal it would have raised."""
        check_name("worker id", worker_id)
        return await self._complete_many(
            worker_id, action_name, check_list("items", items), namespace, tally=tally
        )

    async def _complete_many(
        self,
        worker_id: str,
        action_name: str,
        items: Sequence[CompleteItem] | Sequence[OwnComplete],
        namespace: str | None = None,
        *,
        tally: bool = True,
        claimed: bool = False,
    ) -> builtins.list[ServerError | None]:
        """:meth:`complete_many`; ``claimed``: the items are a worker's own, their run
        ids and tokens as its claims gave them, so only results and outcomes that are
        not a plain default need checking."""
        keys = self._action_keys(action_name, namespace)
        limit = self._session.max_payload_bytes
        # Flat: run id, token, result, outcome of each item in turn (one array to decode
        # in the script, not one per item).
        packed: builtins.list[str | int | bytes] = []
        # A result over the client's limit is answered on its own, never sent; its
        # neighbours go ahead.
        early: dict[int, ServerError] = {}
        for index, item in enumerate(items):
            if claimed:  # a worker's own plain complete: nothing to check
                result, token = item.result, item.token
                if (
                    item.outcome == "success"
                    and type(result) is bytes
                    and len(result) <= limit
                    and type(token) is int
                ):
                    # The token as the int it is: the scripts read a token with tonumber.
                    packed += (item.task_id, token, result, "success")
                    continue
                item = CompleteItem(item.task_id, result, item.outcome, item.token)
            if not isinstance(item, CompleteItem):
                raise ValidationError(f"items[{index}] must be a CompleteItem")
            self._run_keys(action_name, item.task_id, namespace)
            check_text(f"items[{index}].outcome", item.outcome, limit=MAX_NAME_SIZE)
            try:
                data = check_bytes("result", item.result, limit)
            except ValueTooLargeError as exc:
                early[index] = refusal(Status.TOO_LARGE, f"result of {item.task_id!r}: {exc}")
                continue
            packed += (item.task_id, token_arg(item.token), data, item.outcome)
        replies: builtins.list[ServerError | None] = []
        applied = 0
        for start in range(0, len(packed), 4 * COMPLETE_BATCH):
            chunk = packed[start : start + 4 * COMPLETE_BATCH]
            n = len(chunk) // 4
            reply = await RUN_COMPLETE_MANY(self._session, keys, [worker_id, pack(chunk)])
            if reply.status == Status.NO_ACTION:
                raise not_registered(keys)
            statuses = reply.statuses
            if statuses.count(Status.OK) == n:  # the common case: all accepted
                applied += n - reply.duplicates.count(1)
                replies += [None] * n
                continue
            for at, status, duplicate, detail in zip(
                range(0, len(chunk), 4), statuses, reply.duplicates, reply.details, strict=True
            ):
                if status == Status.OK:
                    applied += 0 if duplicate else 1
                    replies.append(None)
                    continue
                run_id = str(chunk[at])
                if status == Status.TOO_LARGE:
                    sent = chunk[at + 2]
                    size = len(sent) if isinstance(sent, bytes) else 0
                    replies.append(
                        refusal(
                            status,
                            f"result of {run_id!r} is {size} bytes; action "
                            f"{action_name!r} accepts at most {detail} (raise the "
                            "action's max_payload_bytes or store large results elsewhere and "
                            "return a reference)",
                        )
                    )
                else:
                    try:
                        self._check_report(
                            Reported(status, False, detail, -1),
                            keys,
                            run_id,
                            worker_id,
                            "complete",
                        )
                    except ServerError as exc:
                        replies.append(exc)
        if tally and applied:
            await self._tally(worker_id, keys.namespace, -applied, applied, 0)
        if not early:
            return replies
        answers = iter(replies)
        return [early[i] if i in early else next(answers) for i in range(len(items))]

    async def fail(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        error_message: str,
        options: WorkerFailOptions | None = None,
    ) -> RunStatus:
        """Fail the run. With ``retry`` and attempts left it runs again (after the
        action's backoff); otherwise it ends FAILED, kept with its error. Same holder
        and resend rules as :meth:`complete`. Returns the run's status after: PENDING
        when it waits for another attempt, FAILED when it ended."""
        opts = check_options(options, WorkerFailOptions)
        check_name("worker id", worker_id)
        check_text("error_message", error_message, limit=self._session.max_payload_bytes)
        check_text(
            "traceback", opts.traceback, optional=True, limit=self._session.max_payload_bytes
        )
        keys = self._run_keys(action_name, task_id, opts.namespace)
        reply = await RUN_FAIL(
            self._session,
            keys,
            [
                task_id,
                token_arg(opts.token),
                worker_id,
                error_message,
                1 if opts.retry else 0,
                opts.traceback or "",
            ],
        )
        self._check_report(reply, keys, task_id, worker_id, "fail")
        if not reply.duplicate:
            await self._tally(worker_id, keys.namespace, -1, 0, 1)
        return RunStatus(reply.run_status)

    async def release(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        token: int | None,
        namespace: str | None = None,
    ) -> None:
        """Give a held run back to its queue as it was, not counted as an attempt (a
        worker that stops before running it). Refused with :class:`ConflictError`
        (``STALE_REPORT``) if the caller no longer holds it; changes nothing then."""
        check_name("worker id", worker_id)
        fence = token_arg(token)
        keys = self._run_keys(action_name, task_id, namespace)
        reply = await RUN_RELEASE(self._session, keys, [task_id, fence, worker_id])
        self._check_report(reply, keys, task_id, worker_id, "release")

    def _run_keys(self, action_name: str, task_id: str, namespace: str | None) -> ActionKeys:
        keys = self._action_keys(action_name, namespace)
        if action_of_run(task_id) != action_name:
            raise refusal(
                Status.NOT_FOUND,
                f"run {task_id!r} not found in action {action_name!r}: it belongs to "
                "another action",
            )
        return keys

    def _check_report(
        self,
        reply: Reported,
        keys: ActionKeys,
        run_id: str,
        worker_id: str,
        what: str,
    ) -> None:
        status = reply.status
        if status == Status.STALE:
            state = RunStatus(reply.run_status).name
            raise refusal(
                status,
                f"{what} of run {run_id!r} by worker {worker_id!r} refused: the run is "
                f"{state} and this worker's lease is no longer current (taken back, or "
                "finished); drop the report",
            )
        raise_run_refusal(status, keys, run_id)

    async def tally(
        self,
        worker_id: str,
        load: int = 0,
        completed: int = 0,
        failed: int = 0,
        namespace: str | None = None,
    ) -> None:
        """Add to a worker's counters (load never below zero); for workers that batch
        their counter updates (``tally=False`` on :meth:`await_tasks`/:meth:`complete_many`)."""
        check_name("worker id", worker_id)
        for what, value in (("load", load), ("completed", completed), ("failed", failed)):
            check_count(what, value, -MAX_TALLY, MAX_TALLY)
        await self._tally(
            worker_id, self._session.get_namespace(namespace), load, completed, failed
        )

    async def _tally(
        self, worker_id: str, namespace: str, load: int, completed: int, failed: int
    ) -> None:
        ns = namespace_keys(namespace)
        reply = await WORKER_TALLY(self._session, ns, [worker_id, load, completed, failed])
        if reply.status == Status.BAD_RECORD:
            reason = "its stored record does not decode"
            warn_set_aside(scope_of(ns), [SetAside("worker", worker_id, reason)])
