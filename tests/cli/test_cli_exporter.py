"""``flo-redis exporter`` as a service manager runs it: it says where it serves, and a
SIGTERM or a Ctrl-C stops it in one logged line with exit status 0, its port freed."""

from __future__ import annotations

import re
import signal
import socket
from collections.abc import Callable

import pytest
from cli_command import Command
from polling import eventually


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_stop_signal_is_logged_and_exits_0(
    command: Callable[..., Command], redis_url: str, namespace: str, sig: signal.Signals
) -> None:
    cmd = command("exporter", "--url", redis_url, "--namespace", namespace, "--port", "0")
    out = await eventually(cmd.output, lambda o: "serving http://" in o, timeout=60)
    match = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", out)
    assert match, out
    port = int(match.group(1))
    cmd.signal(sig)
    assert cmd.exits(0)
    out = cmd.output()
    assert f"{sig.name} received: stopping" in out
    assert "Traceback" not in out and "Aborted" not in out
    with socket.socket() as again:  # the port is free once it has exited
        again.bind(("127.0.0.1", port))
