"""``flo-redis check``: a health probe for orchestrators (a liveness/readiness command).

Exit 0 when the named worker, or every live worker of an action (at least one), is alive
(its process holds its liveness subscription), ACTIVE and has a heartbeat younger than
``--max-heartbeat-age``; 1 otherwise. A worker whose process is gone counts against the
probe only when no live worker is left, and is named either way. One line says why.
"""

from __future__ import annotations

import asyncio
import sys

import click

from flo_redis.cli._names import NAMESPACE, UnknownNameError, did_you_mean
from flo_redis.cli._ops import json_option, report
from flo_redis.cli._options import Seconds, namespace_option, url_option
from flo_redis.client import FloClient
from flo_redis.errors import FloError
from flo_redis.ops.discovery import action_names, all_workers
from flo_redis.types import WorkerInfo, WorkerStatus

# Action workers heartbeat every 30 s: 60 s means two missed in a row.
DEFAULT_MAX_AGE_S = 60.0


async def _chosen(client: FloClient, worker_id: str | None, action: str | None) -> list[WorkerInfo]:
    """The registered workers the probe is about: the one named, or those of the action."""
    return [
        info
        for info in await all_workers(client)
        if (worker_id is None or info.worker_id == worker_id)
        and (action is None or action in info.task_types)
    ]


async def _confirmed(
    client: FloClient, first: list[WorkerInfo], worker_id: str | None, action: str | None
) -> list[WorkerInfo]:
    """``first``, or when every worker in it was seen without its process (so absence
    alone would fail the probe), what is seen once the liveness grace has passed: as
    the reapers judge, an owner is gone only once it stayed absent that long (a live
    process's subscription may be down for a moment: a reconnect, a failover)."""
    if not first or any(w.alive is not False for w in first):
        return first
    await asyncio.sleep(client.liveness_grace_ms / 1000)
    return await _chosen(client, worker_id, action)


async def _hint(client: FloClient, worker_id: str | None, action: str | None) -> str:
    """What the worker id or action named but not found may have been meant to be: a
    registered worker's id; an action registered, or served by a worker."""
    workers = await all_workers(client)
    if worker_id is not None:
        return did_you_mean(worker_id, [w.worker_id for w in workers])
    served = {t for w in workers for t in w.task_types}
    return did_you_mean(action or "", sorted(served.union(await action_names(client))))


def _verdict(info: WorkerInfo, now_ms: int, max_age_s: float) -> str | None:
    """Why a live ``info`` is not healthy, or None."""
    age_s = max(0, now_ms - info.last_heartbeat_ms) / 1000
    if info.status != WorkerStatus.ACTIVE:
        return f"worker {info.worker_id} is {info.status.name} (last heartbeat {age_s:.0f} s ago)"
    if age_s > max_age_s:
        return f"worker {info.worker_id}: last heartbeat {age_s:.0f} s ago (> {max_age_s:g} s)"
    return None


def _named(workers: list[WorkerInfo], most: int = 3) -> str:
    ids = [w.worker_id for w in workers]
    return ", ".join(ids[:most]) + (", ..." if len(ids) > most else "")


async def probe(
    url: str, namespace: str, worker_id: str | None, action: str | None, max_age_s: float
) -> tuple[bool, str]:
    """(healthy, the one line that says why)."""
    where = f"namespace {namespace!r}"
    try:
        async with FloClient(url, namespace=namespace) as client:
            await NAMESPACE.check(client)
            chosen = await _chosen(client, worker_id, action)
            chosen = await _confirmed(client, chosen, worker_id, action)
            now_ms = await client.server_time_ms()
            hint = await _hint(client, worker_id, action) if not chosen else ""
    except UnknownNameError as exc:
        return False, exc.message
    except FloError as exc:
        return False, str(exc)
    if not chosen:
        if worker_id is not None:
            return False, f"no worker {worker_id!r} is registered in {where}{hint}"
        return False, f"no worker of action {action!r} is registered in {where}{hint}"
    gone = [w for w in chosen if w.alive is False]
    live = [w for w in chosen if w.alive is not False]
    if not live:
        newest = max(0, now_ms - max(w.last_heartbeat_ms for w in gone)) / 1000
        if worker_id is not None:
            return False, (
                f"worker {worker_id} is gone: no process holds its liveness subscription "
                f"(last heartbeat {newest:.0f} s ago)"
            )
        return (
            False,
            f"no live worker of action {action!r} in {where}: {len(gone)} gone ({_named(gone)})",
        )
    for info in live:
        why = _verdict(info, now_ms, max_age_s)
        if why is not None:
            return False, why
    newest = max(0, now_ms - max(i.last_heartbeat_ms for i in live)) / 1000
    if worker_id is not None:
        return True, f"worker {worker_id} is ACTIVE (last heartbeat {newest:.0f} s ago)"
    line = f"{len(live)} worker(s) of action {action!r} ACTIVE in {where}"
    return True, line + (f"; {len(gone)} gone ({_named(gone)})" if gone else "")


@click.command("check")
@url_option
@namespace_option("the workers are registered in")
@click.option("--worker", "worker_id", metavar="ID", help="The worker to check.")
@click.option("--action", metavar="NAME", help="Check every live worker registered for NAME.")
@click.option(
    "--max-heartbeat-age",
    type=Seconds(0),
    default=DEFAULT_MAX_AGE_S,
    show_default=True,
    help="Seconds; an older heartbeat is unhealthy.",
)
@json_option
def check_command(
    url: str,
    namespace: str,
    worker_id: str | None,
    action: str | None,
    max_heartbeat_age: float,
    as_json: bool,
) -> None:
    """Exit 0 if the worker (or every live worker of the action, at least one) is alive,
    ACTIVE and has a recent heartbeat, 1 otherwise; prints one line saying why (with
    --json: {"healthy": ..., "why": ...})."""
    if (worker_id is None) == (action is None):
        raise click.UsageError("name one of --worker ID or --action NAME")
    healthy, line = asyncio.run(probe(url, namespace, worker_id, action, max_heartbeat_age))
    report(as_json, f"{'ok' if healthy else 'unhealthy'}: {line}", healthy=healthy, why=line)
    sys.exit(0 if healthy else 1)


def register(group: click.Group) -> None:
    group.add_command(check_command)
