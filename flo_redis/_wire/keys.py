"""The one place Redis key and channel names are built.

Every key of one action queue shares the hash tag ``{<namespace>:<action>}``, of a stream
(partition) ``{<namespace>:<stream>}``, of a batch ``{<namespace>:<batch>}``, and the registries
live under ``{<namespace>}``: a script touches a single hash slot.

User-supplied names are validated here, before any key is built: a name that could break the hash
tag (``{``/``}``), blur the boundary between namespace and name (``:`` in a namespace), or carries
control characters is refused with a :class:`ValidationError` that says what to change.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TypeVar

from flo_redis._wire.checks import FORBIDDEN_IN_NAMES, check_count
from flo_redis._wire.checks import MAX_NAME_SIZE as MAX_NAME_SIZE  # the names keys are built from
from flo_redis._wire.checks import check_name as check_name
from flo_redis._wire.checks import check_namespace as check_namespace
from flo_redis.errors import KeyTooLargeError, ValidationError, server_error
from flo_redis.types import MAX_KEY_SIZE, Ran, Reason, StatusCode

PREFIX = "flo"

Keys = TypeVar("Keys")

# A keys dataclass -> (field, ":<suffix>") of each of its key fields, worked out at its
# first build (each class has one factory, so the same short names and given fields).
_SUFFIXES: dict[type, tuple[tuple[str, str], ...]] = {}


def _keyed(
    cls: type[Keys], base: str, short: Mapping[str, str] | None = None, **names: object
) -> Keys:
    """A keys dataclass: ``names`` (the names the keys are for, the tag) as given, every
    other field the key ``<base>:<suffix>``, the suffix being the field's name with ``-``
    for ``_``, or its ``short`` name (kept from the first key layout)."""
    suffixes = _SUFFIXES.get(cls)
    if suffixes is None:
        short = short or {}
        suffixes = _SUFFIXES[cls] = tuple(
            (f.name, ":" + short.get(f.name, f.name.replace("_", "-")))
            for f in fields(cls)  # type: ignore[arg-type]
            if f.name not in names
        )
    return cls(**names, **{name: base + suffix for name, suffix in suffixes})


@dataclass(frozen=True, slots=True)
class ActionKeys:
    """Keys of one action's queue; all in one hash slot."""

    namespace: str
    action: str
    tag: str
    definition: str  # HASH  the action's registered settings
    meta: str  # HASH  counters: run sequence, fencing tokens, stats
    runs: str  # HASH  run_id -> msgpack record
    inputs: str  # HASH  run_id -> input bytes
    pending: str  # ZSET  run_id -> priority * 2^45 + queue sequence (lowest first)
    delayed: str  # ZSET  run_id -> due time ms (delayed runs, retry backoff)
    leases: str  # ZSET  run_id -> lease deadline ms (running runs)
    done: str  # ZSET  run_id -> finished time ms (completed runs kept for retention)
    failed: str  # ZSET  run_id -> finished time ms (FAILED / TIMED_OUT, kept until requeued)
    idempotency: str  # HASH  idempotency key -> run_id
    polls: str  # HASH  poll id -> msgpack hand-out (replay of lost claim replies)
    poll_times: str  # ZSET  poll id -> time ms
    owners: str  # HASH  owner id -> ms since it is suspected gone (0: not suspected)
    owned: str  # ZSET  "<owner>\0<run_id>" (score 0): the runs each owner was handed
    slots: str  # HASH  concurrency slot index -> msgpack holder {o, t, d, sx}
    rate: str  # ZSET  fencing token -> start ms (starts within the rate limit's window)
    parked: str  # ZSET  poller -> park deadline ms (pollers waiting for a hand-off)
    schedules: str  # HASH  schedule name -> msgpack record (spec, time zone, input)
    schedule_due: str  # ZSET  schedule name -> next occurrence ms (active schedules)
    schedule_paused: str  # ZSET  schedule name -> the occurrence it holds while paused
    schedule_last: str  # HASH  schedule name -> msgpack note of the runs it last created
    quarantine: str  # STREAM  records set aside: runs, schedules, slots (lua/lib/record.lua)
    history: str  # STRING  runs per minute over 72 hours, a ring (lua/lib/history.lua)
    flows: str  # HASH  "r:<flow key>" -> runs of that key running (lua/lib/flow.lua)
    flow_held: str  # ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
    flow_vt: str  # ZSET  flow key -> virtual time of its last run placed fairly
    flow_rate: str  # ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
    flow_once: str  # ZSET  flow key -> ms its last run is looked at again (dedup, throttle, ...)
    waiting: str  # ZSET  run_id -> created ms (runs waiting for their parents to end)
    graph: str  # HASH  "d\0<child>\0<parent>" -> dependency state; "c\0<message>" -> cursor
    graph_idx: str  # ZSET  "p\0<child>\0<parent>", "k\0<parent>\0<child>" (score 0, by name)
    outbox: str  # ZSET  graph message -> ms it is due (lua/lib/graph.lua)
    nudge: str  # sharded pub/sub channel telling forwarders of graph messages
    wake: str  # sharded pub/sub channel announcing new work
    ended: str  # sharded pub/sub channel told the ids of runs that end (action.wait)

    def all_data_keys(self) -> tuple[str, ...]:
        """Every key of the queue but its meta hash (its names and channels are none)."""
        return tuple(getattr(self, name) for name in _ACTION_DATA)


