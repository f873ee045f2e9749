"""What each worker is doing now: the runs it holds, read from its queues.

A run handed to a worker names, in its queue's record, the process (owner id) and the
worker it went to, and each action keeps an index of the runs handed to each process.
:func:`held_runs` asks every action the given workers serve which runs each of them
holds now, in one read-only script call per action and 100 workers
(``lua/action_held.lua``, at most 1000 index entries read per call). Nothing is copied
by the workers for it: the answer is what the fencing checks of a report would say.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from flo_redis._session.session import Session
from flo_redis._wire.checks import check_count
from flo_redis._wire.codec import pack
from flo_redis._wire.gateway import ACTION_HELD
from flo_redis._wire.keys import action_keys, is_name
from flo_redis._wire.status import Status, refusal
from flo_redis._wire.worker_replies import Holding
from flo_redis.types import WorkerInfo

DEFAULT_LISTED = 10  # runs listed per worker unless asked otherwise
MAX_LISTED = 100  # runs one worker's answer lists at most
_HOLDERS_PER_CALL = 100  # workers one action_held call asks about


@dataclass(frozen=True, slots=True)
class HeldRun:
    """A run a worker holds: in which action, its fencing token and attempt, when it
    started and when its lease ends (ms since the epoch; ``deadline_ms`` None: it never
    expires), and whether it is only ``offered`` (handed to the worker, which has not
    accepted it yet)."""

    action: str
    run_id: str
    token: int
    attempt: int
    started_at_ms: int
    deadline_ms: int | None
    offered: bool


@dataclass(frozen=True, slots=True)
class WorkerRuns:
    """What one worker holds: ``held`` runs in all (exactly, when ``complete``; at
    least, when a queue had more to read than one call reads), the first ``runs`` of
    them, oldest start first."""

    worker_id: str
    held: int
    complete: bool
    runs: tuple[HeldRun, ...]

    @property
    def more(self) -> int:
        """How many held runs are not listed."""
        return self.held - len(self.runs)


_NEVER_MS = 2**52  # a lease of an action without timeout (lua/lib/run.lua NEVER_MS)


async def held_runs(
    session: Session,
    workers: Sequence[WorkerInfo],
    *,
    limit: int = DEFAULT_LISTED,
    namespace: str | None = None,
) -> dict[str, WorkerRuns]:
    """The runs each of ``workers`` holds now (``limit`` listed per worker, 0 to
    :data:`MAX_LISTED`), by worker id. Only workers whose process is not gone and that
    name their owner (``WorkerInfo.owner_id``: registered by flo-redis 0.1 or later) are
    asked about; the others are not in the answer. Read only."""
    check_count("limit", limit, 0, MAX_LISTED)
    ns = session.get_namespace(namespace)
    asked = [w for w in workers if w.alive is not False and w.owner_id and is_name(w.owner_id)]
    by_action: dict[str, list[WorkerInfo]] = {}
    for worker in asked:
        for action in filter(is_name, worker.task_types):
            by_action.setdefault(action, []).append(worker)
    calls = [
        (action, serving[i : i + _HOLDERS_PER_CALL])
        for action, serving in sorted(by_action.items())
        for i in range(0, len(serving), _HOLDERS_PER_CALL)
    ]
    answers = await asyncio.gather(
        *(_held(session, ns, action, group, limit) for action, group in calls)
    )
    found: dict[str, list[tuple[str, Holding]]] = {w.worker_id: [] for w in asked}
    for (action, group), holdings in zip(calls, answers, strict=True):
        for worker, holding in zip(group, holdings, strict=True):
            found[worker.worker_id].append((action, holding))
    return {worker_id: _merged(worker_id, parts, limit) for worker_id, parts in found.items()}


async def _held(
    session: Session, ns: str, action: str, group: Sequence[WorkerInfo], limit: int
) -> tuple[Holding, ...]:
    holders = [name for w in group for name in (w.owner_id or "", w.worker_id)]
    reply = await ACTION_HELD(session, action_keys(ns, action), [pack(holders), str(limit)])
    if reply.status != Status.OK:
        raise refusal(reply.status, f"runs held in action {action!r}")
    return reply.holdings


def _merged(worker_id: str, parts: Sequence[tuple[str, Holding]], limit: int) -> WorkerRuns:
    runs = sorted(
        (
            HeldRun(
                action,
                row.run_id,
                row.token,
                row.attempt,
                row.started_at_ms,
                None if row.deadline_ms < 0 or row.deadline_ms >= _NEVER_MS else row.deadline_ms,
                row.offered,
            )
            for action, holding in parts
            for row in holding.runs
        ),
        key=lambda run: (run.started_at_ms, run.run_id),
    )
    return WorkerRuns(
        worker_id,
        sum(holding.held for _, holding in parts),
        all(holding.complete for _, holding in parts),
        tuple(runs[:limit]),
    )


__all__ = ["DEFAULT_LISTED", "MAX_LISTED", "HeldRun", "WorkerRuns", "held_runs"]
