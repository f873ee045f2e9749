"""``flo-redis streams list|info`` and ``flo-redis dead-letters list|replay``."""

from __future__ import annotations

import asyncio

import click

from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._names import Names
from flo_redis.client import FloClient
from flo_redis.errors import ValidationError
from flo_redis.streams import DeadLetter, StreamDeadLetterOptions
from flo_redis.streams.inspect import GroupCounts
from flo_redis.types import StreamID, StreamInfo


def register(group: click.Group) -> None:
    group.add_command(streams)
    group.add_command(dead_letters)


def _id(sid: StreamID) -> str:
    return f"{sid.timestamp_ms}-{sid.sequence}"


def _parse_id(text: str) -> StreamID:
    ms, _, seq = text.partition("-")
    if not ms.isdigit() or not (seq or "0").isdigit():
        raise click.BadParameter(f"{text!r} is not a stream id like 1700000000000-0")
    return StreamID(int(ms), int(seq or 0))


def _groups_table(title: str, groups: tuple[GroupCounts, ...]) -> object:
    return tables.table(
        title,
        ["stream", "group", "lag", "pending", "consumers", "dead letters", "set aside"],
        [
            (g.stream, g.group, "?" if g.lag is None else g.lag, g.pending, g.consumers,
             g.dead_letters, g.quarantined)
            for g in groups
        ],
        drop=["set aside", "consumers"],
    )  # fmt: skip


@click.group("streams")
def streams() -> None:
    """See the namespace's streams and their consumer groups."""


@ops.list_command(streams)
def list_streams(url: str, namespace: str, as_json: bool) -> None:
    """Every stream: partitions, records, bytes and its groups' lag."""

    async def read(client: FloClient) -> list[tuple[str, StreamInfo, tuple[GroupCounts, ...]]]:
        names = await client.stream.list()
        infos = await asyncio.gather(*(client.stream.info(n) for n in names))
        groups = await asyncio.gather(*(client.stream.groups(n) for n in names))
        return list(zip(names, infos, groups, strict=True))

    found = ops.with_client(url, namespace, read)
    if as_json:
        ops.print_json(
            [{"stream": name, "info": info, "groups": groups} for name, info, groups in found]
        )
        return
    tables.console().print(
        tables.table(
            f"Streams in {namespace!r}",
            ["stream", "partitions", "records", "bytes", "groups", "lag", "dead letters"],
            [
                (
                    name,
                    info.partition_count,
                    info.count,
                    info.bytes_size,
                    len(groups),
                    sum(g.lag or 0 for g in groups),
                    sum(g.dead_letters for g in groups),
                )
                for name, info, groups in found
            ],
            drop=["bytes", "partitions"],
        )
    )


@streams.command("info")
@ops.connection_options
@ops.json_option
@tables.wide_option
@click.argument("stream")
def info(url: str, namespace: str, as_json: bool, stream: str) -> None:
    """STREAM's size and bounds, and every group's lag, pending, consumers and dead
    letters."""

    async def read(client: FloClient) -> tuple[StreamInfo, tuple[GroupCounts, ...]]:
        return await client.stream.info(stream), await client.stream.groups(stream)

    stream_info, groups = ops.with_client(url, namespace, read, Names(stream=stream))
    if as_json:
        ops.print_json({"stream": stream, "info": stream_info, "groups": groups})
        return
    out = tables.console()
    out.print(
        tables.table(
            f"stream {stream!r}",
            ["partitions", "records", "bytes", "first id", "last id"],
            [
                (
                    stream_info.partition_count,
                    stream_info.count,
                    stream_info.bytes_size,
                    _id(stream_info.first_id),
                    _id(stream_info.last_id),
                )
            ],
        )
    )
    out.print(_groups_table("groups", groups))


@click.group("dead-letters")
def dead_letters() -> None:
    """See and replay the records a consumer group gave up on."""


@ops.list_command(dead_letters)
@click.argument("stream")
@click.argument("group")
@click.option("--count", type=click.IntRange(1, 1000), default=20, show_default=True)
def list_dead(url: str, namespace: str, as_json: bool, stream: str, group: str, count: int) -> None:
    """GROUP's oldest dead letters on STREAM: why and when each was given up."""

    async def read(client: FloClient) -> tuple[int, list[DeadLetter]]:
        letters = await client.stream.dead_letters(
            stream, group, StreamDeadLetterOptions(count=count)
        )
        return await client.server_time_ms(), letters

    now_ms, letters = ops.with_client(url, namespace, read, Names(stream=stream, group=group))
    if as_json:
        ops.print_json(letters)
        return
    tables.console().print(
        tables.table(
            f"dead letters of {group!r} on {stream!r}",
            ["id", "partition", "record", "reason", "deliveries", "consumer", "dead", "bytes"],
            [
                (
                    _id(d.id),
                    d.partition,
                    _id(d.original_id),
                    d.reason,
                    d.delivery_count,
                    d.consumer,
                    ops.age(d.dead_at_ms, now_ms) + " ago",
                    len(d.payload),
                )
                for d in letters
            ],
            wrap=["reason"],
            drop=["bytes", "record", "consumer", "deliveries"],
        )
    )


@dead_letters.command("replay")
@ops.connection_options
@ops.json_option
@ops.yes_option
@click.argument("stream")
@click.argument("group")
@click.option("--count", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Replay the oldest COUNT dead letters.")  # fmt: skip
@click.option("--id", "ids", multiple=True, help="Replay only this dead letter (repeatable).")
@click.option("--partition", type=click.IntRange(0), default=None)
def replay(
    url: str,
    namespace: str,
    as_json: bool,
    yes: bool,
    stream: str,
    group: str,
    count: int,
    ids: tuple[str, ...],
    partition: int | None,
) -> None:
    """Append GROUP's dead letters back to STREAM as new records, removing them from the
    dead letters; every group of the stream reads them again."""
    named = [_parse_id(i) for i in ids] or None
    what = f"{len(ids)} named" if named else f"up to {count}"
    ops.confirm(yes, f"Replay {what} dead letters of {group!r} onto {stream!r}?")

    async def run(client: FloClient) -> list[StreamID]:
        try:
            return await client.stream.replay_dead_letters(
                stream, group, ids=named, count=count, partition=partition
            )
        except ValidationError as exc:
            raise click.BadParameter(str(exc)) from exc

    done = ops.with_client(url, namespace, run, Names(stream=stream, group=group))
    ops.report(
        as_json,
        f"replayed {len(done)} dead letter(s) of {group} onto {stream}",
        stream=stream,
        group=group,
        replayed=len(done),
        ids=[_id(i) for i in done],
    )
