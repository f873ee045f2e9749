"""``flo-redis batches show`` through the real command: a batch's counts, seal, outcome,
parent and callbacks made, and the first page of its members (runs and nested batches)
with the state of each, in text and in ``--json``; an unknown batch is an error as an
unknown run is; ``runs show`` names a run's batch."""

from __future__ import annotations

import json
from typing import Any

import pytest
from batch_worlds import MANY, batch_world
from cli_runner import cli, with_client

from flo_redis.ops.batch_view import SHOWN


@pytest.fixture
def world(redis_url: str, namespace: str) -> dict[str, Any]:
    return with_client(redis_url, namespace, batch_world)


def show(redis_url: str, namespace: str, batch_id: str, *args: str) -> str:
    """``flo-redis batches show BATCH_ID ARGS``: what it printed, exit 0."""
    done = cli(redis_url, namespace, "batches", "show", batch_id, *args)
    assert done.exit_code == 0, done.output
    return done.output


def row(shown: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is ``first``."""
    line = next(line for line in shown.splitlines() if line.startswith(f"│ {first} "))
    return [cell.strip() for cell in line.strip("│ ").split("│")]


def test_show_gives_the_counts_and_each_member_with_its_state(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    shown = show(redis_url, namespace, world["outer"], "--wide")
    facts = {f: row(shown, f)[1] for f in ("members", "completed", "failed", "pending")}
    assert facts == {"members": "4", "completed": "1", "failed": "1", "pending": "2"}
    assert row(shown, "sealed")[1] == "yes" and row(shown, "callbacks made")[1] == "death"
    assert "outcome" not in shown and "parent batch" not in shown  # not settled, no parent
    assert "members: 4 (2 pending)\n" in shown
    assert row(shown, world["inner"]) == [world["inner"], "batch", "pending"]
    assert row(shown, world["done"]) == [world["done"], "run", "COMPLETED"]
    assert row(shown, world["failed"]) == [world["failed"], "run", "FAILED"]
    assert row(shown, world["waiting"]) == [world["waiting"], "run", "pending"]
    inner = show(redis_url, namespace, world["inner"], "--wide")
    assert row(inner, "parent batch")[1] == world["outer"]
    assert row(inner, "sealed")[1] == "no"
    assert row(inner, world["inner_run"]) == [world["inner_run"], "run", "pending"]
    settled = show(redis_url, namespace, world["settled"], "--wide")
    assert row(settled, "outcome")[1] == "COMPLETED"
    assert row(settled, "callbacks made")[1] == "complete, success"


def test_show_lists_the_first_page_and_counts_the_rest(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    shown = show(redis_url, namespace, world["big"], "--wide")
    assert f"members: {MANY} ({MANY} pending); the first {SHOWN}\n" in shown
    listed = [r for r in world["big_runs"] if f"│ {r} " in shown]
    assert len(listed) == SHOWN
    assert all(row(shown, r)[1:] == ["run", "pending"] for r in listed)


def test_show_json(redis_url: str, namespace: str, world: dict[str, Any]) -> None:
    data = json.loads(show(redis_url, namespace, world["outer"], "--json"))
    members = data.pop("members")
    assert data == {
        "batch_id": world["outer"],
        "total": 4,
        "completed": 1,
        "failed": 1,
        "pending": 2,
        "sealed": True,
        "status": None,
        "parent": None,
        "callbacks": ["death"],
        "members_listed_all": True,
    }
    assert {(m["id"], m["kind"], m["state"]) for m in members} == {
        (world["inner"], "batch", "pending"),
        (world["done"], "run", "COMPLETED"),
        (world["failed"], "run", "FAILED"),
        (world["waiting"], "run", "pending"),
    }
    inner = json.loads(show(redis_url, namespace, world["inner"], "--json"))
    assert (inner["parent"], inner["total"]) == (world["outer"], 1)
    settled = json.loads(show(redis_url, namespace, world["settled"], "--json"))
    assert (settled["status"], settled["callbacks"]) == ("COMPLETED", ["complete", "success"])
    big = json.loads(show(redis_url, namespace, world["big"], "--json"))
    assert (len(big["members"]), big["members_listed_all"]) == (SHOWN, False)


def test_an_unknown_batch_is_an_error_as_an_unknown_run_is(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    batch = cli(redis_url, namespace, "batches", "show", "0" * 32)
    run = cli(redis_url, namespace, "runs", "show", "job:1")
    assert batch.exit_code == run.exit_code == 1, (batch.output, run.output)
    assert f"NotFoundError: batch '{'0' * 32}' not found in namespace" in batch.output


def test_runs_show_names_the_runs_batch(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    run = cli(redis_url, namespace, "runs", "show", world["done"], "--wide").output
    assert row(run, "batch") == ["batch", world["outer"]]
    data = json.loads(cli(redis_url, namespace, "runs", "show", world["done"], "--json").output)
    assert data["batch"] == world["outer"]
    plain = cli(redis_url, namespace, "runs", "show", world["plain"], "--json").output
    assert json.loads(plain)["batch"] is None