_ACTION_DATA = tuple(
    f.name
    for f in fields(ActionKeys)
    if f.name not in ("namespace", "action", "tag", "meta", "nudge", "wake", "ended")
)


def action_keys(namespace: str, action: str) -> ActionKeys:
    """The keys of one action's queue (validated names; cached)."""
    if not isinstance(namespace, str) or not isinstance(action, str):
        check_namespace(namespace)
        check_name("action name", action)
    return _action_keys(namespace, action)


@functools.lru_cache(maxsize=4096)
def _action_keys(namespace: str, action: str) -> ActionKeys:
    check_namespace(namespace)
    check_name("action name", action)
    tag = f"{{{namespace}:{action}}}"
    short = {"definition": "def", "inputs": "in", "idempotency": "idem"}
    return _keyed(
        ActionKeys, f"{PREFIX}:a:{tag}", short, namespace=namespace, action=action, tag=tag
    )


def run_id_prefix(action: str) -> str:
    """Run ids are ``<action>:<sequence>``, so a run id names its queue without a lookup."""
    return f"{action}:"


def action_of_run(run_id: str) -> str:
    """The action a run id belongs to.

    Run ids look like ``<action>:<number>``. An id of any other shape (``act-0-0``, an
    empty string, a name no action can have) was never handed out, so it is answered as
    flo answers every unknown run: :class:`NotFoundError`, before anything is sent. Only
    what flo itself checks stays a :class:`ValidationError`: an id that is not a str, or
    longer than ``MAX_KEY_SIZE`` bytes (:class:`KeyTooLargeError`)."""
    if not isinstance(run_id, str):
        raise ValidationError(f"run id must be a str, got {type(run_id).__name__}")
    try:
        run_id.encode()
    except UnicodeEncodeError as exc:
        raise ValidationError(f"run id {run_id[:40]!r} is not valid Unicode") from exc
    if len(run_id.encode()) > MAX_KEY_SIZE:
        raise KeyTooLargeError(
            f"run id is {len(run_id.encode())} bytes; the limit is {MAX_KEY_SIZE}"
        )
    action, _, seq = run_id.rpartition(":")
    if not (seq.isascii() and seq.isdigit()) or not action or not is_name(action):
        raise server_error(
            StatusCode.NOT_FOUND,
            Reason.NOT_FOUND,
            f"run {run_id!r} not found: no run has that id (run ids look like "
            "'<action>:<number>', as returned by invoke)",
            Ran.NO,
        )
    return action


def is_name(name: str) -> bool:
    """Whether ``name`` would pass :func:`check_name` (for names read back from Redis)."""
    return len(name.encode()) <= MAX_NAME_SIZE and FORBIDDEN_IN_NAMES.search(name) is None


@dataclass(frozen=True, slots=True)
class NamespaceKeys:
    """Keys of a namespace's registries; all in one hash slot."""

    namespace: str
    tag: str  # {<namespace>}: the registries' hash tag (their owner channels share it)
    config: str  # HASH  namespace settings (heartbeat timeout, removal delay)
    workers: str  # HASH  worker_id -> msgpack record
    worker_ids: str  # ZSET  worker ids (score 0) for paging in id order
    actions: str  # ZSET  action names (score 0) for paging in name order
    streams: str  # ZSET  stream names (score 0)
    quarantine: str  # STREAM  worker records set aside (lua/lib/record.lua)
    batches: str  # ZSET  open batch id -> ms its messages are next looked at


@dataclass(frozen=True, slots=True)
class BatchKeys:
    """Keys of one batch (lua/lib/batch.lua); all in one hash slot, its own."""

    namespace: str
    batch: str
    tag: str
    state: str  # HASH  counts, settings, callbacks made
    members: str  # HASH  member -> "<state> <version>"
    outbox: str  # ZSET  batch message -> ms it is due


