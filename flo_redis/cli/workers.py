"""``flo-redis workers list|drain|deregister``."""

from __future__ import annotations

import click

from ..client import FloClient
from ..discovery import all_workers
from ..types import WorkerInfo
from ._ops import (
    age,
    confirm,
    connection_options,
    console,
    json_option,
    print_json,
    table,
    with_client,
    yes_option,
)


def register(group: click.Group) -> None:
    group.add_command(workers)


@click.group("workers")
def workers() -> None:
    """See the registered workers; drain or deregister one."""


@workers.command("list")
@connection_options
@json_option
def list_workers(url: str, namespace: str, as_json: bool) -> None:
    """Every registered worker: status, load, totals and last heartbeat."""

    async def read(client: FloClient) -> tuple[int, tuple[WorkerInfo, ...]]:
        return await client.server_time_ms(), await all_workers(client)

    now_ms, found = with_client(url, namespace, read)
    if as_json:
        print_json(list(found))
        return
    console().print(
        table(
            f"Workers in {namespace!r}",
            [
                "worker",
                "type",
                "status",
                "load",
                "completed",
                "failed",
                "heartbeat",
                "machine",
                "actions",
            ],
            [
                (
                    w.worker_id,
                    w.worker_type.name,
                    w.status.name,
                    f"{w.current_load}/{w.max_concurrency}",
                    w.tasks_completed,
                    w.tasks_failed,
                    age(w.last_heartbeat_ms, now_ms) + " ago",
                    w.machine_id,
                    ", ".join(w.task_types),
                )
                for w in found
            ],
        )
    )


@workers.command("drain")
@connection_options
@yes_option
@click.argument("worker_id")
def drain(url: str, namespace: str, yes: bool, worker_id: str) -> None:
    """Tell WORKER_ID to stop taking work; it finishes what it holds, then stops."""
    confirm(yes, f"Drain worker {worker_id!r} in namespace {namespace!r}?")
    with_client(url, namespace, lambda c: c.worker.drain(worker_id))
    click.echo(f"worker {worker_id} is draining")


@workers.command("deregister")
@connection_options
@yes_option
@click.argument("worker_id")
def deregister(url: str, namespace: str, yes: bool, worker_id: str) -> None:
    """Remove WORKER_ID from the registry (a live worker registers again)."""
    confirm(yes, f"Deregister worker {worker_id!r} in namespace {namespace!r}?")
    with_client(url, namespace, lambda c: c.worker.deregister(worker_id))
    click.echo(f"worker {worker_id} deregistered")
