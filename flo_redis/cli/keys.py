"""``flo-redis keys ACTION``: an action's busiest flow keys (``FlowControl``)."""

from __future__ import annotations

import click

from flo_redis.actions.inspect import FlowKeys
from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._names import Names
from flo_redis.cli._render import say
from flo_redis.client import FloClient


def register(group: click.Group) -> None:
    group.add_command(keys)


@click.command("keys")
@ops.connection_options
@ops.json_option
@tables.wide_option
@click.argument("action")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option(
    "--sample",
    type=click.IntRange(1, 1000),
    default=500,
    show_default=True,
    help="Waiting runs looked at, from the head of the queue.",
)
def keys(url: str, namespace: str, as_json: bool, action: str, limit: int, sample: int) -> None:
    """ACTION's busiest flow keys: for each, its runs waiting (among the first SAMPLE
    waiting), running, held back by its concurrency limit, started in its rate window,
    and the end of a RateLimited pause."""

    async def read(client: FloClient) -> FlowKeys:
        return await client.action.flow_keys(action, limit=limit, sample=sample)

    found = ops.with_client(url, namespace, read, Names(action=action))
    if as_json:
        ops.print_json(found)
        return
    if not found.keys:
        say(f"no flow keys in {action!r}: no run of it names a flow_key now")
        return
    tables.console().print(
        tables.table(
            f"busiest flow keys of {action!r}",
            ["key", "waiting", "running", "held", "in window", "paused for"],
            [
                (
                    k.key,
                    k.waiting,
                    k.running,
                    k.held,
                    k.started,
                    ops.age(found.at_ms, k.paused_until_ms) if k.paused_until_ms else "",
                )
                for k in found.keys
            ],
            drop=["paused for", "in window"],
        )
    )
    say(f"waiting: among the first {found.looked_at} runs waiting in the queue")
