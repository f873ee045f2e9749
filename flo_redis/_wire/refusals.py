"""The errors an action or run script's refusal becomes, naming the action (and run) and
what to do: an action not registered, an action whose stored settings do not parse, a
run not found or set aside; any other status as ``<what>: refused (<STATUS>)``. Each is
raised after the script answered, and the script changed nothing (but for a record it
set aside)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from flo_redis._wire.aside import warn_run_refused
from flo_redis._wire.status import Status, refusal


class ActionNamed(Protocol):
    """What a refusal message names of an action's keys (:class:`keys.ActionKeys` is one)."""

    @property
    def action(self) -> str: ...

    @property
    def namespace(self) -> str: ...


def not_registered(keys: ActionNamed) -> Exception:
    """The refusal for an action that is not registered."""
    return refusal(
        Status.NO_ACTION,
        f"action {keys.action!r} is not registered in namespace {keys.namespace!r}; "
        "register it first",
    )


def bad_settings(keys: ActionNamed) -> Exception:
    """The refusal for an action whose stored settings do not parse (``lua/lib/action.lua``):
    it takes no new runs and hands out none until registered again."""
    return refusal(
        Status.BAD_SETTING,
        f"action {keys.action!r} in namespace {keys.namespace!r} has stored settings that "
        "do not parse (written by hand, or by another version); register it again "
        "(action.register, or start a worker that serves it)",
    )


def raise_refusal(
    status: int, keys: ActionNamed, what: str, messages: Mapping[int, str] | None = None
) -> None:
    """Raise the typed error for an action script's refusal ``status`` (nothing for OK):
    an unregistered action as :func:`not_registered`, a status in ``messages`` with its
    message, any other as ``<what>: refused (<STATUS>)``."""
    if status == Status.OK:
        return
    if status == Status.NO_ACTION:
        raise not_registered(keys)
    if status == Status.BAD_SETTING:
        raise bad_settings(keys)
    message = (messages or {}).get(status)
    raise refusal(status, message or f"{what}: refused ({Status(status).name})")


def raise_run_refusal(status: int, keys: ActionNamed, run_id: str) -> None:
    """Raise the typed error for a run script's refusal (nothing for OK). BAD_RECORD
    (the script set the run's record aside) is logged at WARNING, once: the run is gone
    from the queue, so any later call about it is NOT_FOUND."""
    where = f"of action {keys.action!r} not found in namespace {keys.namespace!r}"
    if status == Status.BAD_RECORD:
        warn_run_refused(keys.namespace, keys.action, run_id)
    raise_refusal(
        status,
        keys,
        f"run {run_id!r}",
        {
            Status.NOT_FOUND: f"run {run_id!r} {where}",
            Status.BAD_RECORD: f"run {run_id!r} of action {keys.action!r}: its stored "
            "record does not decode; it was set aside into the action's quarantine "
            f"(flo-redis quarantine list --action {keys.action} --namespace "
            f"{keys.namespace})",
        },
    )
