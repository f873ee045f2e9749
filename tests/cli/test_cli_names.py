"""A name typed wrong is said so, with what it may have meant: every command that takes a
namespace, action, stream or group exits 1 with one line on stderr, never an empty table."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from cli_command import flo_redis
from cli_runner import with_client
from histories import streams_history

from flo_redis import FloClient


@pytest.fixture
def names_world(redis_url: str, namespace: str) -> None:
    """Action 'greet', worker 'worker-1' and stream 'events' with group 'billing' in
    ``namespace``."""

    async def build(client: FloClient) -> None:
        await client.action.register("greet")
        await client.worker.register("worker-1", ["greet"])
        await streams_history(client)

    with_client(redis_url, namespace, build)


def refused(done: subprocess.CompletedProcess[str], line: str) -> bool:
    """Whether the command exited 1 with ``line`` on stderr and nothing on stdout."""
    print(done.stdout, done.stderr)
    return done.returncode == 1 and line in done.stderr and done.stdout == ""


ACTION = "no action 'grete' in namespace '{ns}' (did you mean 'greet'?)"
STREAM = "no stream 'evnts' in namespace '{ns}' (did you mean 'events'?)"
GROUP = "no group 'biling' of stream 'events' in namespace '{ns}' (did you mean 'billing'?)"
WORKER = "no worker 'worker-l' in namespace '{ns}' (did you mean 'worker-1'?)"
TYPOS = [
    (("runs", "list", "grete"), ACTION),
    (("runs", "list", "grete", "--json"), ACTION),
    (("runs", "requeue", "grete", "--yes"), ACTION),
    (("runs", "purge", "grete", "--state", "failed", "--yes"), ACTION),
    (("invoke", "grete", "--data", "1"), ACTION),
    (("stats", "grete"), ACTION),
    (("stats", "grete", "--since", "30m", "--json"), ACTION),
    (("quarantine", "list", "--action", "grete"), ACTION),
    (("streams", "info", "evnts"), STREAM),
    (("dead-letters", "list", "evnts", "billing"), STREAM),
    (("dead-letters", "replay", "evnts", "billing", "--yes"), STREAM),
    (("quarantine", "list", "--stream", "evnts", "--group", "billing"), STREAM),
    (("dead-letters", "list", "events", "biling"), GROUP),
    (("dead-letters", "replay", "events", "biling", "--yes"), GROUP),
    (("quarantine", "list", "--stream", "events", "--group", "biling"), GROUP),
    (("workers", "drain", "worker-l", "--yes"), WORKER),
    (("workers", "deregister", "worker-l", "--yes"), WORKER),
]


@pytest.mark.parametrize(("args", "line"), TYPOS, ids=[" ".join(a) for a, _ in TYPOS])
def test_a_typo_in_a_name_says_which_was_meant(
    redis_url: str, namespace: str, names_world: Any, args: tuple[str, ...], line: str
) -> None:
    done = flo_redis(redis_url, namespace, *args)
    assert refused(done, line.format(ns=namespace))


@pytest.mark.parametrize(
    "args",
    [("status",), ("status", "--json"), ("workers", "list"), ("streams", "list"),
     ("runs", "list", "greet"), ("quarantine", "list", "--workers")],
    ids=" ".join,
)  # fmt: skip
def test_a_typo_in_a_namespace_says_which_was_meant(
    redis_url: str, namespace: str, names_world: Any, args: tuple[str, ...]
) -> None:
    typo = namespace[:-1]
    done = flo_redis(redis_url, typo, *args)
    assert refused(done, f"no namespace '{typo}' (did you mean '{namespace}'")


def test_a_health_probe_of_a_typo_says_which_was_meant(
    redis_url: str, namespace: str, names_world: Any
) -> None:
    done = flo_redis(redis_url, namespace, "check", "--action", "grete")
    assert (done.returncode, done.stdout) == (
        1,
        f"unhealthy: no worker of action 'grete' is registered in namespace '{namespace}' "
        "(did you mean 'greet'?)\n",
    )


def test_a_name_like_none_there_lists_what_there_is(
    redis_url: str, namespace: str, names_world: Any
) -> None:
    done = flo_redis(redis_url, namespace, "runs", "list", "zzzzzz")
    assert refused(done, f"no action 'zzzzzz' in namespace '{namespace}'; there are: greet")


def test_names_that_exist_are_read(redis_url: str, namespace: str, names_world: Any) -> None:
    for args in (("runs", "list", "greet"), ("dead-letters", "list", "events", "billing")):
        done = flo_redis(redis_url, namespace, *args)
        assert done.returncode == 0, done.stderr


def test_a_plain_queue_needs_no_registered_namespace(
    redis_url: str, namespace: str, names_world: Any
) -> None:
    done = flo_redis(redis_url, f"{namespace}-queues", "quarantine", "list", "--queue", "mail")
    assert done.returncode == 0, done.stderr
