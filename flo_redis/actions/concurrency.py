"""Concurrency slots: owned leases on a share of an action's global capacity.

A slot is held by exactly one owner (a worker process, ``session.owner_id``) under a
fencing token. It is given back only by its exact holder (:meth:`SlotOperations.release`),
or taken back when its holder is gone or its lease deadline has passed
(:meth:`SlotOperations.reclaim`). Each of these is one script, and each refuses what
would be wrong, changing nothing:

- reclaiming a slot whose holder is not the owner the caller names (``WRONG_OWNER``);
- reclaiming a live holder's slot (``OWNER_ALIVE``; a frozen holder counts as live until
  the slot's deadline);
- a late release by an old owner after its slot was given to a replacement
  (``WRONG_OWNER``), or by a holder whose token is no longer current (``STALE``).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from flo_redis._session.liveness import DEFAULT_GRACE_MS
from flo_redis._session.session import Operations
from flo_redis._wire import runner
from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside
from flo_redis._wire.checks import check_count
from flo_redis._wire.codec import BadRecord, unpack_record
from flo_redis._wire.gateway import SLOT_ACQUIRE, SLOT_RECLAIM, SLOT_RELEASE
from flo_redis._wire.keys import OwnerChannel, check_name
from flo_redis._wire.refusals import raise_refusal
from flo_redis._wire.status import Status, refusal
from flo_redis.errors import ServerError, ValidationError

MAX_SLOTS = 1000
MAX_SLOT_LEASE_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class Slot:
    """A held concurrency slot of ``action``: its index (1-based), holder and token."""

    action: str
    namespace: str
    index: int
    owner: str
    token: int
    deadline_ms: int
    """When the slot is taken back unless released first (-1 or far future: never)."""


class SlotOperations(Operations):
    """Acquire, release and reclaim an action's concurrency slots as ``client``'s owner."""

    async def acquire(
        self,
        action: str,
        *,
        capacity: int = 0,
        lease_ms: int = 0,
        namespace: str | None = None,
    ) -> Slot | None:
        """Take a free slot (``capacity`` slots in all; 0: the action's max_concurrency)
        for this client's owner; None when every slot is held by a live holder.

        The owner's liveness subscription in the action's slot is made first, so the slot
        is never held by an owner that looks gone. A slot whose lease (``lease_ms``, 0:
        none) ran out is taken over; when all are held, gone holders are reclaimed first
        (see :meth:`reclaim_gone`) and the acquire is tried once more."""
        check_count("capacity", capacity, 0, MAX_SLOTS)
        check_count("lease_ms", lease_ms, 0, MAX_SLOT_LEASE_MS)
        keys = self._action_keys(action, namespace)
        for attempt in range(2):
            reply = await SLOT_ACQUIRE(
                self._session, keys, [self._session.owner_id, capacity, lease_ms]
            )
            no_capacity = f"action {action!r} has no max_concurrency; pass capacity to acquire"
            raise_refusal(reply.status, keys, "slot acquire", {Status.OUT_OF_RANGE: no_capacity})
            if reply.aside:  # slot records that did not decode: set aside, the slots free
                warn_set_aside(scope_of(keys), reply.aside)
            if reply.slot > 0:
                return Slot(
                    action=action,
                    namespace=keys.namespace,
                    index=reply.slot,
                    owner=self._session.owner_id,
                    token=reply.token,
                    deadline_ms=reply.deadline_ms,
                )
            if attempt == 0 and not await self.reclaim_gone(action, namespace=namespace):
                return None
        return None

    async def release(self, slot: Slot) -> None:
        """Give ``slot`` back. Refused, changing nothing, unless this client's owner is
        still its exact holder under the same token: :class:`ConflictError` when another
        owner holds it now (the slot was reclaimed and given to a replacement) or the
        token is not current. Resending a release that took effect is answered OK."""
        if not isinstance(slot, Slot):
            raise ValidationError(f"slot must be a Slot from acquire, got {type(slot).__name__}")
        check_count("slot.index", slot.index, 1, MAX_SLOTS)
        check_count("slot.token", slot.token, 1, 2**53)
        keys = self._action_keys(slot.action, slot.namespace)
        reply = await SLOT_RELEASE(
            self._session, keys, [slot.index, self._session.owner_id, slot.token]
        )
        status = reply.status
        if status == Status.OK:
            return
        what = f"release of slot {slot.index} of action {slot.action!r} by {slot.owner!r}"
        if status == Status.WRONG_OWNER:
            raise refusal(
                status,
                f"{what} refused: the slot was taken back and is held by another owner now",
            )
        if status == Status.STALE:
            raise refusal(status, f"{what} refused: token {slot.token} is no longer current")
        if status == Status.BAD_RECORD:
            reason = "its stored record does not decode"
            warn_set_aside(scope_of(keys), [SetAside("slot", str(slot.index), reason)])
            raise refusal(
                status,
                f"{what} refused: the slot's record does not decode; it was set aside, and "
                "the slot is free",
            )
        raise refusal(status, f"{what} refused: the slot is not held")

    async def reclaim(
        self,
        action: str,
        index: int,
        expected_owner: str,
        *,
        grace_ms: int = DEFAULT_GRACE_MS,
        namespace: str | None = None,
    ) -> bool:
        """Take slot ``index`` back from ``expected_owner``, only if that owner holds it
        and is gone (absent for ``grace_ms``) or the slot's lease ran out. True when the
        slot is free now; False while the owner is only suspected (ask again after the
        grace). Refused with :class:`ConflictError` when another owner holds the slot
        (``WRONG_OWNER``) or the holder is alive (``OWNER_ALIVE``); :class:`NotFoundError`
        when the slot is not held."""
        check_count("index", index, 1, MAX_SLOTS)
        check_name("expected_owner", expected_owner)
        check_count("grace_ms", grace_ms, 0, 2**32 - 1)
        keys = self._action_keys(action, namespace)
        reply = await SLOT_RECLAIM(
            self._session,
            (keys, OwnerChannel.of(keys.tag, expected_owner)),
            [index, expected_owner, grace_ms],
        )
        status = reply.status
        if status == Status.OK:
            return bool(reply.reclaimed)
        what = f"reclaim of slot {index} of action {action!r} from {expected_owner!r}"
        if status == Status.WRONG_OWNER:
            raise refusal(status, f"{what} refused: another owner holds it")
        if status == Status.OWNER_ALIVE:
            raise refusal(status, f"{what} refused: the owner is alive")
        if status == Status.OUT_OF_RANGE:
            raise refusal(status, f"{what}: grace_ms must be >= 0")
        raise refusal(status, f"{what}: the slot is not held")

    async def holders(self, action: str, namespace: str | None = None) -> builtins.list[Slot]:
        """The slots held now, by index (read only)."""
        keys = self._action_keys(action, namespace)
        with runner.redis_errors("slots"):
            raw = await self._session.redis.hgetall(keys.slots)
        held = []
        for field, value in raw.items():
            try:
                rec = unpack_record(value)
                owner = rec.get("o")
                if owner is None:
                    continue
                held.append(
                    Slot(
                        action=action,
                        namespace=keys.namespace,
                        index=int(field),
                        owner=owner.decode() if isinstance(owner, bytes) else str(owner),
                        token=int(rec["t"]),
                        deadline_ms=int(rec["d"]),
                    )
                )
            except (BadRecord, KeyError, ValueError, TypeError, AttributeError):
                continue  # not a holder anyone can name; slot_acquire sets it aside
        return sorted(held, key=lambda s: s.index)

    async def reclaim_gone(
        self, action: str, *, grace_ms: int = DEFAULT_GRACE_MS, namespace: str | None = None
    ) -> int:
        """Take back every slot whose holder is gone (or whose lease ran out); holders
        seen absent for the first time are only suspected. Returns how many were freed."""
        check_count("grace_ms", grace_ms, 0, 2**32 - 1)
        freed = 0
        for slot in await self.holders(action, namespace):
            if slot.owner == self._session.owner_id:
                continue
            try:
                if await self.reclaim(
                    action, slot.index, slot.owner, grace_ms=grace_ms, namespace=namespace
                ):
                    freed += 1
            except ServerError:
                continue  # refused (alive, replaced meanwhile): nothing changed
        return freed


__all__ = ["Slot", "SlotOperations"]
