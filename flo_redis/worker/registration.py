"""An action worker's standing in the store: its actions (with their schedules) and
itself registered, registered again when Redis lost them, and its heartbeats."""

from __future__ import annotations

import asyncio
import copy
import logging
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from flo_redis._aio import sleep_unless_stopped
from flo_redis._session import outage
from flo_redis._session.session import Session
from flo_redis.actions.operations import ActionOperations
from flo_redis.actions.schedules import ScheduleDeclaration
from flo_redis.actions.workers import WorkerOperations
from flo_redis.errors import NotFoundError, is_connection_error
from flo_redis.types import ActionRegisterOptions, ActionType, WorkerRegisterOptions

log = logging.getLogger("flo_redis.worker")


@dataclass(frozen=True)
class Registration:
    """Registers one worker's ``actions`` (in the session's namespace, whatever their
    options say) with their ``schedules``, and the worker itself."""

    session: Session
    ops: WorkerOperations
    worker_id: str
    actions: Mapping[str, ActionRegisterOptions]
    schedules: Sequence[ScheduleDeclaration]
    concurrency: int

    async def register_all(self) -> None:
        for name in self.actions:
            await self._register_action(name)
        await self.register_worker()

    async def restore_action(self, name: str) -> None:
        """This worker's action was found not registered (its Redis lost its data), or
        registered with stored settings that do not parse (written by hand, or by another
        version): register it again with this worker's options, so invokes and claims are
        accepted again."""
        log.warning(
            "action %r is not registered, or its stored settings do not parse (Redis lost "
            "its data, or they were written by hand); registering it again",
            name,
        )
        await self._register_action(name)

    async def _register_action(self, name: str) -> None:
        # A copy in the session's namespace, checked as given now (check_options), not
        # made again: dataclasses.replace would raise its ValueError first.
        options = copy.copy(self.actions[name])
        options.namespace = None
        await ActionOperations(self.session).register(name, ActionType.USER, options)
        for declared in self.schedules:
            if declared.action == name:
                await declared.apply(self.session)

    async def register_worker(self) -> None:
        await self.ops.register(
            self.worker_id,
            sorted(self.actions),
            WorkerRegisterOptions(concurrency=self.concurrency, machine_id=socket.gethostname()),
        )

    async def heartbeat(self, load: int) -> None:
        """Say the worker is alive with ``load`` handlers running; a worker that was
        removed registers again."""
        try:
            await self.ops.heartbeat(self.worker_id, load)
        except NotFoundError:
            log.warning("worker %s was removed; registering again", self.worker_id)
            await self.register_worker()

    async def heartbeat_loop(
        self, stop: asyncio.Event, interval_s: float, load: Callable[[], int]
    ) -> None:
        """Heartbeat every ``interval_s`` until ``stop``; failures are logged."""
        while not await sleep_unless_stopped(stop, interval_s):
            try:
                await self.heartbeat(load())
            except Exception as exc:
                if is_connection_error(exc):
                    outage.failed(log, self.session.redis, "heartbeat", exc)
                else:
                    log.warning("heartbeat of %s failed: %s", self.worker_id, exc)


__all__ = ["Registration"]
