"""Redis ACL roles for flo-redis users: what each role may run and reach, as the
``ACL SETUSER`` line ``flo-redis acl ROLE [--namespace NS]`` prints (README, "Redis ACL";
threat model: docs/threat-model.md).

A role's commands are named one by one, never by category: the commands its scripts
call (read from the Lua sources it runs: scripts run with their caller's rights), the
few it sends itself, and the script commands (``EVALSHA``, ``EVAL``, ``FCALL``, and
``FUNCTION LIST`` for the check that the script library is the shipped one,
:mod:`flo_redis._wire.functions`). A category would also grant what flo-redis never sends:
``@write`` holds ``FUNCTION LOAD``, ``DELETE``, ``FLUSH`` and ``RESTORE`` (one user
could replace the code every other user runs), ``@read`` holds ``SCAN`` and
``RANDOMKEY`` (every namespace's key names), and a category grows with the server's
version.

- **read-only** sees its namespace: statuses, waits, counts, listings, stream reads. It
  is granted no command that writes or publishes. (Not ``%R~`` read-only key patterns:
  ``EVALSHA`` and ``FCALL`` declare their keys read-write, so those refuse every script
  call; the commands a script runs are held to the caller's rights one by one.)
- **producer** registers actions, invokes, cancels what it invoked, appends and
  enqueues, and schedules, besides what read-only does.
- **operator** steers besides: re-queues, purges and deletes, pauses, resumes and
  triggers schedules, drains and removes workers, trims streams, replays dead letters,
  reclaims by hand; the user of a dashboard started with ``--write`` (its log-ins and
  sessions).
- **worker** runs ``ActionWorker``, ``StreamWorker``, queue consumers and slots: it
  holds liveness channels, which no other role but admin may subscribe to (a channel
  kept subscribed keeps a dead worker's work from coming back), besides what a
  producer does (a handler's follow-up invokes).
- **admin** is server-wide: every namespace, the namespace registry, and loading and
  pruning the Functions library (``flo-redis scripts load|prune``).

Every role but admin may be narrowed to one namespace (``acl_patterns.acl_key_patterns``,
``acl_patterns.acl_channel_patterns``); narrowed, it does not reach the registry of namespaces,
which would tell it the other namespaces' names.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from flo_redis._wire.acl_patterns import acl_channel_patterns, acl_key_patterns
from flo_redis._wire.keys import HANDOFF_CHANNEL, LIVE_CHANNEL, NOTICE_CHANNEL
from flo_redis._wire.lua import LuaScript
from flo_redis._wire.runner import SCRIPTS
from flo_redis.errors import ValidationError

# Every role calls scripts: by function (once the library is checked), else by SHA.
_SCRIPTING = ("evalsha", "eval", "fcall", "function|list")
# Every role: INFO (the server's version on connecting, and a subscription connection's
# check that it reached a primary), TIME (the server's clock). Not CLIENT SETINFO, which
# redis-py sends on connecting and takes a refusal of: Redis 7.0 does not know it.
_CONNECTING = ("info", "time")
# Reads flo-redis sends outside scripts: registries (ZRANGE), run statuses and waits
# (HGET, ZSCORE), listings and liveness statistics (HMGET, HGETALL, HKEYS, HVALS), stream
# groups and dead letters (XINFO GROUPS, XLEN, XRANGE).
_READS = (
    *("zrange", "zscore", "hget", "hmget", "hgetall", "hkeys", "hvals"),
    *("xinfo|groups", "xlen", "xrange"),
)
# Waiting for runs and records (action.wait, blocking reads).
_LISTENING = ("ssubscribe", "sunsubscribe")

_READ_SCRIPTS = (
    "action_counts",
    "action_history",
    "action_flow_keys",
    "action_runs",
    "action_held",
    "action_find",
    "worker_list",
    "worker_presence",
    "stream_read",
    "stream_info",
    "group_pending",
    "queue_peek",
    "queue_dlq_list",
    "schedule_due",
    "schedule_list",
    "graph_list",
)
_PRODUCER_SCRIPTS = (
    *_READ_SCRIPTS,
    "action_register",
    "action_invoke",
    "action_invoke_many",
    "run_cancel",
    # Carrying the graph's messages: an invoke with depends_on, a cancel, a worker.
    "graph_take",
    "graph_done",
    "graph_depend",
    "graph_resolve",
    # Batches: opened, sealed and told of their runs by producers and workers alike.
    "batch_open",
    "batch_note",
    "batch_seal",
    "batch_take",
    "batch_done",
    "schedule_set",
    "schedule_remove",
    "stream_create",
    "stream_append",
    "queue_enqueue",
)
_OPERATOR_SCRIPTS = (
    *_PRODUCER_SCRIPTS,
    "action_delete",
    "action_requeue_failed",
    "action_purge",
    "action_reap",
    "action_reclaim",
    "run_requeue",
    "slot_reclaim",
    "worker_drain",
    "worker_deregister",
    "worker_configure",
    "stream_trim",
    "group_join",
    "group_leave",
    "group_replay",
    "group_reclaim",
    "queue_dlq_requeue",
    "queue_reclaim",
    "schedule_pause",
    "schedule_resume",
    "schedule_trigger",
    # A dashboard started with --write: its log-ins and sessions.
    "dashboard_login",
    "dashboard_session_touch",
    "dashboard_session_close",
)
_WORKER_SCRIPTS = (
    *_PRODUCER_SCRIPTS,
    "action_claim",
    "action_reap",
    "action_reclaim",
    "action_unpark",
    "batch_due",
    "graph_suspend",
    "run_touch",
    "run_complete",
    "run_complete_many",
    "run_fail",
    "run_release",
    "run_progress",
    "slot_acquire",
    "slot_release",
    "slot_reclaim",
    "schedule_fire",
    "worker_register",
    "worker_heartbeat",
    "worker_poll",
    "worker_tally",
    "worker_deregister",
    "worker_configure",
    "group_join",
    "group_leave",
    "group_read",
    "group_claim",
    "group_ack",
    "group_ack_many",
    "group_nack",
    "group_reclaim",
    "queue_dequeue",
    "queue_ack",
    "queue_nack",
    "queue_reclaim",
)
# What flo-redis writes outside scripts: the registries (ZADD; ZREM when an action is
# deleted), a cancel notice the script could not send itself (SPUBLISH); and the WAIT
# that follows a write at a replicated durability level (flo_redis.durability). WAITAOF
# (an fsynced level) is unknown to Redis 7.0: grant it by hand (+waitaof) on 7.2+.
_PRODUCER_WRITES = ("zadd", "spublish", "wait")
_OPERATOR_WRITES = (*_PRODUCER_WRITES, "zrem")
# A worker's liveness connections: named (CLIENT SETNAME), kept alive with PING.
_LIVENESS = ("client|setname", "ping")
# Only admin: loading and pruning the script library (flo-redis scripts load|prune).
_LIBRARY = ("function|load", "function|delete")
# Commands that write, or publish: never granted to read-only, even where one of its
# scripts holds one on a path that only tidies up (worker_list's removal of workers
# long silent, which a caller refused it leaves to the next).
_WRITES = frozenset(
    (
        *("hset", "hsetnx", "hdel", "hincrby", "zadd", "zrem", "zremrangebyscore", "del"),
        *("xadd", "xack", "xdel", "xtrim", "xclaim", "xreadgroup", "unlink", "spublish"),
        *("xgroup|create", "xgroup|createconsumer", "xgroup|delconsumer"),
        *("bitfield", "setrange", "pexpire"),
    )
)


@dataclass(frozen=True, slots=True)
class Role:
    """One role: the scripts its operations call, the commands it sends itself, and
    which of an owner's channels it reaches (module docstring)."""

    name: str
    scripts: tuple[str, ...]
    commands: tuple[str, ...]
    owner_channels: tuple[str, ...]
    read_only: bool = False
    server_wide: bool = False


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role(
            "admin",
            tuple(SCRIPTS),
            (*_OPERATOR_WRITES, *_LIVENESS, *_LIBRARY),
            (LIVE_CHANNEL, NOTICE_CHANNEL, HANDOFF_CHANNEL),
            server_wide=True,
        ),
        Role(
            "worker",
            _WORKER_SCRIPTS,
            (*_OPERATOR_WRITES, *_LIVENESS),
            (LIVE_CHANNEL, NOTICE_CHANNEL, HANDOFF_CHANNEL),
        ),
        Role("producer", _PRODUCER_SCRIPTS, _PRODUCER_WRITES, (NOTICE_CHANNEL, HANDOFF_CHANNEL)),
        Role("operator", _OPERATOR_SCRIPTS, _OPERATOR_WRITES, (NOTICE_CHANNEL, HANDOFF_CHANNEL)),
        Role("read-only", _READ_SCRIPTS, (), (), read_only=True),
    )
}