@functools.lru_cache(maxsize=4096)
def batch_keys(namespace: str, batch: str) -> BatchKeys:
    """The keys of batch ``batch`` of ``namespace`` (validated names; cached)."""
    check_namespace(namespace)
    check_name("batch id", batch)
    tag = f"{{{namespace}:{batch}}}"
    return _keyed(BatchKeys, f"{PREFIX}:b:{tag}", namespace=namespace, batch=batch, tag=tag)


def namespace_keys(namespace: str) -> NamespaceKeys:
    """The keys of a namespace's registries (validated name; cached)."""
    if not isinstance(namespace, str):
        check_namespace(namespace)
    return _namespace_keys(namespace)


@functools.lru_cache(maxsize=1024)
def _namespace_keys(namespace: str) -> NamespaceKeys:
    check_namespace(namespace)
    tag = f"{{{namespace}}}"
    return _keyed(NamespaceKeys, f"{PREFIX}:ns:{tag}", namespace=namespace, tag=tag)


def namespaces_key() -> str:
    """The registry of namespaces (ZSET of names, score 0): its own hash slot."""
    return f"{PREFIX}:namespaces"


# An owner's channels in a queue's slot are ``<kind prefix><tag>:<owner>``; scripts hold
# a channel named to them against the name built so (lib/owners.lua, ``OWNER_CHANNELS``).
LIVE_CHANNEL = f"{PREFIX}:live:"
NOTICE_CHANNEL = f"{PREFIX}:note:"
HANDOFF_CHANNEL = f"{PREFIX}:hand:"


def owner_channel(tag: str, owner: str) -> str:
    """The liveness channel of ``owner`` in the slot of ``tag`` (never published to)."""
    return f"{LIVE_CHANNEL}{tag}:{owner}"


def notice_channel(tag: str, owner: str) -> str:
    """The notice channel of ``owner`` in the slot of ``tag``: scripts tell the owner
    there that a run it holds was cancelled (``run_cancel``). It rides the owner's
    wake-up connection, never the liveness one."""
    return f"{NOTICE_CHANNEL}{tag}:{owner}"


@dataclass(frozen=True, slots=True)
class OwnerChannel:
    """One owner's liveness channel in one queue's slot, as a script key."""

    channel: str  # CHANNEL  subscribed by the owner, never published to

    @classmethod
    @functools.lru_cache(maxsize=4096)  # one object each: a call packs its KEYS once
    def of(cls, tag: str, owner: str) -> OwnerChannel:
        return cls(owner_channel(tag, owner))


def handoff_channel(tag: str, owner: str) -> str:
    """The channel on which runs are handed to ``owner``'s parked pollers in the slot of
    ``tag`` (``lua/lib/handoff.lua``)."""
    return f"{HANDOFF_CHANNEL}{tag}:{owner}"


@dataclass(frozen=True, slots=True)
class HandoffChannel:
    """One owner's hand-off channel in one queue's slot, as a script key."""

    handoff: str  # CHANNEL  subscribed by the owner's waker; runs handed to it

    @classmethod
    @functools.lru_cache(maxsize=4096)  # one object each: a call packs its KEYS once
    def of(cls, tag: str, owner: str) -> HandoffChannel:
        return cls(handoff_channel(tag, owner))


@dataclass(frozen=True, slots=True)
class GroupKeys:
    """Keys of one consumer group of one stream partition; same hash slot as the stream.

    The group itself (its cursor and pending entries list) lives inside the stream key,
    as a Redis consumer group; these keys hold what Redis does not track."""

    group: str
    config: str  # HASH  the group's settings (ack_timeout_ms, max_deliver)
    due: str  # ZSET  entry id -> ms when it is to be delivered again (ack timeout, nack)
    deliveries: str  # HASH  entry id -> msgpack {o owner, c consumer, nk nacked}
    dead: str  # STREAM  dead letters of this group
    polls: str  # HASH  poll id -> msgpack hand-out (replay of lost group_read replies)
    poll_times: str  # ZSET  poll id -> time ms
    owners: str  # HASH  owner id -> ms since it is suspected gone (0: not suspected)
    owned: str  # ZSET  "<owner>\0<entry id>": the deliveries each owner holds
    batches: str  # ZSET  "<owner>\0<lo>\0<hi>\0<consumer>": entries read as one batch
    batch_due: str  # ZSET  batch -> ms when its entries still unacked are due again
    quarantine: str  # STREAM  entries set aside: headers that do not decode


@dataclass(frozen=True, slots=True)
class StreamKeys:
    """Keys of one stream partition; all in one hash slot."""

    namespace: str
    stream: str
    partition: int
    tag: str
    log: str  # STREAM  the records (fields: p payload, h msgpack headers)
    meta: str  # HASH  bytes: payload + header bytes held
    wake: str  # sharded pub/sub channel announcing records to read

    def group(self, group: str) -> GroupKeys:
        """The keys of one consumer group of this partition (validated name; cached)."""
        if not isinstance(group, str):
            check_name("group name", group)
        return _group_keys(self.log, group)


