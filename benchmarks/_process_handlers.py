"""The handlers of the ``process`` workload (benchmarks/process.py), the same functions
for every system it measures.

Module-level plain ``def``s, so a process pool can pickle them by reference, importing
nothing of flo-redis or Celery (Celery's side may run from an interpreter of its own).
Each takes any arguments and ignores them: flo-redis calls a handler with its context,
Celery calls a task with the arguments it was sent (none here).

Every call ends by counting itself: one ``INCR`` of the counter key, a Redis round trip
on a redis-py client of the calling process (made on its first call, after any fork). The
call that brings the count to 1 and the one that brings it to N also ``SET``
``<counter>:1`` and ``<counter>:<N>`` to ``time.time()`` (one clock: the machine's), so
the benchmark reads the rate from the first handler call to the N-th. The counter's key,
N and the Redis URL come from the environment, ``FLO_BENCH_COUNTER`` =
``<url> <key> <N>``, which worker processes and their children inherit.
"""

from __future__ import annotations

import os
import time

import redis

ENV = "FLO_BENCH_COUNTER"
WORK_S = 0.001  # the CPU-bound handler's work: 1 ms of the calling thread's CPU time

_client: redis.Redis | None = None
_client_pid = 0
_key = ""
_n = 0


def counter_env(url: str, key: str, n: int) -> dict[str, str]:
    """The environment entry that points the handlers at counter ``key`` counting to ``n``."""
    return {ENV: f"{url} {key} {n}"}


def _counter() -> redis.Redis:
    global _client, _client_pid, _key, _n
    if _client is None or _client_pid != os.getpid():
        url, _key, n = os.environ[ENV].split(" ")
        _n = int(n)
        _client = redis.Redis.from_url(url)
        _client_pid = os.getpid()
    return _client


def _count() -> None:
    client = _counter()
    calls = int(client.incr(_key))
    if calls == 1 or calls == _n:
        client.set(f"{_key}:{calls}", repr(time.time()))


def burn(seconds: float) -> None:
    """Spin until the calling thread has used ``seconds`` of CPU time (``thread_time``:
    time it waits for a core, or for the GIL, does not count)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def noop(*_: object) -> None:
    """Nothing, then the count."""
    _count()


def cpu_1ms(*_: object) -> None:
    """1 ms of CPU-bound work (:func:`burn`), then the count."""
    burn(WORK_S)
    _count()


HANDLERS = {"noop": noop, "cpu_1ms": cpu_1ms}
