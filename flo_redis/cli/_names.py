"""The names an operator typed, held against what exists before a command reads or writes.

Reading a namespace, action, stream or group that is not there is no error to Redis: it
answers with nothing, and a typo would print an empty table and exit 0. So every command
that is given such a name first looks it up in the registries (:mod:`flo_redis.ops.discovery`)
and, when it is not there, exits 1 naming what it looked for, where, and what is there
that looks like it: "no action 'grete' in namespace 'myapp' (did you mean 'greet'?)".

A namespace is known once something registered an action or worker or made a stream in
it; a worker, while it is registered. A user narrowed to one namespace may not read the
registry of namespaces; for them the namespace is taken as given (their actions, streams
and workers are still checked).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

import click

from flo_redis.client import FloClient
from flo_redis.errors import PermissionDeniedError
from flo_redis.ops.discovery import action_names, all_workers, namespaces, stream_names

# How many names are listed when none looks like the one typed.
_LISTED = 8


class UnknownNameError(click.ClickException):
    """A name that is not there: printed on stderr, exit 1."""


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """ " (did you mean 'x'?)" for the closest of ``known`` to ``name`` (difflib), or ""."""
    close = difflib.get_close_matches(name, [k for k in known if k != name], n=3)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def unknown(kind: str, name: str, where: str, known: Sequence[str]) -> UnknownNameError:
    """ "no <kind> '<name>'<where>", then the closest of ``known``, else what there is,
    else that there is none."""
    hint = did_you_mean(name, known)
    if not hint and known:
        more = ", ..." if len(known) > _LISTED else ""
        hint = f"; there are: {', '.join(known[:_LISTED])}{more}"
    elif not hint:
        hint = f"; there is no {kind} yet"
    return UnknownNameError(f"no {kind} {name!r}{where}{hint}")


@dataclass(frozen=True, slots=True)
class Names:
    """What a command was given to look at, besides its namespace. ``namespace=False``
    for a command whose namespace may hold nothing registered yet (a plain queue's
    quarantine: queues have no registry)."""

    action: str | None = None
    stream: str | None = None
    group: str | None = None
    worker: str | None = None
    namespace: bool = True

    async def check(self, client: FloClient) -> None:
        """Raise :class:`UnknownNameError` for the first name that is not there: the
        namespace, then the action, the stream, the group of the stream, the worker."""
        ns = client.namespace
        if self.namespace:
            await _check_namespace(client, ns)
        where = f" in namespace {ns!r}"
        if self.action is not None:
            actions = await action_names(client)
            if self.action not in actions:
                raise unknown("action", self.action, where, actions)
        if self.stream is not None:
            streams = await stream_names(client)
            if self.stream not in streams:
                raise unknown("stream", self.stream, where, streams)
        if self.stream is not None and self.group is not None:
            groups = [g.group for g in await client.stream.groups(self.stream)]
            if self.group not in groups:
                raise unknown("group", self.group, f" of stream {self.stream!r}{where}", groups)
        if self.worker is not None:
            workers = [w.worker_id for w in await all_workers(client)]
            if self.worker not in workers:
                raise unknown("worker", self.worker, where, workers)


async def _check_namespace(client: FloClient, namespace: str) -> None:
    try:
        known = await namespaces(client)
    except PermissionDeniedError:
        return  # a user narrowed to their namespace (module docstring)
    if namespace not in known:
        raise unknown("namespace", namespace, "", known)


NAMESPACE = Names()
"""Only the namespace: what a command that names nothing else checks."""
