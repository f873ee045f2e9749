"""Taking runs, as plain functions over a :class:`Session`: the worker's health gate, one
claim on one action queue, and a round of claims over several. ``client.worker``
(:mod:`flo_redis.actions.workers`) and the ActionWorker's poller
(:mod:`flo_redis.worker.poller`) both call these.

A claim is one script call (``lua/action_claim.lua``): it takes up to ``max_n`` runs
ready now, each with a fresh fencing token, or parks its poller for a hand-off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence

from flo_redis._session.session import Session
from flo_redis._session.wake import Attempt, long_poll
from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside
from flo_redis._wire.checks import check_list
from flo_redis._wire.codec import pack, worker_labels
from flo_redis._wire.gateway import ACTION_CLAIM, WORKER_POLL
from flo_redis._wire.keys import ActionKeys, HandoffChannel, NamespaceKeys
from flo_redis._wire.lru import Lru
from flo_redis._wire.replies import Claimed, ClaimReply
from flo_redis._wire.status import Status, refusal
from flo_redis.actions.reports import run_keys
from flo_redis.errors import ValidationError

LABEL_SCAN = 200  # pending runs a claim inspects at most when routing by labels


def earliest_due(next_due: int, reply: ClaimReply) -> int:
    """The earlier of ``next_due`` and what ``reply`` says falls due next (a delayed run,
    a lease deadline, a start the rate limit allows); -1: nothing."""
    for due in (reply.next_due_ms, reply.rate_next_ms):
        if due >= 0 and (next_due < 0 or due < next_due):
            next_due = due
    return next_due


def unknown_worker(worker_id: str, ns: NamespaceKeys, status: int = Status.NOT_FOUND) -> Exception:
    """The error for a worker a script did not find. BAD_RECORD (its record did not
    decode, and was set aside) is logged once and answered the same way: the worker
    registers again."""
    if status == Status.BAD_RECORD:
        reason = "its stored record does not decode"
        warn_set_aside(scope_of(ns), [SetAside("worker", worker_id, reason)])
    return refusal(
        Status.NOT_FOUND,
        f"worker {worker_id!r} is not registered in namespace {ns.namespace!r} (or was "
        "removed after missing its heartbeats); register it again",
    )


class Gate:
    """The health gate's recent answers, per worker: a check that passed within a
    poll's ``ttl_s`` is reused (a drain or an unhealthy verdict is seen within that
    time), and each worker's labels are packed once per metadata. Bounded
    (:mod:`flo_redis._wire.lru`): a client may poll for thousands of workers."""

    def __init__(self) -> None:
        self.labels: Lru[str, bytes] = Lru()
        self.passed: Lru[tuple[str, str], tuple[float, bytes]] = Lru()

    def forget(self, namespace: str, worker_id: str) -> None:
        """Ask the gate again on the worker's next poll (its park was ended: a drain)."""
        self.passed.pop((namespace, worker_id))

    async def check(
        self, session: Session, worker_id: str, ns: NamespaceKeys, ttl_s: float = 0.0
    ) -> bytes:
        """Check the worker may take work now; its labels, packed for the claim.
        Refused for a removed, unhealthy or draining worker."""
        loop = asyncio.get_running_loop()
        cached = self.passed.get((ns.namespace, worker_id))
        if ttl_s > 0 and cached is not None and loop.time() - cached[0] < ttl_s:
            return cached[1]
        reply = await WORKER_POLL(session, ns, [worker_id])
        status = reply.status
        if status in (Status.NOT_FOUND, Status.BAD_RECORD):
            raise unknown_worker(worker_id, ns, status)
        if status == Status.UNHEALTHY:
            raise refusal(
                status,
                f"worker {worker_id!r} missed its heartbeats and is UNHEALTHY; send a "
                "heartbeat, then poll again",
            )
        if status == Status.DRAINING:
            raise refusal(
                status,
                f"worker {worker_id!r} is DRAINING: it takes no new work; finish running "
                "runs and stop",
            )
        metadata = reply.metadata
        packed = self.labels.get(metadata)
        if packed is None:
            labels = worker_labels(metadata)
            packed = pack(labels) if labels else b""
            self.labels.put(metadata, packed)
        self.passed.put((ns.namespace, worker_id), (loop.time(), packed))
        return packed


