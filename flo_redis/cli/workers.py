"""``flo-redis workers list|show|drain|deregister``."""

from __future__ import annotations

import click

from flo_redis.actions.held import DEFAULT_LISTED, MAX_LISTED
from flo_redis.cli import _ops as ops
from flo_redis.cli import _tables as tables
from flo_redis.cli._names import Names
from flo_redis.cli._render import say
from flo_redis.client import FloClient
from flo_redis.ops.discovery import WorkerNow, health, summarize, workers_now
from flo_redis.types import WorkerInfo


def register(group: click.Group) -> None:
    group.add_command(workers)


@click.group("workers")
def workers() -> None:
    """See the registered workers and what each is doing; drain or deregister one."""


@ops.list_command(workers)
def list_workers(url: str, namespace: str, as_json: bool) -> None:
    """Every registered worker: status (GONE when its process is), runs held now out of
    its concurrency, totals, last heartbeat, and the flo-redis version, host and pid of
    its process. ``--json``: each worker with the runs it holds (the first 10)."""

    async def read(client: FloClient) -> tuple[int, tuple[WorkerNow, ...]]:
        return await client.server_time_ms(), await workers_now(client)

    now_ms, found = ops.with_client(url, namespace, read)
    if as_json:
        ops.print_json([_worker_json(w) for w in found])
        return
    tables.console().print(
        tables.table(
            f"Workers in {namespace!r}",
            [
                "worker",
                "type",
                "status",
                "load",
                "running",
                "completed",
                "failed",
                "heartbeat",
                "version",
                "process",
                "actions",
            ],
            [
                (
                    w.info.worker_id,
                    w.info.worker_type.name,
                    health(w.info),
                    f"{w.load}/{w.info.max_concurrency}",
                    _running(w, now_ms),
                    w.info.tasks_completed,
                    w.info.tasks_failed,
                    ops.age(w.info.last_heartbeat_ms, now_ms) + " ago",
                    w.info.version or "-",
                    _process(w.info),
                    ", ".join(w.info.task_types),
                )
                for w in found
            ],
            wrap=["actions", "running"],
            drop=["process", "version", "type", "failed", "completed", "running"],
        )
    )
    say(ops.worker_figures(summarize([w.info for w in found], now_ms)))


@workers.command("show")
@ops.connection_options
@ops.json_option
@click.option(
    "--limit",
    type=click.IntRange(0, MAX_LISTED),
    default=DEFAULT_LISTED,
    show_default=True,
    help="Runs to list (the others are counted).",
)
@click.argument("worker_id")
def show_worker(url: str, namespace: str, as_json: bool, limit: int, worker_id: str) -> None:
    """What WORKER_ID is doing now: the runs it holds (for how long, until when its
    lease runs), its load, status, and the version, host and pid of its process."""

    async def read(client: FloClient) -> tuple[int, WorkerNow]:
        found = await workers_now(client, limit=limit)
        return await client.server_time_ms(), next(
            w for w in found if w.info.worker_id == worker_id
        )

    now_ms, worker = ops.with_client(url, namespace, read, Names(worker=worker_id))
    if as_json:
        ops.print_json(_worker_json(worker))
        return
    info = worker.info
    facts = [
        ("status", health(info)),
        ("load", f"{worker.load}/{info.max_concurrency} runs held"),
        ("actions", ", ".join(info.task_types) or "-"),
        ("version", info.version or "-"),
        ("process", _process(info)),
        ("owner", info.owner_id or "-"),
        ("machine", info.machine_id or "-"),
        ("heartbeat", ops.age(info.last_heartbeat_ms, now_ms) + " ago"),
        ("registered", ops.age(info.registered_at_ms, now_ms) + " ago"),
        ("completed", str(info.tasks_completed)),
        ("failed", str(info.tasks_failed)),
    ]
    say(f"worker {info.worker_id} in {namespace!r}")
    for name, value in facts:
        say(f"  {name:<11}{value}")
    if worker.runs is None:
        say("its process is gone: it holds nothing (its runs were taken back)")
        return
    if worker.runs.runs:
        tables.console().print(
            tables.table(
                "Runs held",
                ["run", "action", "attempt", "running for", "lease ends", "state"],
                [
                    (
                        r.run_id,
                        r.action,
                        r.attempt,
                        ops.age(r.started_at_ms, now_ms),
                        _until(r.deadline_ms, now_ms),
                        "offered" if r.offered else "running",
                    )
                    for r in worker.runs.runs
                ],
            )
        )
    if not worker.runs.runs:
        say("it holds no runs" if not worker.runs.held else "")
    if worker.runs.more > 0:
        say(f"and {worker.runs.more}{'' if worker.runs.complete else ' or more'} more")


def _worker_json(worker: WorkerNow) -> dict[str, object]:
    out: dict[str, object] = ops.plain(worker.info)
    runs = worker.runs
    out["runs_held"] = None if runs is None else runs.held
    out["runs_held_complete"] = None if runs is None else runs.complete
    out["runs"] = [] if runs is None else ops.plain(list(runs.runs))
    return out


def _process(info: WorkerInfo) -> str:
    if info.host is None:
        return "-"
    return f"{info.host}:{info.pid}" if info.pid is not None else info.host


def _running(worker: WorkerNow, now_ms: int) -> str:
    """The runs held, for the list: the oldest and a count: "job:12 (4s) +3"."""
    if worker.runs is None:
        return "-"
    shown = ", ".join(
        f"{r.run_id} ({ops.age(r.started_at_ms, now_ms)})" for r in worker.runs.runs[:1]
    )
    rest = worker.runs.held - min(len(worker.runs.runs), 1)
    more = f"+{rest}" if rest > 0 else ""
    return " ".join(part for part in (shown, more) if part) or "-"


def _until(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "never"
    if ms <= now_ms:
        return "passed"
    return "in " + ops.age(now_ms, ms)  # the span from now to ms


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