@functools.lru_cache(maxsize=4096)
def _group_keys(log: str, group: str) -> GroupKeys:
    check_name("group name", group)
    base = f"{log[: -len(':log')]}:g:{group}"
    return _keyed(GroupKeys, base, {"config": "cfg", "deliveries": "dlv"}, group=group)


def stream_keys(namespace: str, stream: str, partition: int = 0) -> StreamKeys:
    """Keys of ``stream``'s partition ``partition``. Partition 0 has the tag
    ``{<namespace>:<stream>}``; partition p > 0 has ``{<namespace>:<stream>/<p>}`` (its
    own slot) and the prefix ``flo:s<p>:``, so no two partitions of any streams share
    key names. Validated names; cached."""
    if not (isinstance(namespace, str) and isinstance(stream, str) and type(partition) is int):
        check_namespace(namespace)
        check_name("stream name", stream)
        check_count("partition", partition, 0)
    return _stream_keys(namespace, stream, partition)


@functools.lru_cache(maxsize=4096)
def _stream_keys(namespace: str, stream: str, partition: int) -> StreamKeys:
    check_namespace(namespace)
    check_name("stream name", stream)
    check_count("partition", partition, 0)
    if partition == 0:
        tag = f"{{{namespace}:{stream}}}"
        base = f"{PREFIX}:s:{tag}"
    else:
        tag = f"{{{namespace}:{stream}/{partition}}}"
        base = f"{PREFIX}:s{partition}:{tag}"
    return _keyed(
        StreamKeys, base, namespace=namespace, stream=stream, partition=partition, tag=tag
    )


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Keys of one plain queue (``client.queue``); all in one hash slot. Field names are
    the names the ``queue_*`` scripts give their KEYS."""

    namespace: str
    queue: str
    tag: str
    meta: str  # HASH  seq: the last sequence number (lua/lib/ids.lua), seq0, qseq; stat:*
    msgs: str  # HASH  seq -> msgpack record {p, t, d, m, o, x, q} (lua/lib/message.lua)
    bodies: str  # HASH  seq -> payload bytes
    ready: str  # ZSET  seq -> priority * 2^45 + queue order q (lowest first)
    leases: str  # ZSET  seq -> visibility deadline ms (delivered, not yet acked)
    dead: str  # ZSET  seq -> ms it was dead-lettered
    owners: str  # HASH  owner id -> ms since it is suspected gone (0: not suspected)
    owned: str  # ZSET  "<owner>\0<seq>" (score 0): the deliveries each owner holds
    wake: str  # sharded pub/sub channel announcing messages to take
    polls: str  # HASH  poll id -> msgpack hand-out (replay of lost dequeue replies)
    poll_times: str  # ZSET  poll id -> time ms
    quarantine: str  # STREAM  message records set aside (lua/lib/record.lua)


def queue_keys(namespace: str, queue: str) -> QueueKeys:
    """The keys of ``queue`` in ``namespace`` (validated names): tag ``{<namespace>:<queue>}``
    under the prefix ``flo:q:``, apart from actions and streams of the same name."""
    check_namespace(namespace)
    check_name("queue name", queue)
    tag = f"{{{namespace}:{queue}}}"
    return _keyed(QueueKeys, f"{PREFIX}:q:{tag}", namespace=namespace, queue=queue, tag=tag)


@dataclass(frozen=True, slots=True)
class DashboardKeys:
    """Keys of the dashboard of one namespace (``flo_redis.dashboard.guard``): its
    failed log-ins, those of one client address, and one session; all in one hash
    slot, under the tag ``{<namespace>}``. The session key is named by an HMAC of the
    browser's session id, never the id itself."""

    namespace: str
    failures: str  # ZSET  attempt id -> ms: the dashboard's failed log-ins
    address_failures: str  # ZSET  attempt id -> ms: one client address's failed log-ins
    session: str  # STRING  the session's start ms; expires at the session's end


def dashboard_keys(namespace: str, address: str = "-", session: str = "-") -> DashboardKeys:
    """The dashboard keys of ``namespace`` (validated) for one client ``address`` and
    one ``session`` (a hex digest): both are made by the dashboard, never taken from
    a request as they are."""
    check_namespace(namespace)
    base = f"{PREFIX}:dash:{{{namespace}}}"
    return DashboardKeys(
        namespace=namespace,
        failures=f"{base}:login-failures",
        address_failures=f"{base}:login-failures:{address}",
        session=f"{base}:session:{session}",
    )