async def claim(
    session: Session,
    keys: ActionKeys,
    worker_id: str,
    labels: bytes,
    max_n: int,
    poll_id: str,
    park_ms: int = 0,
    received: str = "",
    offer_ms: int = 0,
) -> ClaimReply:
    """One claim script call on one action queue (no health gate, no waiting). With
    ``park_ms`` a poll that finds nothing parks its poller for a hand-off, offered
    (``offer_ms`` > 0: to be accepted within that long, or it goes back to its place in
    the queue) or, with 0, handed outright; ``received`` names the run handed to the
    poller's previous poll here that it got, as ``"<run id> <token>"`` (accepted, if it
    was offered)."""
    owner = session.owner_id
    reply = await ACTION_CLAIM(
        session,
        (keys, HandoffChannel.of(keys.tag, owner)),
        [worker_id, owner, labels, max_n, poll_id, LABEL_SCAN, park_ms, received, offer_ms],
    )
    if reply.aside:
        warn_set_aside(scope_of(keys), reply.aside)
    return reply


async def claim_round(
    session: Session,
    order: Sequence[ActionKeys],
    worker_id: str,
    labels: bytes,
    max_tasks: int,
    poll_id: str,
    on_unregistered: Callable[[str], Awaitable[None]] | None = None,
) -> Attempt[Claimed]:
    """One claim per action queue, in ``order``, until ``max_tasks`` runs are held:
    them, when something is next due (server ms: a delayed run, a lease deadline, a
    start a rate limit allows), and whether every queue answered that only its rate
    limit holds its runs back."""
    claimed: list[Claimed] = []
    next_due = -1
    held_queues = 0
    for keys in order:
        if len(claimed) >= max_tasks:
            break
        reply = await claim(session, keys, worker_id, labels, max_tasks - len(claimed), poll_id)
        if not reply.registered and on_unregistered is not None:
            await on_unregistered(keys.action)
        claimed.extend(reply.runs)
        next_due = earliest_due(next_due, reply)
        if reply.rate_next_ms >= 0:
            held_queues += 1
    return Attempt(claimed, next_due, held=held_queues == len(order))


async def poll(
    session: Session,
    all_keys: Sequence[ActionKeys],
    worker_id: str,
    labels: bytes,
    max_tasks: int,
    poll_id: str,
    block_ms: int,
    *,
    since: int,
    rotation: Iterator[int],
    on_unregistered: Callable[[str], Awaitable[None]] | None = None,
) -> list[Claimed]:
    """Up to ``max_tasks`` runs of the queues of ``all_keys``, waiting up to
    ``block_ms`` for some (woken by their wake channels; an interrupt of the session's
    waker after ``since`` ends it): a :func:`claim_round` per look, each from the next
    queue ``rotation`` names, so no action starves."""

    async def attempt() -> Attempt[Claimed]:
        order = rotated(all_keys, next(rotation) % len(all_keys))
        return await claim_round(
            session, order, worker_id, labels, max_tasks, poll_id, on_unregistered
        )

    return await long_poll(
        session.waker,
        (k.wake for k in all_keys),
        block_ms,
        attempt,
        server_clock_ms=session.server_time_ms,
        since=since,
    )


def check_handed(
    session: Session, action_name: str, handed: object, namespace: str | None
) -> list[str | int]:
    """The run id and token of each ``(run id, token)`` pair of ``handed`` in turn, as
    :func:`flo_redis.actions.reports.accept` sends them; :class:`ValidationError` for
    anything else, :class:`NotFoundError` for a run of another action."""
    packed: list[str | int] = []
    for index, item in enumerate(check_list("handed", handed)):
        if not (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and type(item[1]) is int
        ):
            raise ValidationError(f"handed[{index}] must be a (run id, token) pair")
        run_keys(session, action_name, item[0], namespace)
        packed += item
    return packed


def rotated(all_keys: Sequence[ActionKeys], start: int) -> list[ActionKeys]:
    """``all_keys`` from ``start`` on, then the rest: a rotating start, so no action
    starves."""
    return [*all_keys[start:], *all_keys[:start]]


__all__ = [
    "LABEL_SCAN",
    "Gate",
    "check_handed",
    "claim",
    "claim_round",
    "earliest_due",
    "poll",
    "rotated",
    "unknown_worker",
]
