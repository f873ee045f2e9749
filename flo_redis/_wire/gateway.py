"""The script gateway: every Lua script as one typed, callable object.

A :class:`Script` is declared once, here, with the key classes of :mod:`flo_redis._wire.keys`
its KEYS come from and the parser of its reply shape (``replies.py`` and its ``*_replies``
siblings). At import, each header KEYS name is matched to a field of those classes — a
header naming a key no class has fails loudly — so a call passes key objects, never a list:

    reply = await ACTION_CLAIM(session, keys, [worker_id, owner, labels, n, poll, scan])

builds KEYS by header name, checks the ARGV count, holds the owner's liveness channel first
for scripts that record an owner (so work taken is never judged a gone owner's), sends it by
the session's :class:`~flo_redis._wire.runner.ScriptRunner` and answers the parsed reply. A
header's variadic tail (``KEYS[i..n] name``) is declared here and passed as ``tail=``.

``leads=`` (a test of the parsed reply) makes the next call of that script with keys of the
same hash tag, from the same client, one *led* by a ``TIME`` on the lane, so what it
publishes leaves Redis before its reply (:mod:`flo_redis._wire.lane`): ``action_invoke``
leads the invoke after one handed to a parked poller, and no other.

A script's ``{BAD_ARG, i}`` (an argument not what its header takes; nothing read or
written: ``lua/lib/checked.lua``) is raised here, for all alike, as
:class:`BadRequestError` (reason ``MALFORMED``, ``ran`` NO) naming ``ARGV[i]``.

A write declared ``durable=`` (its operation's name) takes ``durability=`` (else the
client's level): above PRIMARY the level's wait follows; its reply is parsed first (a
refusal wrote nothing), then a wait that fell short raises NotDurableError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import Any, Generic, Protocol, TypeVar

from flo_redis._wire import graph_replies as g
from flo_redis._wire import inspect_replies as ins
from flo_redis._wire import queue_replies as q
from flo_redis._wire import replies as r
from flo_redis._wire import schedule_replies as sch
from flo_redis._wire import stream_replies as sr
from flo_redis._wire import worker_replies as w
from flo_redis._wire.keys import (
    ActionKeys,
    BatchKeys,
    DashboardKeys,
    GroupKeys,
    HandoffChannel,
    NamespaceKeys,
    OwnerChannel,
    QueueKeys,
    StreamKeys,
)
from flo_redis._wire.lane import packed_head
from flo_redis._wire.library import SCRIPTS
from flo_redis._wire.lua import LuaSourceError
from flo_redis._wire.runner import Arg, ScriptRunner
from flo_redis._wire.status import Status, bad_arg
from flo_redis._wire.sync_runner import SyncScriptRunner
from flo_redis.durability import Durability, DurabilityLike, as_durability

R = TypeVar("R")

# Packed KEYS a script keeps, and leading hash tags a client keeps: past these, anew.
_HEADS_MAX = _LEADING_MAX = 1024
_BAD_ARG = int(Status.BAD_ARG)


class _Holder(Protocol):
    async def hold(self, tag: str) -> None: ...


class Session(Protocol):
    """What a script call needs: its runner, and liveness for owner-recording scripts."""

    @property
    def runner(self) -> ScriptRunner: ...

    @property
    def liveness(self) -> _Holder: ...


class Script(Generic[R]):
    """One Lua script: KEYS by header name from key objects, a typed reply."""

    __slots__ = (
        "_argc",
        "_durable",
        "_heads",
        "_leads",
        "_pair",
        "_parse",
        "_plan",
        "_single",
        "lua",
        "name",
        "records_owner",
    )

    def __init__(
        self,
        name: str,
        key_types: type | tuple[type, ...],
        parse: Callable[[Any, Any], R],
        *,
        records_owner: bool = False,
        tail: str | None = None,
        leads: Callable[[R], bool] | None = None,
        durable: str | None = None,
    ) -> None:
        self.lua = SCRIPTS[name]
        if self.lua.keys_tail != tail:
            raise LuaSourceError(
                f"{name}.lua: its header declares the KEYS tail {self.lua.keys_tail!r}, "
                f"the gateway expects {tail!r} (write it as 'KEYS[i..n] {tail}')"
            )
        self.name = name
        self.records_owner = records_owner
        self._parse = parse
        self._leads = leads
        self._durable = durable
        types = key_types if isinstance(key_types, tuple) else (key_types,)
        plan: list[tuple[int, str]] = []
        for key in self.lua.keys:
            owner = next(
                (i for i, t in enumerate(types) if key in {f.name for f in dataclasses.fields(t)}),
                None,
            )
            if owner is None:
                names = ", ".join(t.__name__ for t in types)
                raise LuaSourceError(f"{name}.lua: KEYS entry {key!r} is no field of {names}")
            plan.append((owner, key))
        self._plan = tuple(plan)
        self._single: Callable[[Any], Any] | None = None
        self._pair: Callable[[Any], Any] | None = None
        if len(types) == 1 and plan:
            # One key class (the common case): one C-level attrgetter builds the list.
            self._single = _getter([key for _, key in plan])
        elif len(types) == 2 and plan:
            # Two (a stream partition and its group): each class's keys in one getter,
            # then put in header order by one itemgetter; no Python loop per call.
            firsts = [key for i, key in plan if i == 0]
            seconds = [key for i, key in plan if i == 1]
            if firsts and seconds:
                g0, g1 = _getter(firsts), _getter(seconds)
                at = {("0", key): n for n, key in enumerate(firsts)}
                at |= {("1", key): len(firsts) + n for n, key in enumerate(seconds)}
                order = itemgetter(*(at[(str(i), key)] for i, key in plan))
                self._pair = lambda src: order(g0(src[0]) + g1(src[1]))
        self._argc = len(self.lua.argv)
        # id(key object), or a tuple's ids -> (it, its KEYS, their packed head): key objects
        # are cached where built, and an entry keeps them alive (their ids stay theirs).
        self._heads: dict[Any, tuple[Any, list[str], bytes]] = {}

    def keys(self, source: Any, tail: Sequence[str] = ()) -> list[str]:
        """The KEYS for ``source`` (a key object, or a tuple of them in order) and ``tail``."""
        if self._single is not None:
            keys = list(self._single(source))
        elif self._pair is not None and type(source) is tuple:
            keys = list(self._pair(source))
        else:
            sources = source if type(source) is tuple else (source,)
            keys = [getattr(sources[i], key) for i, key in self._plan]
        if tail:
            if self.lua.keys_tail is None:
                raise TypeError(f"{self.name} takes no KEYS tail")
            keys.extend(tail)
        return keys

    async def __call__(
        self,
        session: Session,
        source: Any,
        args: Sequence[Arg] = (),
        *,
        tail: Sequence[str] = (),
        durability: DurabilityLike | None = None,
    ) -> R:
        """Run the script atomically on ``session`` with the keys of ``source`` and
        ``args``; the parsed reply. :class:`TypeError` for a wrong ARGV count (nothing
        sent); :class:`BadRequestError` for an argument the script refused (nothing
        written); flo's errors for what Redis refused (the runner's); ``durability``:
        the write's level (module docstring)."""
        if tail:
            keys, head = self.keys(source, tail), b""
        else:
            keys, head = self._packed(source)
        self._check_args(args)
        primary = source[0] if type(source) is tuple else source
        if self.records_owner:
            await session.liveness.hold(primary.tag)
        runner = session.runner
        if self._durable is not None or durability is not None:
            level = self._level(runner.durability, durability)
            if level is not None:
                reply, answer = await runner.run(self.lua, keys, args, head, wait=level)
                return self._settled(reply, answer, level, args, primary)
        if self._leads is None:
            return self._parsed(await runner.run(self.lua, keys, args, head), args, primary)
        leading = runner.leading
        mark = (self.name, primary.tag)
        lead = mark in leading
        parsed = self._parsed(await runner.run(self.lua, keys, args, head, lead), args, primary)
        if self._leads(parsed) != lead:
            if lead:
                leading.discard(mark)
            elif len(leading) < _LEADING_MAX:
                leading.add(mark)
        return parsed

    def _level(self, default: Durability, given: DurabilityLike | None) -> Durability | None:
        """The level a call waits for; None for PRIMARY. Only a ``durable`` write takes one."""
        if self._durable is None:
            if given is not None:
                raise TypeError(f"{self.name} takes no durability level")
            return None
        level = default if given is None else as_durability(given)
        return level if level.waits else None

    def _settled(
        self, reply: Any, answer: Any, level: Durability, args: Sequence[Arg], primary: Any
    ) -> R:
        """The parsed reply of a call that ``level``'s wait followed (its ``answer``)."""
        parsed = self._parsed(reply, args, primary)
        missed = level.verdict(answer, self._durable or self.name)
        if missed is not None:
            raise missed
        return parsed

    def _parsed(self, reply: Any, args: Sequence[Arg], primary: Any) -> R:
        """The typed reply; :class:`BadRequestError` naming the argument the script
        refused as not what its header takes (module docstring)."""
        if reply[0] == _BAD_ARG:
            raise bad_arg(self.name, self.lua.argv, reply, args)
        return self._parse(reply, primary)

    def _packed(self, source: Any) -> tuple[list[str], bytes]:
        """The KEYS of a key object, or a tuple of them (by its members), packed once."""
        mark = tuple(map(id, source)) if type(source) is tuple else id(source)
        known = self._heads.get(mark)
        if known is not None:
            return known[1], known[2]
        keys = self.keys(source)
        if len(self._heads) >= _HEADS_MAX:
            self._heads.clear()
        self._heads[mark] = (source, keys, head := packed_head(keys))
        return keys, head

    def call_sync(
        self,
        runner: SyncScriptRunner,
        source: Any,
        args: Sequence[Arg] = (),
        *,
        tail: Sequence[str] = (),
        durability: DurabilityLike | None = None,
    ) -> R:
        """The same call through a blocking client's runner (``flo_redis.sync``); refused
        for scripts that record an owner (a blocking client holds no liveness). A blocking
        client has no lane, so ``leads`` does not apply."""
        if self.records_owner:
            raise TypeError(f"{self.name} records an owner; call it from FloClient")
        keys = self.keys(source, tail)
        self._check_args(args)
        primary = source[0] if type(source) is tuple else source
        level = self._level(runner.durability, durability)
        if level is not None:
            reply, answer = runner.run(self.lua, keys, args, wait=level)
            return self._settled(reply, answer, level, args, primary)
        return self._parsed(runner.run(self.lua, keys, args), args, primary)

    def _check_args(self, args: Sequence[Arg]) -> None:
        argc = len(args)
        if argc != self._argc and not (self.lua.variadic_argv and argc >= self._argc):
            raise TypeError(f"{self.name} takes {self._argc} args, got {argc}")


