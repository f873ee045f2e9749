"""``flo-redis batches show``: one batch as an operator reads it
(:mod:`flo_redis.ops.batch_view`): its counts, whether it is sealed, how it ended, its
parent batch, the callbacks made, and the first page of its members with the state of
each; ``--json`` for scripts."""

from __future__ import annotations

import click

from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._render import say
from flo_redis.client import FloClient
from flo_redis.ops.batch_view import BatchView, batch_view


def register(group: click.Group) -> None:
    group.add_command(batches)


@click.group("batches")
def batches() -> None:
    """Show batches of runs (docs/flows.md, "Batches")."""


@batches.command("show")
@ops.connection_options
@ops.json_option
@tables.wide_option
@click.argument("batch_id")
def show(url: str, namespace: str, as_json: bool, batch_id: str) -> None:
    """BATCH_ID's counts, seal, outcome, parent batch and callbacks made, and the first
    page of its members (runs and nested batches) with the state of each."""

    async def read(client: FloClient) -> BatchView:
        return await batch_view(client, batch_id)

    view = ops.with_client(url, namespace, read)
    if as_json:
        ops.print_json(view.as_json())
        return
    draw = tables.console()
    rows = [row for row in view.facts() if row[1]]
    draw.print(tables.table(f"batch {batch_id}", ["field", "value"], rows))
    say()
    say(f"members: {view.members_note()}")
    if view.members:
        members = [(m.member_id, m.kind, m.state) for m in view.members]
        draw.print(tables.table("", ["member", "kind", "state"], members))
