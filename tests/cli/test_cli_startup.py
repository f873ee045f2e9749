"""How ``flo-redis`` fails before it gets going: Ctrl-C while a worker still starts is
one line and exit 130, and a ``rediss://`` URL to a server without TLS says TLS."""

from __future__ import annotations

import signal
from collections.abc import Callable

from cli_command import Command, flo_redis
from polling import eventually


async def test_ctrl_c_while_a_worker_starts_is_one_line(
    command: Callable[..., Command], redis_url: str
) -> None:
    cmd = command("worker", "--url", redis_url, "slow_app:build")
    await eventually(lambda: "slow_app: loading" in cmd.output(), timeout=60, interval=0.1)
    cmd.signal(signal.SIGINT)
    assert cmd.exits(130)
    out = cmd.output()
    assert "Traceback" not in out and "Aborted" not in out
    assert out.splitlines()[-1] == "interrupted"


def test_tls_to_a_server_without_it_says_so(redis_url: str, namespace: str) -> None:
    tls_url = redis_url.replace("redis://", "rediss://", 1)
    done = flo_redis(tls_url, namespace, "status")
    assert done.returncode == 1
    assert "TLS with Redis at" in done.stderr and "answers without TLS" in done.stderr
    assert "docker compose" not in done.stderr
