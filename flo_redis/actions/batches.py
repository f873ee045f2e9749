"""Batches: sets of runs (and of nested batches) with callbacks that are runs, each made
exactly once (``lua/lib/batch.lua``; ``docs/flows.md``).

A batch lives in a hash slot of its own, so what its runs' queues tell it (a member
added, a member ended) and what it tells others (make a callback, tell its parent batch)
are messages, carried as the graph's are (:mod:`flo_redis.actions.graph`) and applied
idempotently: a member's state changes only for a newer version, and a callback is a
run invoked with the idempotency key ``flo-batch:<id>:<kind>``, so a message carried
twice makes it once. Whoever tells a batch something carries its messages at once; the
workers' upkeep looks at every open batch every few seconds
(:func:`forward_due_batches`), so a message a forwarder left behind is carried then.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from flo_redis._session.session import Session
from flo_redis._wire import runner
from flo_redis._wire.checks import check_count, check_name
from flo_redis._wire.codec import decoded, pack
from flo_redis._wire.gateway import (
    ACTION_INVOKE,
    BATCH_DONE,
    BATCH_DUE,
    BATCH_NOTE,
    BATCH_OPEN,
    BATCH_SEAL,
    BATCH_TAKE,
)
from flo_redis._wire.keys import action_keys, batch_keys, namespace_keys, run_id_prefix
from flo_redis._wire.status import Status, refusal
from flo_redis.errors import ValidationError
from flo_redis.types import RunStatus
from flo_redis.types.graph import BatchOptions, BatchStatus, Callback

LEASE_MS = 2_000  # a batch message taken is due again after this (its steps are idempotent)
SWEEP_EVERY_MS = 5_000  # each open batch is looked at by the upkeep this often
SWEEP_LIMIT = 100  # open batches one upkeep looks at, at most
ADDED = -2  # batch_note: a member added, not ended
_KINDS = {"on_complete": "complete", "on_success": "success", "on_death": "death"}


def _not_found(batch: str, namespace: str) -> Exception:
    return refusal(
        Status.NOT_FOUND,
        f"batch {batch!r} not found in namespace {namespace!r}: open it first "
        "(client.action.open_batch), or it ended and its retention passed",
    )


async def open_batch(session: Session, namespace: str, opts: BatchOptions) -> str:
    """Open a batch with ``opts``; its id (module docstring)."""
    callbacks: dict[str, list[Any]] = {}
    for field, kind in _KINDS.items():
        cb = getattr(opts, field)
        if cb is None:
            continue
        if not isinstance(cb, Callback):
            raise ValidationError(f"BatchOptions.{field} must be a Callback, got {cb!r}")
        check_name("action name", cb.action)
        if not isinstance(cb.input, bytes):
            raise ValidationError(f"BatchOptions.{field}.input must be bytes")
        callbacks[kind] = [cb.action, cb.input]
    parent = "" if opts.parent is None else check_name("batch id", opts.parent)
    retention = check_count("retention_ms", opts.retention_ms, 1, 2**53 - 1)
    batch = uuid.uuid4().hex
    keys = batch_keys(namespace, batch)
    # Indexed first: a batch the upkeep finds no state for is dropped from the index.
    with runner.redis_errors("open_batch"):
        await session.redis.zadd(namespace_keys(namespace).batches, {batch: 0})
    reply = await BATCH_OPEN(session, keys, [pack(callbacks), parent, retention])
    if reply.status != Status.OK:
        raise refusal(reply.status, f"batch {batch!r} exists already")
    if parent:
        await forward_batch(session, namespace, batch)  # its parent told of it now
    return batch


async def seal_batch(session: Session, namespace: str, batch: str) -> None:
    """No member is added to ``batch`` from now on; once all have ended it settles."""
    keys = batch_keys(namespace, check_name("batch id", batch))
    if (await BATCH_SEAL(session, keys, [])).status == Status.NOT_FOUND:
        raise _not_found(batch, namespace)
    await forward_batch(session, namespace, batch)


async def batch_status(session: Session, namespace: str, batch: str) -> BatchStatus:
    """``batch``'s counts (:class:`BatchStatus`)."""
    keys = batch_keys(namespace, check_name("batch id", batch))
    with runner.redis_errors("batch_status"):
        raw = await session.redis.hgetall(keys.state)
    if not raw:
        raise _not_found(batch, namespace)
    state = {decoded(k): decoded(v) for k, v in raw.items() if k != b"callbacks"}
    total, completed, failed = (int(state.get(f, 0)) for f in ("n", "c", "f"))
    ended = state.get("ended")
    return BatchStatus(
        batch_id=batch,
        total=total,
        completed=completed,
        failed=failed,
        pending=total - completed - failed,
        sealed=state.get("sealed") == "1",
        status=RunStatus(int(ended)) if ended else None,
        parent=state.get("parent") or None,
        callbacks=sorted(k[3:] for k in state if k.startswith("cb:")),
    )


