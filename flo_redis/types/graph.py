"""Runs that depend on runs: the dependency a child names, and what a run reads of the
graph around it (``docs/flows.md``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from flo_redis.types.base import RunStatus

OnFailure = Literal["fail", "ignore", "run"]
"""What a parent's failure (FAILED, TIMED_OUT, CANCELLED, or no such run) does to its
child: ``"fail"`` ends the child too (CANCELLED when the parent was cancelled, else
FAILED; it gets its attempts back if the parent is retried and completes); ``"ignore"``
lets the child run without it (the parent is left out of ``ctx.parents()``);
``"run"`` lets the child run and shows it the failed parent."""

ON_FAILURE: tuple[OnFailure, ...] = ("fail", "ignore", "run")
MAX_PARENTS = 10_000
"""The most parents one run may wait for."""


@dataclass
class Dependency:
    """One parent a new run waits for (``ActionInvokeOptions.depends_on``): its run id,
    and what its failure does to the child (:data:`OnFailure`, default ``"fail"``)."""

    run_id: str
    on_failure: OnFailure = "fail"

    def __post_init__(self) -> None:
        if self.on_failure not in ON_FAILURE:
            raise ValueError(
                f"Dependency.on_failure must be one of {', '.join(ON_FAILURE)}, "
                f"got {self.on_failure!r}"
            )


@dataclass
class ParentState:
    """One parent of a run, as the run knows it: ``status`` is None while the parent has
    not ended (or its end is on its way), else the status it ended with; ``found`` is
    False for a parent id no run had when the child registered on it."""

    run_id: str
    on_failure: OnFailure
    status: RunStatus | None
    found: bool = True


@dataclass
class ParentResult:
    """A parent's result, for its child's handler (``ctx.parents()``): its status and,
    for a completed parent, its output and outcome; for a failed one its error."""

    run_id: str
    status: RunStatus
    output: bytes | None = None
    outcome: str | None = None
    error_message: str | None = None


@dataclass
class GraphPage:
    """One page of a run's graph: ``items`` (parents: :class:`ParentState`, or
    :class:`ParentResult` from ``ctx.parents()``; dependents: run ids) and ``after``,
    the cursor of the next page (None: this was the last)."""

    items: list[Any]
    after: str | None = None


@dataclass
class WaitFor:
    """What a handler returns to end its attempt waiting for more runs (a continuation:
    ``return ctx.wait_for(run_ids)``): its run gives up its worker slot, waits PENDING
    until every run named has ended, then runs again, its handler called anew, the runs
    it waited for among its ``ctx.parents()``. The attempt is not spent."""

    depends_on: list[str | Dependency]


@dataclass
class Callback:
    """A batch's callback: a run of ``action`` with ``input``, made once when its moment
    comes (:class:`BatchOptions`)."""

    action: str
    input: bytes = b""


@dataclass
class BatchOptions:
    """A new batch (``client.action.open_batch``): runs invoked with ``batch=`` its id are
    its members, and so are batches opened with it as ``parent``. Its callbacks are runs,
    each made exactly once: ``on_complete`` when every member has ended (after
    ``seal_batch``), ``on_success`` when every member completed (then, or later, once a
    failed one was retried to completion), ``on_death`` when a member first fails with no
    attempts left. ``retention_ms``: how long the batch is kept once all its members
    ended (default 7 days)."""

    on_complete: Callback | None = None
    on_success: Callback | None = None
    on_death: Callback | None = None
    parent: str | None = None
    retention_ms: int = 7 * 24 * 3600 * 1000
    namespace: str | None = None


@dataclass
class BatchStatus:
    """A batch's counts: its members (runs and nested batches), those completed, those
    that ended otherwise (FAILED, TIMED_OUT, CANCELLED; a nested batch with a failed
    member), those still to end; whether it is sealed, and how it ended (None while a
    member has not, or it is not sealed): COMPLETED when every member completed, else
    FAILED. ``callbacks``: the callbacks made so far (complete, success, death)."""

    batch_id: str
    total: int
    completed: int
    failed: int
    pending: int
    sealed: bool
    status: RunStatus | None
    parent: str | None
    callbacks: list[str]


__all__ = [
    "MAX_PARENTS",
    "BatchOptions",
    "BatchStatus",
    "Callback",
    "Dependency",
    "GraphPage",
    "OnFailure",
    "ParentResult",
    "ParentState",
    "WaitFor",
]