def _getter(names: list[str]) -> Callable[[Any], Any]:
    """A C-level getter of ``names`` that always answers a tuple."""
    get = attrgetter(*names)
    if len(names) > 1:
        return get
    return lambda src: (get(src),)


A = ActionKeys
B = BatchKeys
G = (StreamKeys, GroupKeys)
N = NamespaceKeys
S = StreamKeys
Q = QueueKeys

# Action queues, runs, and the graph between runs (flo_redis.actions.graph).
ACTION_REGISTER = Script("action_register", A, r.done)
ACTION_INVOKE = Script("action_invoke", A, r.invoked, leads=attrgetter("handed"), durable="invoke")
ACTION_INVOKE_MANY = Script("action_invoke_many", A, r.invoked_many, durable="invoke_many")
ACTION_DELETE = Script("action_delete", A, r.flag, tail="data_keys")
ACTION_CLAIM = Script(
    "action_claim", (ActionKeys, HandoffChannel), r.claim_reply, records_owner=True
)
ACTION_REAP = Script("action_reap", A, r.reaped)
ACTION_UNPARK = Script("action_unpark", A, r.number)
ACTION_RECLAIM = Script("action_reclaim", A, r.reclaimed, tail="channels")
ACTION_COUNTS = Script("action_counts", A, ins.counts)
ACTION_HISTORY = Script("action_history", A, ins.history_slots)
ACTION_FLOW_KEYS = Script("action_flow_keys", A, ins.flow_keys)
ACTION_RUNS = Script("action_runs", A, ins.run_rows)
ACTION_HELD = Script("action_held", A, w.held)
ACTION_FIND = Script("action_find", A, ins.found_rows)
ACTION_REQUEUE_FAILED = Script("action_requeue_failed", A, ins.bulk_step)
ACTION_PURGE = Script("action_purge", A, ins.bulk_step)
RUN_ACCEPT = Script("run_accept", A, r.reported_many)
RUN_TOUCH = Script("run_touch", A, r.reported)
RUN_COMPLETE = Script("run_complete", A, r.reported, durable="complete")
RUN_COMPLETE_MANY = Script("run_complete_many", A, r.reported_many, durable="complete")
RUN_FAIL = Script("run_fail", A, r.fail_reported, durable="fail")
RUN_RELEASE = Script("run_release", A, r.reported)
RUN_REQUEUE = Script("run_requeue", A, r.number)
RUN_CANCEL = Script("run_cancel", A, r.cancelled, tail="notice")
RUN_PROGRESS = Script("run_progress", A, r.reported)
GRAPH_TAKE = Script("graph_take", A, g.taken)
GRAPH_DONE = Script("graph_done", A, r.done)
GRAPH_DEPEND = Script("graph_depend", A, g.depended)
GRAPH_RESOLVE = Script("graph_resolve", A, g.resolved)
GRAPH_LIST = Script("graph_list", A, g.listed)
GRAPH_SUSPEND = Script("graph_suspend", A, r.number)
BATCH_OPEN = Script("batch_open", B, r.done)
BATCH_NOTE = Script("batch_note", B, r.done)
BATCH_SEAL = Script("batch_seal", B, r.done)
BATCH_TAKE = Script("batch_take", B, g.batch_taken)
BATCH_DONE = Script("batch_done", B, r.done)
BATCH_DUE = Script("batch_due", N, r.names)
SLOT_ACQUIRE = Script("slot_acquire", A, r.slot_taken, records_owner=True)
SLOT_RELEASE = Script("slot_release", A, r.number)
SCHEDULE_SET = Script("schedule_set", A, sch.set_reply)
SCHEDULE_REMOVE = Script("schedule_remove", A, r.done)
SCHEDULE_DUE = Script("schedule_due", A, sch.due_rows)
SCHEDULE_FIRE = Script("schedule_fire", A, sch.fired)
SCHEDULE_QUARANTINE = Script("schedule_quarantine", A, r.done)
SCHEDULE_LIST = Script("schedule_list", A, sch.listed)
SCHEDULE_PAUSE = Script("schedule_pause", A, sch.steered)
SCHEDULE_RESUME = Script("schedule_resume", A, sch.steered)
SCHEDULE_TRIGGER = Script("schedule_trigger", A, sch.fired)
SLOT_RECLAIM = Script("slot_reclaim", (ActionKeys, OwnerChannel), r.reclaimed)
ACTION_QUARANTINE_REPLAY = Script("action_quarantine_replay", A, r.done)

