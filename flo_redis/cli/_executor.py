"""``flo-redis worker``'s process executor: its options (``--executor process`` and
the limits of its handler processes), and SIGHUP, which reloads the handler processes
of every worker (:meth:`~flo_redis.worker.ActionWorker.reload`): new ones with
the code as it is on disk now, the old ones retired as their runs end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from flo_redis.cli import _targets
from flo_redis.cli._options import Seconds, env_option
from flo_redis.errors import ValidationError
from flo_redis.worker.action_options import MAX_MEMORY_LIMIT_MB, ProcessExecutor

log = logging.getLogger("flo_redis.cli")
F = TypeVar("F", bound=Callable[..., Any])
_LIMITS = ("max_runs_per_child", "memory_limit_mb", "stop_grace")


def options(command: F) -> F:
    """The command's executor options."""
    for option in reversed(
        (
            env_option(
                "--executor",
                "Where plain def handlers run: the worker's threads, or pre-started "
                "processes that a time limit, a cancel or a memory limit really stops; "
                "default: the worker's own setting",
                type=click.Choice(("thread", "process")),
                default=None,
            ),
            env_option(
                "--max-runs-per-child",
                "With --executor process: runs a handler process takes before it is "
                "replaced (0: no limit)",
                type=click.IntRange(0),
                default=None,
            ),
            env_option(
                "--memory-limit-mb",
                "With --executor process: resident memory past which a handler process "
                "is stopped (its run fails saying so) and replaced (0: no limit)",
                type=click.IntRange(0, MAX_MEMORY_LIMIT_MB),
                default=None,
            ),
            env_option(
                "--stop-grace",
                "With --executor process: seconds a handler told to stop (its time limit, "
                "a cancel) gets before its process is killed",
                type=Seconds(0.001, 3600.0),
                default=None,
            ),
        )
    ):
        command = option(command)
    return command


def check(params: dict[str, Any]) -> None:
    """Limits of handler processes without ``--executor process`` mean nothing."""
    given = [name for name in _LIMITS if params.get(name) is not None]
    if given and params.get("executor") != "process":
        flag = "--" + given[0].replace("_", "-")
        raise click.BadParameter(f"{flag} needs --executor process", param_hint=flag)


def apply(workers: Sequence[_targets.Worker], params: dict[str, Any]) -> None:
    """Set each action worker's executor as the options say; a handler that cannot run
    in a process is a usage error (exit 2), before any worker starts."""
    if params.get("executor") is not None:
        _set(workers, params)
    for worker in workers:
        try:
            worker.check_handlers()
        except ValidationError as exc:
            raise click.UsageError(str(exc)) from None


def _set(workers: Sequence[_targets.Worker], params: dict[str, Any]) -> None:
    for worker in workers:
        if params["executor"] == "thread":
            worker.config.executor = None
            continue
        own = worker.config.executor or ProcessExecutor()
        worker.config.executor = ProcessExecutor(
            size=own.size,
            max_runs_per_child=_given(params["max_runs_per_child"], own.max_runs_per_child),
            memory_limit_mb=_given(params["memory_limit_mb"], own.memory_limit_mb),
            grace_s=_given(params["stop_grace"], own.grace_s),
            start_timeout_s=own.start_timeout_s,
        )


def _given(value: Any, otherwise: Any) -> Any:
    return otherwise if value is None else value


class Reloads:
    """SIGHUP: reload the action workers' handler processes, one worker after another;
    a SIGHUP during a reload is done once it ends."""

    def __init__(self, workers: Sequence[_targets.Worker]) -> None:
        self.workers = list(workers)
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def signal(self) -> None:
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.ensure_future(self._reload())

    async def _reload(self) -> None:
        while True:
            self._again = False
            log.info("SIGHUP received: reloading the handler processes")
            pools = 0
            for worker in self.workers:
                try:
                    pools += await worker.reload()
                except Exception as exc:
                    wid = worker.config.worker_id
                    log.error("worker %s kept its handler processes: %s", wid, exc)
            if not pools:
                log.info("no handler processes to reload: handlers run in threads or on the loop")
            if not self._again:
                return

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


__all__ = ["Reloads", "apply", "check", "options"]
