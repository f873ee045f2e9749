"""``--processes N``: N worker processes, restarted when they die, stopped together.

The supervisor runs no workers itself. Each child is the same ``flo-redis worker``
command with ``--processes 1``, in its own process group (a Ctrl-C in the terminal reaches
the supervisor only, which passes each signal on once, so "first signal stops, second
aborts" holds for the children too). A child that dies is started again after a pause that
doubles while it keeps dying young (0.5 s up to 30 s), so a crash loop never spins.
SIGHUP is passed on to every child (each reloads its handler processes).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

import click

log = logging.getLogger("flo_redis.cli")

INDEX_ENV = "FLO_REDIS_PROCESS_INDEX"  # the child's number, 0..N-1
PARENT_ENV = "FLO_REDIS_SUPERVISOR_PID"  # a child stops when this process is gone
RESTART_FIRST_S = 0.5
RESTART_MAX_S = 30.0
# A child that lived this long before it died was healthy: its next pause starts over.
HEALTHY_AFTER_S = 30.0
# On top of the shutdown timeout: how long children get before they are killed.
KILL_AFTER_S = 10.0
_TICK_S = 0.1


# Options whose value may hold a secret (the password in a Redis URL), by the
# environment variable that carries them to a child instead of its command line: a
# process's command line is readable by every user of the machine (``ps``), its
# environment only by its own user.
SECRET_OPTIONS = {"url": "FLO_REDIS_URL"}


def child_args(ctx: click.Context, *, processes_param: str) -> list[str]:
    """The command line that runs this command again as one child: every option with
    its resolved value (extensions' options too), ``processes`` set to 1; the
    :data:`SECRET_OPTIONS` are left to :func:`child_env`."""
    assert ctx.command.name is not None
    args = [sys.executable, "-m", "flo_redis.cli", ctx.command.name]
    positional: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if param.name == processes_param:
            value = 1
        if value is None or param.name in SECRET_OPTIONS:
            continue
        if isinstance(param, click.Argument):
            positional += [str(v) for v in value] if param.nargs != 1 else [str(value)]
        elif isinstance(param, click.Option):
            flag = param.opts[0]
            if param.is_flag:
                if value:
                    args.append(flag)
                elif param.secondary_opts:
                    args.append(param.secondary_opts[0])
            elif param.multiple:
                for item in value:
                    args += [flag, str(item)]
            else:
                args += [flag, str(value)]
    return [*args, "--", *positional]


def child_env(ctx: click.Context) -> dict[str, str]:
    """The :data:`SECRET_OPTIONS` of this command, as the environment of a child."""
    return {
        env: str(ctx.params[name])
        for name, env in SECRET_OPTIONS.items()
        if ctx.params.get(name) is not None
    }


@dataclass
class _Child:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float = 0.0
    pause: float = RESTART_FIRST_S


class Supervisor:
    """Runs ``args`` as ``count`` children until a signal; restarts those that die."""

    def __init__(
        self, args: list[str], count: int, params: dict[str, Any], env: dict[str, str]
    ) -> None:
        self.args = args
        self.env = env  # added to each child's environment (child_env)
        self.children = [_Child(i) for i in range(count)]
        self.shutdown_timeout = float(params["shutdown_timeout"])
        self.signals = 0

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            log.info("%s received: stopping %d worker processes", name, len(self.children))
        elif self.signals == 2:
            log.warning("%s received again: worker processes give their runs back now", name)
        else:
            return
        self._send(signal.SIGTERM)

    def _send(self, sig: int) -> None:
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(sig)

    def _start(self, child: _Child) -> None:
        env = {**os.environ, **self.env, INDEX_ENV: str(child.index), PARENT_ENV: str(os.getpid())}
        child.process = subprocess.Popen(self.args, env=env, start_new_session=True)
        child.started = time.monotonic()
        log.info("worker process %d started (pid %d)", child.index, child.process.pid)

    def _reap(self, child: _Child, now: float) -> None:
        """A child that exited while the supervisor runs: plan its restart."""
        assert child.process is not None
        code, pid = child.process.returncode, child.process.pid
        child.process = None
        if now - child.started >= HEALTHY_AFTER_S:
            child.pause = RESTART_FIRST_S
        child.restart_at = now + child.pause
        log.warning(
            "worker process %d (pid %d) exited with %s; restarting it in %.1f s",
            child.index,
            pid,
            f"signal {signal.Signals(-code).name}" if code < 0 else f"code {code}",
            child.pause,
        )
        child.pause = min(child.pause * 2, RESTART_MAX_S)

    def run(self) -> int:
        """Supervise until a signal and every child has exited; 0 if all exited 0."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, lambda _sig, _frame: self._send(signal.SIGHUP))
        for child in self.children:
            self._start(child)
        while not self.signals:
            now = time.monotonic()
            for child in self.children:
                if child.process is None:
                    if now >= child.restart_at:
                        self._start(child)
                elif child.process.poll() is not None:
                    self._reap(child, now)
            time.sleep(_TICK_S)
        return self._stop_children()

    def _stop_children(self) -> int:
        deadline = time.monotonic() + self.shutdown_timeout + KILL_AFTER_S
        alive = [c.process for c in self.children if c.process is not None]
        codes: list[int] = []
        for process in alive:
            try:
                codes.append(process.wait(max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                log.error("worker process pid %d did not stop; killing it", process.pid)
                process.kill()
                codes.append(process.wait())
        failed = [code for code in codes if code != 0]
        log.info("worker processes stopped (%d of %d not cleanly)", len(failed), len(codes))
        return 1 if failed else 0
