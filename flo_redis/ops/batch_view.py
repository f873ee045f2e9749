"""One batch as an operator reads it (``flo-redis batches show``, the dashboard's batch
page): its counts, whether it is sealed, how it ended, its parent batch, the callbacks
made so far, and the first page of its members, each with its state.

The members are read with ``HSCAN`` of the batch's ``members`` hash
(:func:`flo_redis.actions.batches.batch_members`), so a batch of any size costs a
bounded number of calls; they come in no set order, and the page lists nested batches
first, then runs, each by id. The counts come from the batch's status, so a page that
does not list every member says how many there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flo_redis.actions.batches import batch_members
from flo_redis.types import BatchStatus

if TYPE_CHECKING:
    from flo_redis.client import FloClient

SHOWN = 50  # members listed
NESTED = "b:"  # how the members hash names a nested batch


@dataclass(frozen=True, slots=True)
class BatchMember:
    """One member as shown: the id of a run (``kind`` "run") or of a nested batch
    (``kind`` "batch"), and its state: "pending" while it has not ended, else the status
    it ended with ("COMPLETED", "FAILED", ...) as the batch was told."""

    member_id: str
    kind: str
    state: str


@dataclass(frozen=True, slots=True)
class BatchView:
    """A batch's status and the first page of its members (module docstring)."""

    status: BatchStatus
    members: tuple[BatchMember, ...] = ()

    @property
    def outcome(self) -> str:
        """ "COMPLETED" or "FAILED" once it settled, else "" (not sealed, or a member
        has not ended)."""
        return self.status.status.name if self.status.status is not None else ""

    @property
    def listed_all(self) -> bool:
        return len(self.members) >= self.status.total

    def members_note(self) -> str:
        """ "12 (3 pending)", and "; the first 50" when not all of them follow."""
        note = str(self.status.total)
        if self.status.pending:
            note += f" ({self.status.pending} pending)"
        if not self.listed_all:
            note += f"; the first {len(self.members)}"
        return note

    def facts(self) -> list[tuple[str, str]]:
        """The rows of its facts table, empty ones included (the caller leaves them)."""
        s = self.status
        return [
            ("batch", s.batch_id),
            ("members", str(s.total)),
            ("completed", str(s.completed)),
            ("failed", str(s.failed)),
            ("pending", str(s.pending)),
            ("sealed", "yes" if s.sealed else "no"),
            ("outcome", self.outcome),
            ("parent batch", s.parent or ""),
            ("callbacks made", ", ".join(s.callbacks)),
        ]

    def as_json(self) -> dict[str, Any]:
        s = self.status
        return {
            "batch_id": s.batch_id,
            "total": s.total,
            "completed": s.completed,
            "failed": s.failed,
            "pending": s.pending,
            "sealed": s.sealed,
            "status": self.outcome or None,
            "parent": s.parent,
            "callbacks": list(s.callbacks),
            "members": [
                {"id": m.member_id, "kind": m.kind, "state": m.state} for m in self.members
            ],
            "members_listed_all": self.listed_all,
        }


async def batch_view(client: FloClient, batch_id: str, shown: int = SHOWN) -> BatchView:
    """``batch_id``'s status and up to ``shown`` of its members; :class:`NotFoundError`
    for a batch that is not there (never opened, or past its retention)."""
    status = await client.action.batch_status(batch_id)
    found: list[tuple[str, Any]] = []
    cursor = 0
    while True:
        cursor, page = await batch_members(
            client.session, client.namespace, batch_id, cursor, max(shown - len(found), 1)
        )
        found.extend(page)
        if cursor == 0 or len(found) >= shown:
            break
    members = [
        BatchMember(
            member[len(NESTED) :] if member.startswith(NESTED) else member,
            "batch" if member.startswith(NESTED) else "run",
            "pending" if ended is None else ended.name,
        )
        for member, ended in found
    ]
    members.sort(key=lambda m: (m.kind != "batch", m.member_id))
    return BatchView(status, tuple(members[:shown]))


__all__ = ["SHOWN", "BatchMember", "BatchView", "batch_view"]
