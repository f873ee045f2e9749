"""A blocking client for code that is not asyncio: Django or Flask views, scripts, shells.

``SyncFloClient`` invokes actions, reads, cancels and waits for runs with redis-py's
synchronous client, sending exactly the requests ``FloClient`` sends (the same Lua
scripts and key names, built and decoded by the same code in ``_runs.py``). It is safe
to share between threads (redis-py's pool hands each call its own connection)::

    from flo_redis.sync import SyncFloClient

    flo = SyncFloClient("redis://localhost:6379", namespace="shop")
    run = flo.action.invoke("resize", b'{"image": "a.jpg"}')
    status = flo.action.wait(run.run_id, timeout_ms=10_000)

Workers stay asyncio (``FloClient``); this client takes no work. A ``redis+cluster://``
URL reaches a Redis Cluster, as ``FloClient``'s does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import redis
from redis import exceptions as rex
from redis.backoff import NoBackoff
from redis.cluster import ClusterPubSub, RedisCluster
from redis.retry import Retry

from flo_redis._session.endpoint import (
    MIN_REDIS,
    lowest_version,
    redact,
    unreachable,
    version_tuple,
)
from flo_redis._session.sentinel import (
    NO_PRIMARY,
    connect_sentinel_sync,
    is_sentinel_endpoint,
    no_primary_found_sync,
    parse_sentinel_endpoint,
)
from flo_redis._session.tracer import ProducerTracer, traced
from flo_redis._wire.checks import check_callback, check_count, check_options
from flo_redis._wire.gateway import ACTION_INVOKE, RUN_CANCEL
from flo_redis._wire.keys import ActionKeys, action_keys, action_of_run, check_namespace
from flo_redis._wire.sync_runner import SyncScriptRunner
from flo_redis._wire.translate import redis_errors, translated
from flo_redis.actions import runs as runs
from flo_redis.client import DEFAULT_MAX_PAYLOAD_BYTES, is_cluster_endpoint, normalize_endpoint
from flo_redis.durability import Durability, DurabilityLike, as_durability
from flo_redis.errors import FloError, RedisVersionError
from flo_redis.types import (
    MAX_VALUE_SIZE,
    ActionInvokeOptions,
    ActionInvokeResult,
    ActionRunStatus,
    ActionStatusOptions,
)


class SyncActionOperations:
    """``flo.action`` of a :class:`SyncFloClient`: invoke, status, wait, cancel."""

    def __init__(self, client: SyncFloClient) -> None:
        self._client = client

    def _keys(self, name: str, namespace: str | None) -> ActionKeys:
        ns = self._client.namespace if namespace is None else check_namespace(namespace)
        return action_keys(ns, name)

    def invoke(
        self,
        name: str,
        input_data: bytes,
        options: ActionInvokeOptions | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> ActionInvokeResult:
        """Create a run of ``name``, as ``FloClient.action.invoke`` does (``durability``:
        this write's level, else the client's)."""
        opts = check_options(options, ActionInvokeOptions)
        keys = self._keys(name, opts.namespace)
        limit = self._client.max_payload_bytes
        with traced(self._client.tracer).invoking(keys.namespace, name, 1) as span:
            args, size = runs.invoke_request(keys, input_data, opts, limit, span.context)
            runner = self._client.scripts()
            reply = ACTION_INVOKE.call_sync(runner, keys, args, durability=durability)
            result = runs.invoke_reply(reply, keys, size)
            span.sent((result.run_id,))
        return result

    def status(self, run_id: str, options: ActionStatusOptions | None = None) -> ActionRunStatus:
        """The run's current state; :class:`NotFoundError` for an unknown run."""
        opts = check_options(options, ActionStatusOptions)
        keys = self._keys(action_of_run(run_id), opts.namespace)
        with redis_errors("status"):
            pipe = self._client.checked().pipeline(transaction=False)
            pipe.hget(keys.runs, run_id)
            pipe.zscore(keys.delayed, run_id)
            raw, due = pipe.execute()
        status = runs.status_reply(run_id, keys, raw, due)
        field = runs.group_field(raw)
        if field is None:
            return status
        with redis_errors("status"):
            return runs.with_group(status, self._client.checked().hget(keys.graph, field))

    def cancel(self, run_id: str, namespace: str | None = None) -> None:
        """Cancel a run that has not finished, as ``FloClient.action.cancel`` does: a
        waiting or delayed run ends CANCELLED at once, a running one too, and its worker
        is told to cancel the handler. :class:`ConflictError` if the run already
        finished, :class:`NotFoundError` if unknown."""
        keys = self._keys(action_of_run(run_id), namespace)
        conn = self._client.checked()
        with redis_errors("cancel"):
            raw = conn.hget(keys.runs, run_id)
        args, tail = runs.cancel_request(run_id, keys, raw)
        reply = RUN_CANCEL.call_sync(self._client.scripts(), keys, args, tail=tail)
        notice = runs.cancel_reply(reply, keys, run_id)
        if notice is not None:  # best effort: the holder's next touch tells it anyway
            with contextlib.suppress(FloError), redis_errors("cancel notice"):
                conn.spublish(*notice)

    def wait(
        self,
        run_id: str,
        timeout_ms: int = runs.DEFAULT_WAIT_MS,
        namespace: str | None = None,
        *,
        on_progress: Callable[[ActionRunStatus], object] | None = None,
    ) -> ActionRunStatus:
        """Block until the run ends and return its status, woken by the script that ends
        it; :class:`WaitTimeoutError` (with the run's status read at the deadline) once
        ``timeout_ms`` has passed first. Holds one connection of the pool while it
        waits. ``on_progress`` is called (in this thread) with the run's status each
        time its handler reported a new progress value, woken by that report, as
        ``FloClient.action.wait`` does."""
        timeout_ms = runs.check_wait_ms(timeout_ms)
        check_callback("on_progress", on_progress)
        keys = self._keys(action_of_run(run_id), namespace)
        options = ActionStatusOptions(namespace=namespace)
        deadline = time.monotonic() + timeout_ms / 1000.0
        expected = run_id.encode()
        seen = runs.NO_PROGRESS
        pubsub = self._client.checked().pubsub()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
        try:
            with redis_errors("wait"):
                pubsub.ssubscribe(keys.ended)
                # Subscribed before the read: an end published after it is never missed.
                _next(pubsub, max(deadline - time.monotonic(), 0.0), "ssubscribe")
            while True:
                status = self.status(run_id, options)
                if on_progress is not None and runs.progress_mark(status) != seen:
                    seen = runs.progress_mark(status)
                    on_progress(status)
                if status.status in runs.FINAL:
                    return status
                remaining = deadline - time.monotonic()
                if remaining <= 0:  # the status just read: what the run is now
                    raise runs.wait_timed_out(status, timeout_ms)
                while remaining > 0:  # until a message names this run, or the deadline
                    with redis_errors("wait"):
                        message = _next(pubsub, remaining, "smessage")
                    if message is not None and message.get("data") == expected:
                        break
                    remaining = deadline - time.monotonic()
        finally:
            pubsub.close()


