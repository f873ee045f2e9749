"""``--json`` on every command that is not a server: what a change did, as one object on
stdout for scripts; a confirmation is asked on stderr, so stdout stays JSON."""

from __future__ import annotations

import json
from typing import Any

import click
from cli_command import flo_redis

from flo_redis.cli import main

# Commands that serve until stopped: they log (worker --log-format json), not answer.
SERVERS = {"worker", "dashboard", "exporter"}


def leaves(group: click.Group, path: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= leaves(command, f"{path}{name} ")
        elif name not in SERVERS:
            found[path + name] = command
    return found


def test_every_command_but_the_servers_takes_json() -> None:
    without = [
        path
        for path, command in leaves(main).items()
        if not any("--json" in p.opts for p in command.params)
    ]
    assert without == []


def answer(redis_url: str, namespace: str, *args: str, stdin: bytes = b"") -> Any:
    done = flo_redis(redis_url, namespace, *args, "--json", stdin=stdin)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_changes_say_what_they_did(redis_url: str, namespace: str, world: dict[str, Any]) -> None:
    # Asked on stderr, answered on stdin: stdout is the JSON alone.
    requeued = answer(redis_url, namespace, "runs", "requeue", "job", stdin=b"y\n")
    assert requeued == {"action": "job", "requeued": 3, "calls": 1}
    purged = answer(redis_url, namespace, "runs", "purge", "job", "--state", "completed", "-y")
    assert purged == {"action": "job", "purged": 3, "state": "completed", "calls": 1}
    replayed = answer(redis_url, namespace, "dead-letters", "replay", "events", "billing", "-y")
    assert (replayed["replayed"], len(replayed["ids"])) == (1, 1)
    drained = answer(redis_url, namespace, "workers", "drain", "w1", "-y")
    assert drained == {"worker_id": "w1", "draining": True}
    gone = answer(redis_url, namespace, "workers", "deregister", "w1", "-y")
    assert gone == {"worker_id": "w1", "deregistered": True}
    deleted = answer(redis_url, namespace, "quarantine", "delete", "--workers", "--all", "-y")
    assert deleted == {"deleted": 0}


def test_a_probe_answers_in_json_and_by_its_exit_code(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    # w1's process (the test's client) is gone: unhealthy.
    done = flo_redis(redis_url, namespace, "check", "--worker", "w1", "--json")
    assert done.returncode == 1, done.stderr
    shown = json.loads(done.stdout)
    assert shown["healthy"] is False and shown["why"].startswith("worker w1 is gone")