async def batch_members(
    session: Session, namespace: str, batch: str, cursor: int = 0, count: int = 50
) -> tuple[int, list[tuple[str, RunStatus | None]]]:
    """A page of ``batch``'s members (``HSCAN`` of its ``members`` hash from ``cursor``,
    about ``count`` of them, in no set order), each with how it ended (None while it has
    not); a run by its id, a nested batch as ``b:<id>``. The next cursor, 0 after the
    last page. An unknown batch has none: read :func:`batch_status` first."""
    keys = batch_keys(namespace, check_name("batch id", batch))
    check_count("cursor", cursor, 0)
    count = check_count("count", count, 1, 1000)
    with runner.redis_errors("batch_members"):
        after, raw = await session.redis.hscan(keys.members, cursor, count=count)
    members: list[tuple[str, RunStatus | None]] = []
    pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)
    for member, value in pairs:
        state = decoded(value).split(" ", 1)[0]
        try:
            ended: RunStatus | None = None if state == "w" else RunStatus(int(state))
        except ValueError:  # not a status: shown as not ended
            ended = None
        members.append((decoded(member), ended))
    return int(after), members


async def check_open(session: Session, namespace: str, batch: str) -> None:
    """Refuse runs for ``batch`` unless it is open (exists, not sealed): before an invoke
    with ``batch=`` writes anything. One sealed after this check still counts them."""
    keys = batch_keys(namespace, check_name("batch", batch))
    with runner.redis_errors("invoke"):
        sealed = await session.redis.hget(keys.state, "sealed")
    if sealed is None:
        raise _not_found(batch, namespace)
    if sealed == b"1":
        raise refusal(
            Status.CONFLICT,
            f"batch {batch!r} is sealed: no run joins it any more; open another batch",
        )


async def note(session: Session, namespace: str, batch: str, items: Sequence[Any]) -> None:
    """Tell ``batch`` of members (``items``: member, state, version of each), then carry
    what that left in its outbox. A batch no longer there is told nothing."""
    keys = batch_keys(namespace, batch)
    for at in range(0, len(items), 3000):
        reply = await BATCH_NOTE(session, keys, [pack(list(items[at : at + 3000]))])
        if reply.status == Status.NOT_FOUND:
            return
    await forward_batch(session, namespace, batch)


async def _callback(session: Session, namespace: str, batch: str, kind: str, cb: Any) -> None:
    """Make the callback ``kind`` of ``batch``: once, whatever the retries (its key)."""
    keys = action_keys(namespace, cb.action)
    key = f"flo-batch:{batch}:{kind}"
    args = [run_id_prefix(cb.action), cb.data, b"", 0, 0, key, 0, b"", "", b"", ""]
    reply = await ACTION_INVOKE(session, keys, args)
    if reply.status != Status.OK:
        raise refusal(reply.status, f"the {kind} callback of batch {batch!r} ({cb.action!r})")


async def forward_batch(session: Session, namespace: str, batch: str) -> bool:
    """Carry the messages due in ``batch``'s outbox; False when the batch is gone."""
    keys = batch_keys(namespace, batch)
    taken = await BATCH_TAKE(session, keys, [LEASE_MS])
    if taken.status == Status.NOT_FOUND:
        return False
    for m in taken.messages:
        if m.kind == "c":
            await _callback(session, namespace, batch, m.name, m)
        elif m.kind == "p":
            await note(session, namespace, m.parent, [f"b:{batch}", m.status, m.version])
        else:
            await note(session, namespace, m.parent, [f"b:{batch}", ADDED, 0])
    if taken.messages:
        await BATCH_DONE(session, keys, [pack([m.member for m in taken.messages])])
    return True


async def forward_due_batches(session: Session, namespace: str) -> None:
    """The upkeep: carry the messages of the open batches whose turn has come, and drop
    those that are gone (expired) from the index."""
    gone: list[str] = []
    reply = await BATCH_DUE(
        session, namespace_keys(namespace), [SWEEP_LIMIT, SWEEP_EVERY_MS, pack(gone)]
    )
    for batch in reply.names:
        if not await forward_batch(session, namespace, batch):
            gone.append(batch)
    if gone:
        await BATCH_DUE(session, namespace_keys(namespace), [1, SWEEP_EVERY_MS, pack(gone)])


__all__ = [
    "batch_members",
    "batch_status",
    "check_open",
    "forward_batch",
    "forward_due_batches",
    "note",
    "open_batch",
    "seal_batch",
]
