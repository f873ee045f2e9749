"""Handlers for the process executor's tests, run in handler processes (so module-level
``def``s), and worker targets for ``flo-redis worker`` built from them.

Each handler that records something writes to the Redis at ``PROCESS_APP_URL``
(the tests set it), under the run's namespace:
``<ns>:started:<run id>`` the handler's process id and start time, appended per attempt;
``<ns>:starts`` and ``<ns>:ledger`` run id -> times its handler started, and times its
side effect was committed (fenced: only while the run's token is the newest a handler
of that run saw; :func:`commit`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
from typing import Any

import redis

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    NonRetryableError,
    ProcessExecutor,
    RateLimited,
)
from flo_redis.worker import ActionWorker

#: What ``version`` returns; the rolling-restart test rewrites this line.
VERSION = "one"

_redis: redis.Redis | None = None


def _raw() -> redis.Redis:
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(os.environ["PROCESS_APP_URL"])
    return _redis


def _started(ctx: Any) -> None:
    _raw().rpush(f"{ctx.namespace}:started:{ctx.task_id}", f"{os.getpid()} {time.time():.6f}")


def noop(ctx: Any) -> bytes:
    return b"ok"


def echo(ctx: Any) -> Any:
    return {"got": ctx.json(), "attempt": ctx.attempt, "pid": os.getpid()}


def spin(ctx: Any) -> bytes:
    """Busy for ever on attempt 1 (stopped by the exception its time limit raises);
    returns on the next."""
    _started(ctx)
    if ctx.attempt == 1:
        while True:
            pass
    return b"second"


def stubborn(ctx: Any) -> bytes:
    """Busy for ever on attempt 1, swallowing every stop: only a kill ends it."""
    _started(ctx)
    if ctx.attempt == 1:
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
    return b"second"


def sleeper(ctx: Any) -> bytes:
    try:  # a stop that comes as soon as "started" is written still runs the finally
        _started(ctx)
        time.sleep(3600)
    finally:
        _raw().rpush(f"{ctx.namespace}:ended:{ctx.task_id}", f"{time.time():.6f}")
    return b"woke"


def nap(ctx: Any) -> bytes:
    """Sleeps the seconds its input says, then returns them."""
    time.sleep(float(ctx.input()))
    return ctx.input()


def tidy(ctx: Any) -> bytes:
    """Sleeps until stopped, then takes half a second to clean up."""
    try:
        _started(ctx)
        time.sleep(3600)
    finally:
        time.sleep(0.5)
        _raw().rpush(f"{ctx.namespace}:ended:{ctx.task_id}", f"{time.time():.6f}")
    return b"woke"


def hog(ctx: Any) -> bytes:
    """Allocates (and touches) memory without bound when its input is b"hog"."""
    if ctx.input() != b"hog":
        time.sleep(0.01)
        return b"fine"
    _started(ctx)
    held = []
    while True:
        held.append(b"x" * (8 << 20))


def crash(ctx: Any) -> bytes:
    """``os._exit(3)`` for input b"exit", a segfault for b"segv", else fine."""
    if ctx.input() == b"exit":
        os._exit(3)
    if ctx.input() == b"segv":
        ctypes.string_at(0)
    return b"fine"


def version(ctx: Any) -> str:
    return VERSION


def touching(ctx: Any) -> bytes:
    ctx.progress({"step": 1})
    ctx.touch(60_000)
    return ctx.result("touched", {"pid": os.getpid()})  # type: ignore[no-any-return]


def limited(ctx: Any) -> bytes:
    """Rate limited on its first start, done on the next."""
    if not _raw().incr(f"{ctx.namespace}:limited:{ctx.task_id}") > 1:
        raise RateLimited(300, "the API said 429")
    return b"after the wait"


def refuse(ctx: Any) -> None:
    raise NonRetryableError("bad input: " + ctx.input().decode())


class _Odd(Exception):
    def __init__(self, code: int, where: str) -> None:  # args do not pickle back
        super().__init__(f"odd {code} at {where}")


class _Mute(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def mute(ctx: Any) -> None:
    raise _Mute()


def odd(ctx: Any) -> None:
    raise _Odd(7, "here")


def quits(ctx: Any) -> bytes:
    """``sys.exit(5)`` for input b"exit", ``KeyboardInterrupt`` for b"interrupt"."""
    if ctx.input() == b"exit":
        sys.exit(5)
    if ctx.input() == b"interrupt":
        raise KeyboardInterrupt
    return b"fine"


def _load_in(pid: int) -> Any:
    if os.getpid() != pid:
        raise ModuleNotFoundError("No module named '__mp_main__'")
    return _Unreadable()


class _Unreadable(Exception):
    """Loads only in the process that made it, as an instance of a class of a script's
    ``__main__`` does (``__mp_main__`` in a handler process)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_load_in, (os.getpid(),))


