"""``flo-redis worker MODULE:ATTR ...``: run workers until a signal, then stop cleanly.

SIGHUP reloads the handler processes of ``--executor process`` (flo_redis.cli._executor).
First SIGTERM/SIGINT: stop claiming, let running handlers finish and send their results,
exit 0. At ``--shutdown-timeout`` or on a second signal: cancel running handlers and give
their runs back without spending the attempt, then exit. ``--processes N`` runs N such
processes under a supervisor (flo_redis.cli._supervisor) that restarts any that die. What
start-up made is moved out of the garbage collector's way before work begins
(:func:`_freeze_start_up`).

Extensions add options and things to run beside the workers (a metrics server ...) with
:func:`add_sidecar`; a sidecar runs in each process that runs workers, until they stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from flo_redis._session.endpoint import redact
from flo_redis.cli import _executor, _supervisor, _targets
from flo_redis.cli._logging import LOG_FORMATS, LOG_LEVELS, setup_logging
from flo_redis.cli._options import (
    DurabilityParam,
    Seconds,
    env_option,
    namespace_option,
    url_option,
)
from flo_redis.client import FloClient
from flo_redis.errors import FloError
from flo_redis.types.base import U32
from flo_redis.worker.action_worker import ActionWorker

log = logging.getLogger("flo_redis.cli")

# After the handlers were cancelled, how long they get to give their runs back.
ABORT_GRACE_S = 5.0
# Exit code when handlers ignored their cancellation (0: stopped cleanly; 1: failed;
# 2: click's usage errors).
EXIT_HUNG = 3
# How often a supervised process checks that its supervisor is still there.
_PARENT_CHECK_S = 1.0
# The most --processes: enough for any one machine's cores, few enough that a typo
# (an extra digit or ten) is refused rather than forking without end.
MAX_PROCESSES = 1024


@dataclass
class WorkerProcess:
    """What a sidecar sees of the process it runs beside: the command's client and
    options (``params``, extensions' own included), the workers, ``index`` (0, or the
    process's number under ``--processes``) and ``stopping`` (set at the first signal)."""

    client: FloClient
    workers: list[_targets.Worker]
    params: dict[str, Any]
    index: int = 0
    stopping: asyncio.Event = field(default_factory=asyncio.Event)


Sidecar = Callable[[WorkerProcess], Coroutine[Any, Any, None]]
# What a sidecar refuses of the command's options together (click.BadParameter).
ParamsCheck = Callable[[dict[str, Any]], None]
_SIDECARS: list[Sidecar] = []
_CHECKS: list[ParamsCheck] = []


class _Shutdown:
    """Signals to steps: the first stops the workers, the timeout or a second one
    aborts them (handlers cancelled, runs given back). Each step is logged once."""

    def __init__(self, workers: Sequence[_targets.Worker], timeout: float) -> None:
        self.workers = workers
        self.timeout = timeout
        self.stopping = asyncio.Event()
        self.aborting = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    def signal(self, name: str) -> None:
        if not self.stopping.is_set():
            self.stop(f"{name} received")
        elif not self.aborting.is_set():
            self.abort(f"{name} received again")

    def stop(self, why: str) -> None:
        if self.stopping.is_set():
            return
        log.info(
            "%s: stopping; running handlers may finish within %g s "
            "(send the signal again to give their runs back now)",
            why,
            self.timeout,
        )
        self.stopping.set()
        for worker in self.workers:
            worker.stop()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.timeout, self.abort, "shutdown timeout reached")

    def abort(self, why: str) -> None:
        if self.aborting.is_set():
            return
        self.aborting.set()
        if self._timer is not None:
            self._timer.cancel()
        log.warning(
            "%s: cancelling running handlers; their runs go back to the queue "
            "without spending an attempt",
            why,
        )
        for worker in self.workers:
            worker.abort()


async def _watch_parent(parent: int, shutdown: _Shutdown) -> None:
    """Stop when the supervisor that started this process is gone."""
    while True:
        await asyncio.sleep(_PARENT_CHECK_S)
        if os.getppid() != parent:
            shutdown.stop("supervisor gone")
            return


async def _deregister(worker: _targets.Worker, client: FloClient) -> None:
    """A worker that stopped cleanly leaves the registry (a health probe, or an
    operator listing workers, then sees it gone rather than silent)."""
    if isinstance(worker, ActionWorker):
        with contextlib.suppress(Exception):
            await client.worker.deregister(worker.config.worker_id)


async def serve(found: Sequence[tuple[str, object]], params: dict[str, Any]) -> int:
    """Run the workers ``found`` (target, object) names until they stop; the exit code."""
    client = FloClient(params["url"], namespace=params["namespace"])
    try:
        await client.connect()
    except FloError as exc:
        log.error("%s", exc)
        return 1
    try:
        workers = []
        for spec, obj in found:
            try:
                workers.append(await _targets.build(spec, obj, client))
            except click.ClickException:
                raise
            except Exception:
                log.error("%s could not build its worker", spec, exc_info=True)
                return 1
        for worker in workers:
            if params["concurrency"] is not None:
                worker.config.concurrency = params["concurrency"]
            if params["durability"] is not None:
                worker.config.durability = params["durability"]
        _executor.apply(workers, params)
        _freeze_start_up()
        return await _run(workers, client, params)
    finally:
        await client.close()


def _freeze_start_up() -> None:
    """What start-up made (modules, the app, its workers and clients) lives as long as
    the process, which is this command's own: move it out of the garbage collector's
    passes (``gc.freeze``, after one collection), so that the full passes the work
    brings about walk only what was made since. A library leaves the collector alone;
    the command can decide for its own process."""
    gc.collect()
    gc.freeze()


