"""The worker's side of one handler process (:mod:`flo_redis.worker.child`): starting it,
the socket to it, and its end. :mod:`flo_redis.worker.processes` keeps a pool of them.

A child starts as ``python -c "...child.main(FD)"``: a new interpreter, not a fork of
the worker (whose event loop, sockets and threads a fork would copy half-made), so it
imports the handlers' code from disk as it is at its start. Messages are pickled tuples,
framed as ``multiprocessing.connection`` frames them (the child reads them with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.spawn import get_preparation_data
from typing import Any

from flo_redis.errors import FloError, ValidationError
from flo_redis.worker.context import ActionContext
from flo_redis.worker.stream_context import StreamContext

_BOOT = "import sys; from flo_redis.worker.child import main; main(int(sys.argv[1]))"
_HEAD = struct.Struct("!i")
_LONG = struct.Struct("!Q")
# After its socket closed, how long a child gets to exit before it is killed.
_EXIT_S = 1.0


class HandlerProcessError(FloError):
    """The handler processes could not start: a handler's module fails to import in a
    new process, or a child did not answer within ``start_timeout_s``."""


class HandlerProcessLost(Exception):
    """A run's handler process ended under it: it crashed (a signal, ``os._exit``), or
    it passed the executor's memory limit and was stopped. Its run fails (retried as its
    action's ``max_retries`` says); the worker's other runs go on."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a handler process, as it printed there
    (the cause of the exception the worker raises in its place)."""

    def __str__(self) -> str:
        return "\n\n" + str(self.args[0]).rstrip()


def exit_text(code: int | None) -> str:
    """How a process ended, by its exit status: "exited with status 3", "was killed
    by signal SIGSEGV"."""
    if code is None:
        return "ended"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


def pickled_handlers(handlers: dict[str, Callable[..., Any]]) -> bytes:
    """``handlers`` (action name -> function) pickled by reference, for a child to
    import; :class:`ValidationError` naming one that cannot be (a lambda, a function
    defined inside another, a bound method of an object that does not pickle)."""
    for name, handler in handlers.items():
        try:
            pickle.dumps(handler, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            what = name if " " in name else f"action {name!r}"
            raise ValidationError(
                f"the handler of {what} runs in a process, so it must be "
                f"importable by its module and name (a module-level def), and {handler!r} "
                f"is not ({exc}); move it to module level, or run it in the worker's "
                "threads (no executor)"
            ) from None
    return pickle.dumps(handlers, pickle.HIGHEST_PROTOCOL)


def _spawn() -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """A new child and the worker's end of its socket (a fork and exec: a millisecond
    or two, not worth a thread)."""
    ours, theirs = socket.socketpair()
    try:
        popen = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(theirs.fileno())], pass_fds=(theirs.fileno(),)
        )
    finally:
        theirs.close()
    return ours, popen


def _preparation(handlers: bytes) -> dict[str, Any]:
    """What a child needs to resolve the handlers as this process does, as
    ``multiprocessing``'s spawn start sends it (``sys.path``, the working directory),
    less the process's authentication key, which it has no use for. The main module
    only when a handler is in it (run again there as ``__mp_main__``: its start-up must
    sit under ``if __name__ == "__main__":``, as for ``multiprocessing``)."""
    data = get_preparation_data("flo-handler")
    data.pop("authkey", None)
    if b"__main__" not in handlers:
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


