"""A password in the Redis URL is shown nowhere: not in the errors of a bad URL, of a
refused log-in or of a Redis that does not answer, not in any error of the fuzzed public
calls, not in a log line (DEBUG included), a repr, the command's output or a worker
process's command line."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from polling import eventually
from public_calls import BAD, public_calls, valid, valid_call  # noqa: F401

from flo_redis import FloClient, FloError
from flo_redis._session.endpoint import normalize_endpoint, redact
from flo_redis.sync import SyncFloClient
from flo_redis.testing import RedisServer
from flo_redis.types import WorkerListOptions

PASSWORD = "s3cretPW-kept-out-of-sight"
TESTS = Path(__file__).resolve().parents[1] / "support"
# Refused before anything is sent: a bad port, scheme, database path, IPv6 bracket; a
# password with an unencoded '/', or in the query; a unix socket with no path.
BAD_URLS = [
    f"redis://admin:{PASSWORD}@127.0.0.1:63799x",
    f"rediz://admin:{PASSWORD}@127.0.0.1:6379",
    f"redis://admin:{PASSWORD}@127.0.0.1:6379/abc",
    f"redis://admin:{PASSWORD}@[::1",
    f"redis://admin:{PASSWORD}/x@127.0.0.1:6379",
    f"redis://{PASSWORD}@127.0.0.1:6379/x",
    f"redis://127.0.0.1:6379/x?password={PASSWORD}",
    f"unix://admin:{PASSWORD}@",
    f"admin:{PASSWORD}@127.0.0.1:bad",
]


def shown_nowhere(*texts: object) -> None:
    for text in texts:
        assert PASSWORD not in str(text), text


@pytest.fixture(scope="module")
def secret_url(server: RedisServer) -> str:
    """A user whose password is PASSWORD, on the module's own server."""
    admin = redis.Redis.from_url(server.url)
    try:
        admin.execute_command(
            "ACL", "SETUSER", "flo-secret", "on", f">{PASSWORD}", "~*", "&*", "+@all"
        )
    finally:
        admin.close()
    return server.url.replace("redis://", f"redis://flo-secret:{PASSWORD}@")


@pytest.fixture
async def client(secret_url: str, namespace: str) -> AsyncIterator[FloClient]:
    """The fuzz suite's client, logged in with the password (debug logging on)."""
    async with FloClient(secret_url, namespace=namespace, debug=True) as c:
        yield c


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog
    for record in caplog.records:
        shown_nowhere(record.getMessage(), record.exc_text or "", record.args)
    shown_nowhere(caplog.text)


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_url_is_refused_without_its_password(url: str, logs: Any) -> None:
    for make in (FloClient, SyncFloClient, normalize_endpoint):
        with pytest.raises(FloError) as caught:
            make(url)
        shown_nowhere(caught.value, repr(caught.value), caught.value.__cause__)
    with pytest.raises(FloError) as caught:
        FloClient(url, cluster=True)
    shown_nowhere(caught.value)


@pytest.mark.parametrize("url", BAD_URLS)
def test_the_command_names_a_bad_url_without_its_password(url: str) -> None:
    for args in (["status"], ["runs", "list", "job"], ["check", "--worker", "w"]):
        done = subprocess.run(
            [sys.executable, "-m", "flo_redis.cli", *args, "--url", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1, done.stderr
        assert "endpoint" in done.stdout + done.stderr
        shown_nowhere(done.stdout, done.stderr)


async def test_connection_failures_keep_the_password_out(
    secret_url: str, namespace: str, logs: Any
) -> None:
    wrong = secret_url.replace(PASSWORD, PASSWORD + "-wrong")
    gone = f"redis://flo-secret:{PASSWORD}@127.0.0.1:1"
    query = f"redis://127.0.0.1:1/0?password={PASSWORD}"
    for url in (wrong, gone, query):
        client = FloClient(url, namespace=namespace, debug=True)
        shown_nowhere(repr(client.settings), repr(client), repr(client.session))
        with pytest.raises(FloError) as caught:
            await client.connect()
        shown_nowhere(caught.value, repr(caught.value))
        with pytest.raises(FloError) as sync_caught:
            SyncFloClient(url, namespace=namespace).action.status("job:1")
        shown_nowhere(sync_caught.value)


async def test_no_error_or_log_line_of_the_fuzzed_calls_holds_the_password(
    client: FloClient,
    valid: dict[str, Any],  # noqa: F811 - public_calls' fixture
    logs: Any,
) -> None:
    """The public calls (tests/support/public_calls.py), each argument replaced by each bad
    value, on a client logged in with the password."""
    said: list[str] = [repr(client), repr(client.settings), repr(client.session)]
    for group, name in public_calls():
        method, params, base = valid_call(client, group, name, valid)
        for p in params:
            for bad in BAD:
                try:
                    await asyncio.wait_for(method(**{**base, p.name: bad}), 5)
                except Exception as exc:
                    said += [str(exc), repr(exc), str(exc.__cause__)]
    worker = client.new_action_worker()
    said += [repr(worker), repr(vars(worker))]
    assert len(said) > 100
    shown_nowhere(*said)


def test_the_commands_keep_it_out(secret_url: str, namespace: str) -> None:
    for args in (["status"], ["runs", "list", "job"], ["workers", "list"]):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "flo_redis.cli",
                *args,
                "--url",
                secret_url,
                "--namespace",
                namespace,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode in (0, 1), done.stderr
        shown_nowhere(done.stdout, done.stderr)


async def test_worker_processes_keep_it_out(command: Any, secret_url: str, namespace: str) -> None:
    cmd = command(
        "worker", "--url", secret_url, "--namespace", namespace, "--processes", "2",
        "--log-level", "DEBUG", "cli_app:build",
    )  # fmt: skip
    async with FloClient(secret_url, namespace=namespace) as client:

        async def registered() -> int:
            return len((await client.worker.list(WorkerListOptions(limit=10))).workers)

        await eventually(registered, lambda n: n == 2, timeout=60)
    # A command line is readable by every user of the machine: the children's hold no
    # password (they are given the URL in their environment).
    children = [
        pid for pid in os.listdir("/proc") if pid.isdigit() and _parent(pid) == cmd.proc.pid
    ]
    assert len(children) == 2
    for pid in children:
        shown_nowhere(_cmdline(pid))
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)
    shown_nowhere(cmd.output())
    assert "running 1 worker(s) on redis://flo-secret:***@" in cmd.output()


def _cmdline(pid: str) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")


def _parent(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_redact_hides_the_password_and_keeps_the_rest() -> None:
    assert redact(f"redis://admin:{PASSWORD}@h:6379/0") == "redis://admin:***@h:6379/0"
    assert redact(f"rediss://:{PASSWORD}@h") == "rediss://:***@h"
    assert redact(f"redis://{PASSWORD}@h") == "redis://***@h"  # a password where the user goes
    assert redact(f"redis://u:p@ss/{PASSWORD}@h") == "redis://u:***@h"
    assert redact(f"redis://h/0?db=1&password={PASSWORD}&ssl_password=x") == (
        "redis://h/0?db=1&password=***&ssl_password=***"
    )
    assert redact("redis://h:6379/0") == "redis://h:6379/0"
    assert re.fullmatch(r"unix://:\*\*\*@/tmp/r\.sock", redact(f"unix://:{PASSWORD}@/tmp/r.sock"))