def unreadable(ctx: Any) -> Any:
    """Returns a value the worker cannot load."""
    return {"value": _Unreadable()}


def ledger(ctx: Any) -> bytes:
    """Commit the run's side effect once (:func:`commit`)."""
    commit(ctx, 0.005)
    return VERSION.encode()


def logs(ctx: Any) -> bytes:
    """Logs at INFO, and an exception with its traceback."""
    log = logging.getLogger("process_app")
    log.info("handling %s", ctx.input().decode())
    try:
        _ = 1 / 0
    except ZeroDivisionError:
        log.exception("a division went wrong")
    return b"logged"


def record(ctx: Any) -> None:
    """A stream record's handler: busy for ever on the first delivery of b"spin"; a
    crash for b"crash"; else the record noted under ``<ns>:records`` with the process."""
    if ctx.payload == b"spin" and ctx.delivery_count == 1:
        while True:
            pass
    if ctx.payload == b"crash":
        os._exit(4)
    _raw().hset(f"{ctx.namespace}:records", ctx.payload, os.getpid())


HANDLERS = {
    name: fn
    for name, fn in globals().items()
    if name
    in (
        "noop",
        "echo",
        "spin",
        "stubborn",
        "sleeper",
        "nap",
        "tidy",
        "hog",
        "crash",
        "version",
        "touching",
        "refuse",
        "limited",
        "logs",
        "odd",
        "mute",
        "ledger",
        "quits",
        "unreadable",
    )
}


def worker(
    client: FloClient, executor: ProcessExecutor | None, concurrency: int, timeout: float
) -> ActionWorker:
    built = client.new_action_worker(
        concurrency=concurrency, action_timeout=timeout, block_ms=1000, executor=executor
    )
    for name, fn in HANDLERS.items():
        built.register_action(name, fn, ActionRegisterOptions(max_retries=2))
    return built


def build(client: FloClient) -> ActionWorker:
    """For ``flo-redis worker process_app:build`` (``--executor process``)."""
    concurrency = int(os.environ.get("PROCESS_APP_CONCURRENCY", "4"))
    return worker(client, None, concurrency, float(os.environ.get("PROCESS_APP_TIMEOUT", "30")))


def commit(ctx: Any, work_s: float) -> None:
    """The side effect of a ledger run: its start counted, ``work_s`` of work, then its
    commit counted once, fenced by its token (a stale hand-out of the run commits
    nothing)."""
    raw = _raw()
    raw.hincrby(f"{ctx.namespace}:starts", ctx.task_id, 1)
    time.sleep(work_s)
    fence = f"{ctx.namespace}:fence:{ctx.task_id}"
    with raw.pipeline() as pipe:
        while True:
            try:
                pipe.watch(fence)
                if int(pipe.get(fence) or 0) > ctx.token:
                    return
                pipe.multi()
                pipe.set(fence, ctx.token)
                pipe.hincrby(f"{ctx.namespace}:ledger", ctx.task_id, 1)
                pipe.execute()
                return
            except redis.WatchError:
                continue