# The worker registry.
WORKER_REGISTER = Script("worker_register", N, r.done, records_owner=True)
WORKER_HEARTBEAT = Script("worker_heartbeat", N, r.number)
WORKER_POLL = Script("worker_poll", N, w.worker_gate)
WORKER_TALLY = Script("worker_tally", N, r.done)
WORKER_DRAIN = Script("worker_drain", N, r.names)
WORKER_DEREGISTER = Script("worker_deregister", N, r.done)
WORKER_LIST = Script("worker_list", N, w.worker_page)
WORKER_PRESENCE = Script("worker_presence", N, w.presence, tail="channels")
WORKER_QUARANTINE_REPLAY = Script("worker_quarantine_replay", N, r.done)
WORKER_CONFIGURE = Script("worker_configure", N, w.worker_settings)

# Streams.
STREAM_CREATE = Script("stream_create", S, r.number)
STREAM_APPEND = Script("stream_append", S, sr.appended, durable="stream append")
STREAM_READ = Script("stream_read", S, sr.stream_records)
STREAM_INFO = Script("stream_info", S, sr.stream_stats)
STREAM_TRIM = Script("stream_trim", S, sr.trimmed)

# Consumer groups (a stream partition's keys, then the group's).
GROUP_JOIN = Script("group_join", G, r.flag)
GROUP_LEAVE = Script("group_leave", G, r.flag)
GROUP_READ = Script("group_read", G, sr.delivered, records_owner=True)
GROUP_CLAIM = Script("group_claim", G, sr.claimed_page, records_owner=True)
GROUP_PENDING = Script("group_pending", G, sr.pending)
GROUP_ACK = Script("group_ack", G, sr.settled, durable="group ack")
GROUP_ACK_MANY = Script("group_ack_many", G, sr.settled_many, durable="group ack")
GROUP_NACK = Script("group_nack", G, sr.nack_settled)
GROUP_RECLAIM = Script("group_reclaim", G, r.reclaimed, tail="channels")
GROUP_REPLAY = Script("group_replay", G, sr.replayed)
GROUP_QUARANTINE = Script("group_quarantine", G, sr.set_aside_ids)
GROUP_QUARANTINE_REPLAY = Script("group_quarantine_replay", G, sr.reappended)

