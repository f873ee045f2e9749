"""``flo-redis workers list|drain|deregister``."""

from __future__ import annotations

import click

from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._names import Names
from flo_redis.cli._render import say
from flo_redis.client import FloClient
from flo_redis.ops.discovery import all_workers, health, summarize
from flo_redis.types import WorkerInfo


def register(group: click.Group) -> None:
    group.add_command(workers)


@click.group("workers")
def workers() -> None:
    """See the registered workers; drain or deregister one."""


@ops.list_command(workers)
def list_workers(url: str, namespace: str, as_json: bool) -> None:
    """Every registered worker: status (GONE when its process is), load, totals and
    last heartbeat."""

    async def read(client: FloClient) -> tuple[int, tuple[WorkerInfo, ...]]:
        return await client.server_time_ms(), await all_workers(client)

    now_ms, found = ops.with_client(url, namespace, read)
    if as_json:
        ops.print_json(list(found))
        return
    tables.console().print(
        tables.table(
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
                    health(w),
                    f"{w.current_load}/{w.max_concurrency}",
                    w.tasks_completed,
                    w.tasks_failed,
                    ops.age(w.last_heartbeat_ms, now_ms) + " ago",
                    w.machine_id,
                    ", ".join(w.task_types),
                )
                for w in found
            ],
            wrap=["actions"],
            drop=["machine", "type", "failed", "completed"],
        )
    )
    say(ops.worker_figures(summarize(found, now_ms)))


def _worker_step(name: str, about: str, done: str) -> None:
    """``workers <name> WORKER_ID``: ask to confirm, call ``client.worker.<name>``, say
    ``worker <id> <done>`` (with ``--json``: ``{"worker_id": id, "<done>": true}``)."""

    @workers.command(name, help=about)
    @ops.connection_options
    @ops.json_option
    @ops.yes_option
    @click.argument("worker_id")
    def step(url: str, namespace: str, as_json: bool, yes: bool, worker_id: str) -> None:
        async def run(client: FloClient) -> None:
            # Asked once the worker is known to be there (the names are checked first).
            question = f"{name.capitalize()} worker {worker_id!r} in namespace {namespace!r}?"
            ops.confirm(yes, question)
            await getattr(client.worker, name)(worker_id)

        ops.with_client(url, namespace, run, Names(worker=worker_id))
        ops.report(as_json, f"worker {worker_id} {done}", worker_id=worker_id, **{done: True})


_worker_step(
    "drain",
    "Tell WORKER_ID to stop taking work; it finishes what it holds, then stops.",
    "draining",
)
_worker_step(
    "deregister",
    "Remove WORKER_ID from the registry (a live worker registers again).",
    "deregistered",
)
