"""``flo-redis check``: a health probe for orchestrators (a liveness/readiness command).

Exit 0 when the named worker, or every registered worker of an action, is ACTIVE with a
heartbeat younger than ``--max-heartbeat-age``; 1 otherwise. One line says why, either way.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import click

from ..client import FloClient
from ..errors import FloError
from ..types import WorkerInfo, WorkerListOptions, WorkerStatus
from ._options import Seconds, namespace_option, url_option
from ._render import say

# Action workers heartbeat every 30 s: 60 s means two missed in a row.
DEFAULT_MAX_AGE_S = 60.0


async def _all_workers(client: FloClient) -> AsyncIterator[WorkerInfo]:
    cursor: bytes | None = None
    while True:
        page = await client.worker.list(WorkerListOptions(limit=1024, cursor=cursor))
        for info in page.workers:
            yield info
        if page.cursor is None:
            return
        cursor = page.cursor


def _verdict(info: WorkerInfo, now_ms: int, max_age_s: float) -> str | None:
    """Why ``info`` is not healthy, or None."""
    age_s = max(0, now_ms - info.last_heartbeat_ms) / 1000
    if info.status != WorkerStatus.ACTIVE:
        return f"worker {info.worker_id} is {info.status.name} (last heartbeat {age_s:.0f} s ago)"
    if age_s > max_age_s:
        return f"worker {info.worker_id}: last heartbeat {age_s:.0f} s ago (> {max_age_s:g} s)"
    return None


async def probe(
    url: str, namespace: str, worker_id: str | None, action: str | None, max_age_s: float
) -> tuple[bool, str]:
    """(healthy, the one line that says why)."""
    where = f"namespace {namespace!r}"
    try:
        async with FloClient(url, namespace=namespace) as client:
            now_ms = await client.server_time_ms()
            chosen = [
                info
                async for info in _all_workers(client)
                if (worker_id is None or info.worker_id == worker_id)
                and (action is None or action in info.task_types)
            ]
    except FloError as exc:
        return False, str(exc)
    if not chosen:
        if worker_id is not None:
            return False, f"no worker {worker_id!r} is registered in {where}"
        return False, f"no worker of action {action!r} is registered in {where}"
    for info in chosen:
        why = _verdict(info, now_ms, max_age_s)
        if why is not None:
            return False, why
    newest = max(0, now_ms - max(i.last_heartbeat_ms for i in chosen)) / 1000
    if worker_id is not None:
        return True, f"worker {worker_id} is ACTIVE (last heartbeat {newest:.0f} s ago)"
    return True, f"{len(chosen)} worker(s) of action {action!r} ACTIVE in {where}"


@click.command("check")
@url_option
@namespace_option("the workers are registered in")
@click.option("--worker", "worker_id", metavar="ID", help="The worker to check.")
@click.option("--action", metavar="NAME", help="Check every worker registered for NAME.")
@click.option(
    "--max-heartbeat-age",
    type=Seconds(0),
    default=DEFAULT_MAX_AGE_S,
    show_default=True,
    help="Seconds; an older heartbeat is unhealthy.",
)
def check_command(
    url: str, namespace: str, worker_id: str | None, action: str | None, max_heartbeat_age: float
) -> None:
    """Exit 0 if the worker (or every worker of the action) is ACTIVE with a recent
    heartbeat, 1 otherwise; prints one line saying why."""
    if (worker_id is None) == (action is None):
        raise click.UsageError("name one of --worker ID or --action NAME")
    healthy, line = asyncio.run(probe(url, namespace, worker_id, action, max_heartbeat_age))
    say(f"{'ok' if healthy else 'unhealthy'}: {line}")
    sys.exit(0 if healthy else 1)


def register(group: click.Group) -> None:
    group.add_command(check_command)