_CALL = re.compile(r"(?:redis\.p?call\(\s*|\{\s*)'([A-Z_]+)'(?:\s*,\s*'([A-Z]+)')?")
_WITH_SUBCOMMAND = {"PUBSUB", "XINFO", "XGROUP"}


def script_commands(script: LuaScript) -> frozenset[str]:
    """The commands ``script`` may send (its flattened source: ``redis.call('CMD'`` and
    the command tables it unpacks), as ACL rules name them (``xgroup|create``)."""
    found = set()
    for match in _CALL.finditer(script.source):
        command, sub = match.groups()
        if command in _WITH_SUBCOMMAND and sub:
            command = f"{command}|{sub}"
        found.add(command.lower())
    return frozenset(found)


@functools.cache
def commands(role: str) -> tuple[str, ...]:
    """Every command ``role`` is granted, sorted."""
    spec = _role(role)
    granted = set(_SCRIPTING) | set(_CONNECTING) | set(_READS) | set(spec.commands)
    for name in spec.scripts:
        granted |= script_commands(SCRIPTS[name])
    if spec.read_only:
        granted -= _WRITES
    if spec.read_only or spec.owner_channels or spec.server_wide:
        granted |= set(_LISTENING)
    return tuple(sorted(granted))


def rules(role: str, namespace: str | None = None) -> tuple[str, ...]:
    """The ACL rules of ``role`` (over ``namespace`` only, when given): key patterns,
    channel patterns, then commands; what follows ``reset on >password``."""
    spec = _role(role)
    if spec.server_wide and namespace is not None:
        raise ValidationError(
            f"the {role} role is server-wide (it loads the script library every namespace "
            "runs); give it no namespace"
        )
    return (
        *("~" + p for p in acl_key_patterns(namespace)),
        *("&" + p for p in acl_channel_patterns(namespace, spec.owner_channels)),
        *("+" + c for c in commands(role)),
    )


def setuser_line(
    role: str, namespace: str | None = None, user: str | None = None, password: str | None = None
) -> str:
    """The ``ACL SETUSER`` line that makes ``user`` (default ``flo-<role>``) a ``role``
    user, for redis-cli: it starts with ``reset``, so running it again (after an upgrade)
    leaves exactly these rights. ``password`` defaults to a placeholder."""
    _role(role)
    name = user or f"flo-{role}"
    secret = password or f"{role.upper()}-PASSWORD"
    words = ["ACL", "SETUSER", name, "reset", "on", f">{secret}", *rules(role, namespace)]
    return " ".join(_quoted(w) for w in words)


def _quoted(word: str) -> str:
    """``word`` as one argument for redis-cli (quoted only when it must be)."""
    if word and not re.search(r"[\s\"'\\]", word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _role(role: str) -> Role:
    spec = ROLES.get(role)
    if spec is None:
        raise ValidationError(f"unknown role {role!r}; the roles are {', '.join(ROLES)}")
    return spec


__all__ = ["ROLES", "Role", "commands", "rules", "script_commands", "setuser_line"]
