"""``flo-redis invoke`` as run from a shell: every option a run takes, and an input from
a file or stdin, as large as the client takes (a command line stops near 128 KB)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_command import flo_redis
from cli_runner import with_client

from flo_redis import FloClient
from flo_redis.types import ActionRunStatus


@pytest.fixture
def action(redis_url: str, namespace: str) -> str:
    with_client(redis_url, namespace, lambda c: c.action.register("resize"))
    return "resize"


def status(redis_url: str, namespace: str, run_id: str) -> ActionRunStatus:
    return with_client(redis_url, namespace, lambda c: c.action.status(run_id))


def invoked(redis_url: str, namespace: str, *args: str, stdin: bytes = b"") -> str:
    """The id ``invoke --json ARGS`` printed."""
    done = flo_redis(redis_url, namespace, "invoke", "resize", *args, "--json", stdin=stdin)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["run_id"])


def test_priority_delay_and_idempotency_key_reach_the_run(
    redis_url: str, namespace: str, action: str
) -> None:
    run_id = invoked(redis_url, namespace, "--priority", "7", "--delay", "600")
    run = status(redis_url, namespace, run_id)
    assert run.priority == 7
    assert run.due_at_ms is not None and run.due_at_ms - run.created_at_ms >= 599_000
    first = invoked(redis_url, namespace, "--idempotency-key", "order-17")
    again = invoked(redis_url, namespace, "--idempotency-key", "order-17", "--data", "2")
    assert again == first


async def taken_input(client: FloClient) -> bytes:
    """The input of the run a worker takes next."""
    task = (await client.worker.await_task("w1", ["resize"])).task
    assert task is not None
    return task.payload


def test_input_from_a_file_and_from_stdin_beyond_an_arguments_size(
    redis_url: str, namespace: str, action: str, tmp_path: Path
) -> None:
    big = json.dumps({"pixels": "x" * 300_000}).encode()
    with_client(redis_url, namespace, lambda c: c.worker.register("w1", ["resize"]))
    (tmp_path / "input.json").write_bytes(big)
    for args, stdin in ((["--data", f"@{tmp_path / 'input.json'}"], b""), (["--data", "-"], big)):
        invoked(redis_url, namespace, *args, stdin=stdin)
        assert with_client(redis_url, namespace, taken_input) == big


def test_an_input_that_is_not_json_creates_no_run(
    redis_url: str, namespace: str, action: str
) -> None:
    done = flo_redis(redis_url, namespace, "invoke", "resize", "--data", "-", stdin=b"{nope")
    assert done.returncode == 2 and "not UTF-8 JSON" in done.stderr
    counts = with_client(redis_url, namespace, lambda c: c.action.counts("resize"))
    assert counts.pending == 0
