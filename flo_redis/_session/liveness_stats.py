"""Liveness statistics of one action queue (:func:`liveness_stats`): the counters the
reclaim and report scripts keep themselves (reclaims by cause, offers expired, stale
reports refused), so every client reads the same numbers, and what is held now."""

from __future__ import annotations

from dataclasses import dataclass

from flo_redis._session.session import Session
from flo_redis._wire.codec import BadRecord, unpack_record
from flo_redis._wire.keys import action_keys
from flo_redis._wire.translate import redis_errors


@dataclass(frozen=True, slots=True)
class LivenessStats:
    """Liveness counters of one action queue, kept by the scripts themselves (so every
    client sees the same numbers), plus what is held right now."""

    reclaimed_owner_gone: int
    """Runs taken back because their owner's process was gone."""
    reclaimed_deadline: int
    """Runs taken back because their lease deadline passed (frozen or silent owner)."""
    offers_expired: int
    """Runs handed to a parked poller that did not accept them within its offer window
    (a frozen process, a half-open connection), put back at the head of their queue
    without spending the attempt."""
    stale_refused: int
    """Reports (complete, fail, release) refused as stale: each from a holder whose lease
    was taken back or finished."""
    owners_suspected: int
    """Times an owner was seen without its liveness subscription and suspected."""
    suspicions_cleared: int
    """Times a suspected owner came back within the grace (a connection blip)."""
    owners_gone: int
    """Owners judged gone and cleaned out."""
    owners: int
    """Owners that may hold runs in this queue now."""
    suspects: int
    """Of those, suspected right now."""
    slots_held: int
    """Concurrency slots held right now."""
    slot_reclaimed_owner_gone: int
    slot_reclaimed_deadline: int
    slot_release_refused: int


_STAT_FIELDS = (
    "reclaimed_owner_gone",
    "reclaimed_deadline",
    "offers_expired",
    "stale_refused",
    "owners_suspected",
    "suspicions_cleared",
    "owners_gone",
    "slot_reclaimed_owner_gone",
    "slot_reclaimed_deadline",
    "slot_release_refused",
)


def _holder(raw: object) -> object:
    """The owner a slot record names (None: free, or a record that does not decode)."""
    try:
        return unpack_record(raw).get("o")
    except BadRecord:
        return None


async def liveness_stats(
    session: Session, name: str, namespace: str | None = None
) -> LivenessStats:
    """Read action ``name``'s liveness counters and current holders (read only)."""
    keys = action_keys(session.get_namespace(namespace), name)
    conn = session.redis
    with redis_errors("stats"):
        counters = await conn.hmget(keys.meta, [f"stat:{f}" for f in _STAT_FIELDS])
        marks = await conn.hvals(keys.owners)
        slots = await conn.hvals(keys.slots)
    values = dict(zip(_STAT_FIELDS, (int(v or 0) for v in counters), strict=True))
    held = sum(1 for raw in slots if _holder(raw) is not None)
    return LivenessStats(
        owners=len(marks),
        suspects=sum(1 for m in marks if int(m) != 0),
        slots_held=held,
        **values,
    )


__all__ = ["LivenessStats", "liveness_stats"]
