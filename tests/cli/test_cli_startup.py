"""How ``flo-redis`` fails before it gets going: Ctrl-C while the command still loads or
a worker still starts is one line and exit 130, and a ``rediss://`` URL to a server
without TLS says TLS."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

import pytest
from cli_command import SCRIPT, Command, flo_redis
from polling import eventually


@pytest.mark.parametrize("loaded", ["redis", "flo_redis.client", "flo_redis", "click", "rich"])
async def test_ctrl_c_while_the_command_still_imports_is_one_line(
    redis_url: str, loaded: str
) -> None:
    """SIGINT at moments of the first second, while the console script imports the
    command: each moment is the end of one module's import, told by Python's own
    import-time trace (PYTHONPROFILEIMPORTTIME) as it happens, not guessed from a clock."""
    done = re.compile(rf"\|\s+{re.escape(loaded)}$", re.M)
    args = ["worker", "--url", redis_url, "slow_app:build"]
    cmd = Command(args, {"PYTHONPROFILEIMPORTTIME": "1"}, program=SCRIPT)
    try:
        await eventually(cmd.output, lambda o: done.search(o) is not None, interval=0.01)
        cmd.signal(signal.SIGINT)
        assert cmd.exits(130)
        out = cmd.output()
    finally:
        cmd.close()
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    assert out.splitlines()[-1] == "interrupted"


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
