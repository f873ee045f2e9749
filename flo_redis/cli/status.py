"""``flo-redis status``: every action, worker and stream group of a namespace at a glance."""

from __future__ import annotations

import asyncio
import contextlib

import click
from rich.console import Group
from rich.live import Live
from rich.text import Text

from flo_redis.cli._ops import (
    age,
    connection_options,
    json_option,
    print_json,
    with_client,
    worker_figures,
)
from flo_redis.cli._options import Seconds
from flo_redis.cli._tables import console, table, wide_option
from flo_redis.client import FloClient
from flo_redis.ops.discovery import Overview, health, overview

SPARK = "▁▂▃▄▅▆▇█"
SPARK_MINUTES = 15


def sparkline(values: tuple[int, ...]) -> str:
    """The last minutes' counts as block characters (the highest minute full height)."""
    recent = values[-SPARK_MINUTES:]
    top = max(recent, default=0)
    if top == 0:
        return SPARK[0] * len(recent)
    return "".join(SPARK[min(v * (len(SPARK) - 1) // top, len(SPARK) - 1)] for v in recent)


def render(ov: Overview) -> Group:
    """The overview as three tables: actions, workers (with their figures below),
    stream groups."""
    actions = table(
        f"Actions in {ov.namespace!r}",
        ["action", "pending", "delayed", "running", "completed", "failed", "timed out",
         "on parents", "set aside", "done/h", "failed/h", f"done/min ({SPARK_MINUTES}m)"],
        [
            (a.action, a.pending, a.delayed, a.running, a.completed, a.failed, a.timed_out,
             a.awaiting_parents, a.quarantined, a.completed_last_hour, a.failed_last_hour,
             sparkline(a.completed_per_minute))
            for a in ov.actions
        ],
        drop=["set aside", "failed/h", "done/h", "timed out", "on parents",
              f"done/min ({SPARK_MINUTES}m)"],
    )  # fmt: skip
    workers = table(
        "Workers" + (
            f" ({ov.workers_quarantined} record(s) set aside: flo-redis quarantine list "
            "--workers)" if ov.workers_quarantined else ""
        ),
        ["worker", "status", "load", "completed", "failed", "heartbeat", "actions"],
        [
            (w.worker_id, health(w), f"{w.current_load}/{w.max_concurrency}",
             w.tasks_completed, w.tasks_failed, age(w.last_heartbeat_ms, ov.at_ms) + " ago",
             ", ".join(w.task_types))
            for w in ov.workers
        ],
        wrap=["actions"],
        drop=["failed", "completed", "heartbeat"],
    )  # fmt: skip
    groups = table(
        "Stream groups",
        ["stream", "group", "lag", "pending", "consumers", "dead letters", "set aside"],
        [
            (g.stream, g.group, "?" if g.lag is None else g.lag, g.pending, g.consumers,
             g.dead_letters, g.quarantined)
            for g in ov.groups
        ],
        drop=["set aside", "consumers"],
    )  # fmt: skip
    return Group(actions, workers, Text(worker_figures(ov.worker_summary)), groups)


def register(group: click.Group) -> None:
    group.add_command(status)


@click.command("status")
@connection_options
@json_option
@wide_option
@click.option("--watch", is_flag=True, help="Refresh in place, like top, until Ctrl-C.")
@click.option(
    "--interval",
    type=Seconds(0.1, 3600),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option(
    "--count",
    "-n",
    type=click.IntRange(1),
    default=None,
    help="With --watch: stop after this many refreshes.",
)
def status(
    url: str, namespace: str, as_json: bool, watch: bool, interval: float, count: int | None
) -> None:
    """Every action (runs by state, records set aside, throughput), worker and stream
    group (lag, pending, dead letters, records set aside) of the namespace."""
    if watch and as_json:
        raise click.UsageError("--watch shows tables; use --json without --watch")
    if not watch:
        ov = with_client(url, namespace, overview)
        if as_json:
            print_json(ov)
        else:
            console().print(render(ov))
        return

    async def refresh(client: FloClient) -> None:
        shown = 1
        with Live(render(await overview(client)), console=console(), auto_refresh=False) as live:
            while count is None or shown < count:
                await asyncio.sleep(interval)
                live.update(render(await overview(client)), refresh=True)
                shown += 1

    with contextlib.suppress(KeyboardInterrupt):
        with_client(url, namespace, refresh)