# Plain queues (client.queue).
QUEUE_ENQUEUE = Script("queue_enqueue", Q, r.number, durable="enqueue")
QUEUE_DEQUEUE = Script("queue_dequeue", Q, q.taken, records_owner=True)
QUEUE_ACK = Script("queue_ack", Q, q.per_seq, durable="queue ack")
QUEUE_NACK = Script("queue_nack", Q, q.per_seq)
QUEUE_PEEK = Script("queue_peek", Q, q.listed)
QUEUE_DLQ_LIST = Script("queue_dlq_list", Q, q.listed)
QUEUE_DLQ_REQUEUE = Script("queue_dlq_requeue", Q, q.per_seq)
QUEUE_RECLAIM = Script("queue_reclaim", Q, r.reclaimed, tail="channels")
QUEUE_QUARANTINE_REPLAY = Script("queue_quarantine_replay", Q, r.done)

# Any quarantine: its one key is read by name, so any key object with one may be passed.
QUARANTINE_DELETE = Script("quarantine_delete", A, r.number)

# The dashboard's log-ins and sessions (flo_redis.dashboard.guard).
DASHBOARD_LOGIN = Script("dashboard_login", DashboardKeys, r.number)
DASHBOARD_SESSION_TOUCH = Script("dashboard_session_touch", DashboardKeys, r.number)
DASHBOARD_SESSION_CLOSE = Script("dashboard_session_close", DashboardKeys, r.done)

# Every declared script by name (a test holds this equal to the files in ``lua/``).
ALL: dict[str, Script[Any]] = {s.name: s for s in globals().values() if isinstance(s, Script)}
