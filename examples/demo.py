"""The demo: workers processing runs against the Redis at REDIS_URL.

    python examples/demo.py

Starts the example workers as separate processes, runs the producer, prints what
happened, then stops the workers with SIGTERM (they finish what they hold first). If no
Redis answers at REDIS_URL (default redis://localhost:6379) and `redis-server` is on the
PATH, a private one is started for the demo's run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from flo_redis.testing import RedisServer

HERE = Path(__file__).resolve().parent
REDIS_URL = os.environ.get("REDIS_URL", "redis://localhost:6379")

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


def main() -> int:
    url, private = REDIS_URL, None
    if not redis_answers(url):
        if shutil.which("redis-server") is None:
            host = urlsplit(url).netloc or url
            print(
                f"demo: no Redis answers at {host}. Start one with `docker compose up -d` "
                "(in this checkout) or your package manager's redis-server "
                "(e.g. `apt-get install -y redis-server && redis-server --daemonize yes`), "
                "or set REDIS_URL to your Redis.",
                file=sys.stderr,
            )
            return 2
        private = RedisServer().start()
        url = private.url
        print(f"demo: no Redis at {REDIS_URL}; started a private redis-server at {url}")
    env = {**os.environ, "REDIS_URL": url, "FLO_NAMESPACE": f"demo-{os.getpid()}"}
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
        if private is not None:
            private.discard()


if __name__ == "__main__":
    sys.exit(main())
