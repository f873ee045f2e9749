"""``flo-redis quarantine list|replay|delete``: records set aside because they do not
decode (:mod:`flo_redis.quarantine`), in one action's, plain queue's, consumer group's
or the namespace's worker registry's quarantine."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._names import NAMESPACE, Names
from flo_redis.cli._render import say
from flo_redis.client import FloClient
from flo_redis.quarantine import (
    ActionQuarantine,
    GroupQuarantine,
    Quarantine,
    QuarantinePage,
    QueueQuarantine,
    WorkerQuarantine,
)


def register(group: click.Group) -> None:
    group.add_command(quarantine)


# The options that name a quarantine: the parameters of where(), in its order.
_WHERE = ("action", "queue", "stream", "group", "partition", "workers")


def where_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Which quarantine: ``--action``, ``--queue``, ``--stream`` with ``--group`` (and
    ``--partition``), or ``--workers``, exactly one; the command gets it as ``scope``."""

    @functools.wraps(command)
    def with_scope(*args: Any, **kwargs: Any) -> Any:
        named = {name: kwargs.pop(name) for name in _WHERE}
        return command(*args, scope=where(**named), **kwargs)

    for option in reversed(
        (
            click.option("--action", help="An action's quarantine: runs, schedules, slots."),
            click.option("--queue", help="A plain queue's quarantine: messages."),
            click.option("--stream", help="With --group: a consumer group's quarantine."),
            click.option("--group", help="The consumer group of --stream."),
            click.option(
                "--partition",
                type=click.IntRange(0),
                default=0,
                show_default=True,
                help="The partition of --stream.",
            ),
            click.option("--workers", is_flag=True, help="The worker registry's quarantine."),
        )
    ):
        with_scope = option(with_scope)
    return with_scope


def where(
    action: str | None,
    queue: str | None,
    stream: str | None,
    group: str | None,
    partition: int,
    workers: bool,
) -> Quarantine:
    """The quarantine the options name; a usage error (exit 2) unless exactly one."""
    chosen = [bool(action), bool(queue), bool(stream or group), workers]
    if sum(chosen) != 1:
        raise click.UsageError(
            "name one quarantine: --action NAME, --queue NAME, --stream NAME --group NAME, "
            "or --workers"
        )
    if action:
        return ActionQuarantine(action)
    if queue:
        return QueueQuarantine(queue)
    if stream or group:
        if not (stream and group):
            raise click.UsageError("--stream and --group go together")
        return GroupQuarantine(stream, group, partition)
    return WorkerQuarantine()


def names(scope: Quarantine) -> Names:
    """What must exist before ``scope`` is read: its action, or its stream and group; a
    plain queue has no registry, so neither it nor its namespace is looked up."""
    if isinstance(scope, ActionQuarantine):
        return Names(action=scope.action)
    if isinstance(scope, GroupQuarantine):
        return Names(stream=scope.stream, group=scope.group)
    if isinstance(scope, QueueQuarantine):
        return Names(namespace=False)
    return NAMESPACE


def _size(data: bytes) -> str:
    return f"{len(data)} B"


@click.group("quarantine")
def quarantine() -> None:
    """See, replay and delete records set aside because they do not decode."""


@ops.list_command(quarantine)
@where_options
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--after", default=None, help="Continue after this entry id.")
def list_quarantine(
    url: str, namespace: str, as_json: bool, scope: Quarantine, limit: int, after: str | None
) -> None:
    """The records set aside in one quarantine, oldest first: what each was, the id it
    was stored under and why it was set aside."""

    async def read(client: FloClient) -> tuple[int, int, QuarantinePage]:
        page = await client.quarantine.list(scope, limit=limit, after=after)
        return await client.server_time_ms(), await client.quarantine.count(scope), page

    now_ms, total, page = ops.with_client(url, namespace, read, names(scope))
    if as_json:
        ops.print_json({"count": total, "records": page.records, "cursor": page.cursor})
        return
    tables.console().print(
        tables.table(
            f"Set aside ({total} in all)",
            ["id", "kind", "key", "set aside", "record", "payload", "why"],
            [
                (
                    r.id,
                    r.kind,
                    r.key,
                    ops.age(r.at_ms, now_ms) + " ago",
                    _size(r.record),
                    _size(r.payload),
                    r.reason,
                )
                for r in page.records
            ],
            wrap=["key", "why"],
            drop=["payload", "record", "kind"],
        )
    )
    if page.cursor is not None:
        say(f"more: --after {page.cursor}")


@quarantine.command("replay")
@ops.connection_options
@ops.json_option
@where_options
@click.argument("entry_id")
@click.option("--record-hex", default=None, help="Put back these bytes (hex) instead.")
@click.option(
    "--record-file",
    type=click.File("rb"),
    default=None,
    help="Put back the bytes of this file instead ('-': stdin).",
)
def replay(
    url: str,
    namespace: str,
    as_json: bool,
    scope: Quarantine,
    entry_id: str,
    record_hex: str | None,
    record_file: Any,
) -> None:
    """Put ENTRY_ID back where it was set aside from: a run waits again, a message is
    ready again, a schedule is due at its next occurrence, a stream entry is appended
    again, a worker is registered again. With the bytes set aside, or fixed ones
    (--record-hex / --record-file; for a stream entry, its headers: an empty file
    appends it without headers)."""
    if record_hex is not None and record_file is not None:
        raise click.UsageError("give --record-hex or --record-file, not both")
    record: bytes | None = None
    if record_hex is not None:
        try:
            record = bytes.fromhex(record_hex)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--record-hex") from exc
    elif record_file is not None:
        record = record_file.read()

    async def run(client: FloClient) -> None:
        await client.quarantine.replay(scope, entry_id, record)

    ops.with_client(url, namespace, run, names(scope))
    ops.report(as_json, f"put back {entry_id}", put_back=entry_id)


@quarantine.command("delete")
@ops.connection_options
@ops.json_option
@ops.yes_option
@where_options
@click.argument("entry_ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Delete every record of the quarantine.")
def delete(
    url: str,
    namespace: str,
    as_json: bool,
    yes: bool,
    scope: Quarantine,
    entry_ids: tuple[str, ...],
    every: bool,
) -> None:
    """Delete records set aside, for good: the ENTRY_IDS named, or --all."""
    if bool(entry_ids) == every:
        raise click.UsageError("name the ENTRY_IDS to delete, or --all")

    async def run(client: FloClient) -> int:
        ids = list(entry_ids)
        if every:
            total = await client.quarantine.count(scope)
            if total == 0:
                return 0
            ops.confirm(yes, f"Delete all {total} records set aside? This cannot be undone.")
            deleted = 0
            while page := (await client.quarantine.list(scope, limit=1000)).records:
                deleted += await client.quarantine.delete(scope, [r.id for r in page])
            return deleted
        ops.confirm(yes, f"Delete {len(ids)} record(s) set aside? This cannot be undone.")
        return await client.quarantine.delete(scope, ids)

    deleted = ops.with_client(url, namespace, run, names(scope))
    ops.report(as_json, f"deleted {deleted} record(s)", deleted=deleted)