def _next(pubsub: Any, timeout: float, kind: str) -> dict[str, Any] | None:
    """The next message of ``kind`` within ``timeout`` seconds, or None (on a cluster
    the shard channel's messages come from the node owning its slot)."""
    end = time.monotonic() + timeout
    read = pubsub.get_sharded_message if isinstance(pubsub, ClusterPubSub) else pubsub.get_message
    while True:
        message = read(timeout=max(end - time.monotonic(), 0.0))
        if message is not None and message.get("type") == kind:
            return message  # type: ignore[no-any-return]
        if time.monotonic() >= end:
            return None


class SyncFloClient:
    """A blocking flo-redis client for producers: ``action.invoke``, ``action.status``,
    ``action.wait``, ``action.cancel``. Connections are made on first use; :meth:`close`
    (or ``with``) releases them. ``durability``: the level of its invokes
    (:class:`~flo_redis.durability.Durability`), unless an invoke names its own."""

    def __init__(
        self,
        endpoint: str,
        *,
        namespace: str = "default",
        timeout_ms: int = 5000,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        durability: DurabilityLike = Durability.PRIMARY,
    ) -> None:
        url = normalize_endpoint(endpoint)
        level = as_durability(durability)
        check_count("timeout_ms", timeout_ms, 1)
        check_count("max_payload_bytes", max_payload_bytes, 1, MAX_VALUE_SIZE)
        self.namespace = check_namespace(namespace)
        self.max_payload_bytes = max_payload_bytes
        # Called around each invoke (flo_redis.ops.tracing); None: invokes store no trace.
        self.tracer: ProducerTracer | None = None
        kwargs: dict[str, Any] = {
            "socket_timeout": timeout_ms / 1000.0,
            "socket_connect_timeout": timeout_ms / 1000.0,
            "retry": Retry(NoBackoff(), 0),
        }
        if not url.startswith("unix://"):
            kwargs["socket_keepalive"] = True
        self.redis: redis.Redis | RedisCluster
        if is_cluster_endpoint(url):
            scheme = url.split("://", 1)[0]
            plain = scheme.removesuffix("+cluster") + url[len(scheme) :]
            self.redis = RedisCluster.from_url(plain, **kwargs)
        elif is_sentinel_endpoint(url):
            self.redis = connect_sentinel_sync(parse_sentinel_endpoint(url, redact(url)), kwargs)
        else:
            self.redis = redis.Redis.from_url(url, **kwargs)
        # How this client's scripts are sent (its own: no other client shares it).
        self.runner = SyncScriptRunner(self.redis, level)
        self.action = SyncActionOperations(self)
        self._version_checked = False
        self._endpoint = url

    def checked(self) -> redis.Redis | RedisCluster:
        """The connection, once the server it reaches was checked (the first call asks
        for its version): :class:`RedisVersionError` for a server older than 7.0,
        :class:`ConnectionFailedError` when nothing answers, as ``FloClient`` does."""
        if not self._version_checked:
            version = _server_version(self.redis, self._endpoint)
            if version_tuple(version) < MIN_REDIS:
                raise RedisVersionError(version)
            level = self.runner.durability
            if level.waits:
                level.check_server(version)
            self.runner.server_version = version
            self._version_checked = True
        return self.redis

    def scripts(self) -> SyncScriptRunner:
        """The script runner, once the server was checked (:meth:`checked`)."""
        self.checked()
        return self.runner

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> SyncFloClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _server_version(conn: redis.Redis | RedisCluster, endpoint: str) -> str:
    """The lowest ``redis_version`` among the server (every primary of a cluster), as
    the asyncio client reads it when it connects."""
    try:
        if isinstance(conn, RedisCluster):
            return lowest_version(conn.info("server", target_nodes=RedisCluster.PRIMARIES))
        info: dict[str, Any] = conn.info("server")
        return str(info.get("redis_version", "0"))
    except NO_PRIMARY as exc:
        raise no_primary_found_sync(conn) from exc  # type: ignore[arg-type]
    except (rex.ConnectionError, rex.TimeoutError, rex.RedisClusterException, OSError) as exc:
        raise unreachable(endpoint, exc) from exc
    except rex.RedisError as exc:
        raise translated("connect (INFO server: the server's version)", exc) from exc


__all__ = ["SyncActionOperations", "SyncFloClient"]