class Child:
    """One handler process: its run (``ctx``, and ``reply``, the future its answer
    resolves), how many runs it took, its memory after the last, and how it ends."""

    __slots__ = (
        "ctx",
        "lost",
        "pid",
        "popen",
        "reader",
        "reason",
        "reply",
        "retiring",
        "rss",
        "runs",
        "why_killed",
        "writer",
    )

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.reader = reader
        self.writer = writer
        self.reply: asyncio.Future[tuple[Any, ...]] | None = None
        self.ctx: ActionContext | StreamContext | None = None
        self.runs = 0
        self.rss = 0
        self.retiring = False  # it ends once its run does
        self.lost = False  # its socket closed
        self.why_killed = ""
        self.reason = ""  # why it was killed, for the metrics: memory, killed

    @classmethod
    async def start(cls, handlers: bytes, timeout: float, actions: str) -> Child:
        """A child that imported ``handlers`` and said it is ready;
        :class:`HandlerProcessError` if it cannot or does not within ``timeout``."""
        ours, popen = _spawn()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        child = cls(popen, reader, writer)
        level = logging.getLogger().getEffectiveLevel()
        child.send((_preparation(handlers), handlers, level))
        try:
            hello = await asyncio.wait_for(child.read(), timeout)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError) as exc:
            child.kill("")
            await child.end()
            why = "did not answer" if isinstance(exc, asyncio.TimeoutError) else "ended"
            raise HandlerProcessError(
                f"a handler process for {actions} {why} within {timeout:g} s of its start "
                f"({exit_text(popen.poll())}); what it printed says why"
            ) from None
        if hello[0] != "ready":
            await child.end()
            raise HandlerProcessError(
                f"a handler process could not import the handlers of {actions}:\n{hello[1]}"
            )
        return child

    def take(self, ctx: ActionContext | StreamContext, message: tuple[Any, ...]) -> None:
        """Run ``message``, ``ctx``'s run: sent, :attr:`reply` new for its answer."""
        self.ctx = ctx
        self.runs += 1
        self.reply = asyncio.get_running_loop().create_future()
        self.send(message)

    def send(self, message: tuple[Any, ...]) -> None:
        if self.lost:
            return
        body = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        if len(body) > 0x7FFFFFFF:
            self.writer.write(_HEAD.pack(-1) + _LONG.pack(len(body)) + body)
        else:
            self.writer.write(_HEAD.pack(len(body)) + body)

    async def read(self) -> tuple[Any, ...]:
        """The next message; ``IncompleteReadError`` once the child is gone."""
        return pickle.loads(await self.read_bytes())  # type: ignore[no-any-return]

    async def read_bytes(self) -> bytes:
        """The next message as it was pickled; ``IncompleteReadError`` once the child
        is gone."""
        (size,) = _HEAD.unpack(await self.reader.readexactly(4))
        if size == -1:
            (size,) = _LONG.unpack(await self.reader.readexactly(8))
        return await self.reader.readexactly(size)

    def signal(self, sig: int) -> None:
        """Send ``sig``, unless the process was reaped (its pid may be another's now)."""
        if self.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self, why: str, reason: str = "killed") -> None:
        """SIGKILL; ``why`` (if none was given before) is what its run is told, and
        ``reason`` what the metrics count. It counts as gone at once: never handed
        another run."""
        if not self.why_killed:
            self.why_killed, self.reason = why, reason
        self.lost = True
        self.signal(signal.SIGKILL)

    async def reaped(self) -> int | None:
        """Its exit status, once its socket closed (killed if it lingers)."""
        for _ in range(int(_EXIT_S / 0.01)):
            code = self.popen.poll()
            if code is not None:
                return code
            await asyncio.sleep(0.01)
        self.kill("")
        return await asyncio.to_thread(self.popen.wait)

    async def end(self, timeout: float = 2.0) -> None:
        """Tell it to exit; killed if it has not within ``timeout``."""
        self.send(("exit",))
        try:
            await asyncio.wait_for(asyncio.to_thread(self.popen.wait), timeout)
        except asyncio.TimeoutError:
            self.kill("")
            await asyncio.to_thread(self.popen.wait)
        self.lost = True
        self.writer.close()


def log_record(fields: dict[str, Any]) -> None:
    """A record a handler process logged, to this process's logging as if logged here."""
    record = logging.makeLogRecord(fields)
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


def named(ctx: ActionContext | StreamContext | None) -> str:
    """What a log line calls the run or record ``ctx`` is of."""
    if isinstance(ctx, StreamContext):
        return f"record {ctx.stream_id} of stream {ctx.stream!r}"
    return f"run {ctx.task_id}" if ctx is not None else "a run"


def handed(ctx: ActionContext | StreamContext) -> tuple[str, Any]:
    """The key of ``ctx``'s handler in its child, and what makes its context there: an
    action run's fields (the child makes a ``ProcessContext``), a stream record's
    context whole (one handler, key "")."""
    if isinstance(ctx, StreamContext):
        return "", ctx
    fields = (
        ctx.task_id,
        ctx.action_name,
        ctx.payload,
        ctx.attempt,
        ctx.created_at,
        ctx.namespace,
        ctx.token,
        ctx._trace,
    )
    return ctx.action_name, fields


__all__ = [
    "Child",
    "HandlerProcessError",
    "HandlerProcessLost",
    "RemoteTraceback",
    "exit_text",
    "handed",
    "log_record",
    "named",
    "pickled_handlers",
]