async def _run(workers: list[_targets.Worker], client: FloClient, params: dict[str, Any]) -> int:
    loop = asyncio.get_running_loop()
    shutdown = _Shutdown(workers, params["shutdown_timeout"])
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, shutdown.signal, sig.name)
    reloads = _executor.Reloads(workers)
    loop.add_signal_handler(signal.SIGHUP, reloads.signal)
    process = WorkerProcess(
        client,
        workers,
        params,
        index=int(os.environ.get(_supervisor.INDEX_ENV, "0")),
        stopping=shutdown.stopping,
    )
    helpers = [asyncio.create_task(s(process), name="flo-sidecar") for s in _SIDECARS]

    def sidecar_done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("%s", task.exception())
            shutdown.stop("a sidecar failed")

    for helper in helpers:
        helper.add_done_callback(sidecar_done)
    parent = os.environ.get(_supervisor.PARENT_ENV)
    if parent:
        helpers.append(asyncio.create_task(_watch_parent(int(parent), shutdown)))
    running: dict[asyncio.Future[Any], _targets.Worker] = {
        asyncio.create_task(w.start(), name="flo-worker"): w for w in workers
    }
    log.info(
        "running %d worker(s) on %s, namespace %r; stop with SIGTERM or Ctrl-C",
        len(workers),
        redact(params["url"]),
        client.namespace,
    )
    code = 0
    pending = set(running)
    aborting: asyncio.Future[Any] = asyncio.ensure_future(shutdown.aborting.wait())
    try:
        while pending:
            if shutdown.aborting.is_set():
                done, pending = await asyncio.wait(pending, timeout=ABORT_GRACE_S)
                if pending:  # a handler ignores its cancellation
                    log.error(
                        "handlers still running %g s after they were cancelled; exiting "
                        "without them (their runs come back once this process is gone)",
                        ABORT_GRACE_S,
                    )
                    # Not through asyncio.run's clean-up, which would wait for them.
                    logging.shutdown()
                    os._exit(EXIT_HUNG)
            else:
                done, pending = await asyncio.wait(
                    {*pending, aborting}, return_when=asyncio.FIRST_COMPLETED
                )
                done.discard(aborting)
                pending.discard(aborting)
            for task in done:
                if task.exception() is not None:
                    log.error("a worker failed", exc_info=task.exception())
                    code = 1
                    shutdown.stop("a worker failed")
                else:
                    await _deregister(running[task], client)
    finally:
        aborting.cancel()
        await reloads.close()
        for helper in helpers:
            helper.cancel()
        outcomes = await asyncio.gather(*helpers, return_exceptions=True)
    if any(isinstance(o, Exception) for o in outcomes):
        code = 1
    log.info("stopped")
    return code


def add_sidecar(sidecar: Sidecar, *options: click.Option, check: ParamsCheck | None = None) -> None:
    """Run ``sidecar(process)`` beside the workers of every worker process (cancelled
    once they stopped; one that fails stops them, and the process exits 1), and add
    ``options`` to the command (read them from ``process.params``). ``check(params)``
    refuses what no single option's type can (options that do not go together) with
    ``click.BadParameter``, once the command line is parsed and before any process
    starts."""
    _SIDECARS.append(sidecar)
    if check is not None:
        _CHECKS.append(check)
    worker_command.params[-1:-1] = options  # before the TARGET argument


@click.command("worker")
@url_option
@namespace_option("the workers work in")
@env_option(
    "--concurrency",
    "Handlers each worker runs at once; default: the worker's own setting",
    type=click.IntRange(1, U32 - 1),
    default=None,
)
@env_option(
    "--durability",
    "The level each worker's reports (completes, fails, acks) wait for: primary, "
    "replicated[:REPLICAS[:TIMEOUT_MS]] or fsynced[:REPLICAS[:TIMEOUT_MS]]; default: the "
    "worker's own setting",
    type=DurabilityParam(),
    default=None,
)
@env_option(
    "--log-level",
    "How much to log",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="INFO",
)
@env_option(
    "--log-format",
    "text lines, or one JSON object per line",
    type=click.Choice(LOG_FORMATS),
    default="text",
)
@env_option(
    "--shutdown-timeout",
    "Seconds running handlers get to finish after the first signal; then they are "
    "cancelled and their runs given back",
    type=Seconds(0),
    default=30.0,
)
@env_option(
    "--processes",
    "Worker processes to run under a supervisor that restarts any that die",
    type=click.IntRange(1, MAX_PROCESSES),
    default=1,
)
@_executor.options
@click.argument("targets", metavar="MODULE:ATTR...", nargs=-1, required=True)
@click.pass_context
def worker_command(ctx: click.Context, /, targets: tuple[str, ...], **params: Any) -> None:
    """Run the workers MODULE:ATTR names: an ActionWorker, a StreamWorker, or a function
    (plain or async) that builds one from a FloClient. Several run in one process."""
    _executor.check(params)
    for check in _CHECKS:
        check(params)
    setup_logging(params["log_level"], params["log_format"])
    if params["processes"] > 1:
        args = _supervisor.child_args(ctx, processes_param="processes")
        env = _supervisor.child_env(ctx)
        sys.exit(_supervisor.Supervisor(args, params["processes"], params, env).run())
    found = [(spec, _targets.load(spec)) for spec in targets]  # before anything connects
    code = asyncio.run(serve(found, params))
    if any(t.is_alive() for t in threading.enumerate() if t is not threading.main_thread()):
        # A plain ``def`` handler still blocked in its thread after its run was given
        # back: the interpreter would wait for it at exit.
        log.warning("a handler thread is still running; exiting without it")
        logging.shutdown()
        os._exit(code)
    sys.exit(code)


def register(group: click.Group) -> None:
    group.add_command(worker_command)
