"""The graph around one run as an operator reads it (``flo-redis runs show``, the
dashboard's run page): the first page of its parents, each with its policy and how it
ended as the run was told, and the first page of the runs that depend on it, with how
many there are.

A run's status says how many parents it has and how many it still waits for, and
whether runs depend on it; the pages are read (``client.action.dependencies`` and
``dependents``) only where the status says there is something to read. Dependents are
counted by paging on past the first page, up to :data:`COUNTED`: a run many thousands
wait for costs a bounded number of calls, and its count is then a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flo_redis.types import ActionRunStatus, ParentState

if TYPE_CHECKING:
    from flo_redis.client import FloClient

SHOWN = 20  # parents and dependents listed
COUNTED = 10_000  # dependents counted at most
_COUNT_PAGE = 1000  # dependents per call while counting


def parent_state(parent: ParentState) -> str:
    """ "waiting" while the parent has not ended (as the run was told), "not found" for
    a parent id no run had, else the status it ended with ("COMPLETED", "FAILED", ...)."""
    if not parent.found:
        return "not found"
    return "waiting" if parent.status is None else parent.status.name


@dataclass(frozen=True, slots=True)
class ParentRow:
    """One parent as shown: its id, its policy (``"fail"``, ``"ignore"``, ``"run"``) and
    :func:`parent_state`."""

    run_id: str
    on_failure: str
    state: str


@dataclass(frozen=True, slots=True)
class RunGraph:
    """The graph around a run: ``parents`` it was invoked to wait for, ``waiting_on``
    those not ended yet, the first page of them (``parent_rows``, ``parents_after`` the
    cursor of the next page, None: none); ``dependents`` the first page of the runs that
    wait for it, ``dependents_after`` likewise, ``dependents_count`` how many there are
    (``counted_all`` False: at least that many, the count stopped at :data:`COUNTED`)."""

    parents: int = 0
    waiting_on: int = 0
    parent_rows: tuple[ParentRow, ...] = ()
    parents_after: str | None = None
    dependents: tuple[str, ...] = ()
    dependents_after: str | None = None
    dependents_count: int = 0
    counted_all: bool = True

    @property
    def empty(self) -> bool:
        """Neither parents nor dependents."""
        return not self.parents and not self.parent_rows and not self.dependents

    def parents_note(self) -> str:
        """ "3 (1 waiting)", and "; the first 20" when not all of them follow."""
        note = str(self.parents)
        if self.waiting_on:
            note += f" ({self.waiting_on} waiting)"
        if len(self.parent_rows) < self.parents:
            note += f"; the first {len(self.parent_rows)}"
        return note

    def dependents_note(self) -> str:
        """ "2", "57; the first 20", or "10000+; the first 20" past :data:`COUNTED`."""
        note = f"{self.dependents_count}{'' if self.counted_all else '+'}"
        if self.dependents_count > len(self.dependents) or not self.counted_all:
            note += f"; the first {len(self.dependents)}"
        return note

    def as_json(self) -> dict[str, Any]:
        return {
            "parents": [
                {"run_id": p.run_id, "on_failure": p.on_failure, "state": p.state}
                for p in self.parent_rows
            ],
            "parents_after": self.parents_after,
            "dependents": list(self.dependents),
            "dependents_after": self.dependents_after,
            "dependents_count": self.dependents_count,
            "dependents_counted_all": self.counted_all,
        }


async def run_graph(client: FloClient, run: ActionRunStatus, shown: int = SHOWN) -> RunGraph:
    """The graph around ``run`` (its status, as just read): a page of ``shown`` of its
    parents and of its dependents, and how many dependents there are (module docstring)."""
    rows: tuple[ParentRow, ...] = ()
    parents_after = None
    if run.parents:
        page = await client.action.dependencies(run.run_id, count=shown)
        rows = tuple(ParentRow(p.run_id, p.on_failure, parent_state(p)) for p in page.items)
        # The count is known: a full page is followed by another only if it is short of it.
        parents_after = page.after if len(rows) < run.parents else None
    dependents: tuple[str, ...] = ()
    dependents_after = None
    count, counted_all = 0, True
    if run.has_dependents:
        first = await client.action.dependents(run.run_id, count=shown)
        dependents, dependents_after = tuple(first.items), first.after
        count, after = len(dependents), first.after
        while after is not None:
            if count >= COUNTED:
                counted_all = False
                break
            step = min(_COUNT_PAGE, COUNTED - count)
            more = await client.action.dependents(run.run_id, after=after, count=step)
            count += len(more.items)
            after = more.after
        if counted_all and count == len(dependents):
            dependents_after = None  # the page "may" have been followed by one: it was not
    return RunGraph(
        run.parents,
        run.waiting_on if run.parents else 0,
        rows,
        parents_after,
        dependents,
        dependents_after,
        count,
        counted_all,
    )


__all__ = ["COUNTED", "SHOWN", "ParentRow", "RunGraph", "parent_state", "run_graph"]
