"""Telling operators about stored records that do not decode, once each.

A script that meets a record it cannot use sets it aside into a quarantine stream and
lists it in its reply (``lua/lib/record.lua``), exactly once, since the record is gone
from where it was: the caller logs it here at WARNING, with how to see it again. A read
that cannot change anything (a listing, a plain stream read) meets such a record each
time it reads it: it logs it here once per process, through a bounded memory of what it
told.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger("flo_redis.quarantine")

TOLD_MAX = 4096
"""Unreadable records a process remembers having told (then it forgets them all)."""

_told: set[tuple[str, ...]] = set()


@dataclass(frozen=True, slots=True)
class SetAside:
    """A stored record a script set aside into its quarantine because it does not
    decode (``lua/lib/record.lua``): what it was (``run``, ``message``, ``worker``,
    ``schedule``, ``slot``, ``entry``), the id it was stored under, and why."""

    kind: str
    key: str
    reason: str


def scope_of_action(namespace: str, action: str) -> tuple[str, str]:
    """How an action's quarantine is named in a log line, and the CLI options that
    list it."""
    return (
        f"action {action!r} in namespace {namespace!r}",
        f"--action {action} --namespace {namespace}",
    )


def scope_of(keys: object) -> tuple[str, str]:
    """:func:`scope_of_action` for the keys a script ran on: an action's, a plain
    queue's (``queue``), or a stream partition's with its group's (a pair)."""
    if isinstance(keys, tuple):
        part, group = keys[0], keys[1]
        where = f"group {group.group!r} of stream {part.stream!r}"
        options = f"--stream {part.stream} --group {group.group}"
        if part.partition:
            where += f" (partition {part.partition})"
            options += f" --partition {part.partition}"
        return f"{where} in namespace {part.namespace!r}", f"{options} --namespace {part.namespace}"
    namespace = getattr(keys, "namespace", "")
    queue = getattr(keys, "queue", None)
    if queue is not None:
        return (
            f"queue {queue!r} in namespace {namespace!r}",
            f"--queue {queue} --namespace {namespace}",
        )
    action = getattr(keys, "action", None)
    if action is not None:
        return scope_of_action(namespace, action)
    return f"worker registry of namespace {namespace!r}", f"--workers --namespace {namespace}"


def warn_set_aside(where: tuple[str, str], aside: Iterable[SetAside]) -> None:
    """Log each record a script set aside, at WARNING (the script lists each once)."""
    label, options = where
    for item in aside:
        log.warning(
            "%s: %s %r does not decode (%s); set aside in quarantine, where the rest "
            "goes on without it. See it, then replay or delete it: flo-redis quarantine "
            "list %s",
            label,
            item.kind,
            item.key,
            item.reason,
            options,
        )


def warn_unreadable(key: tuple[str, ...], message: str) -> None:
    """Log ``message`` at WARNING the first time this process meets the unreadable
    record ``key`` names (in a read that cannot set it aside)."""
    if key in _told:
        return
    if len(_told) >= TOLD_MAX:
        _told.clear()
    _told.add(key)
    log.warning("%s", message)


def warn_run_refused(namespace: str, action: str, run_id: str) -> None:
    """Log a run a script refused with BAD_RECORD (it set the run's record aside)."""
    aside = SetAside("run", run_id, "its stored record does not decode")
    warn_set_aside(scope_of_action(namespace, action), [aside])


__all__ = [
    "SetAside",
    "log",
    "scope_of",
    "scope_of_action",
    "warn_run_refused",
    "warn_set_aside",
    "warn_unreadable",
]
