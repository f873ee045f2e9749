"""``flo-redis runs show`` through the real command: the graph around a run, its parents
with their policy and state (waiting, how each ended, not found) and the runs that depend
on it, a page of each with how many there are, in text and in ``--json``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cli_runner import cli, with_client
from run_graphs import MANY, MISSING, graph_world

from flo_redis.ops import run_graph
from flo_redis.ops.run_graph import SHOWN


@pytest.fixture
def graph(redis_url: str, namespace: str) -> dict[str, Any]:
    return with_client(redis_url, namespace, graph_world)


def show(redis_url: str, namespace: str, run_id: str, *args: str) -> str:
    """``flo-redis runs show RUN_ID ARGS``: what it printed, exit 0."""
    done = cli(redis_url, namespace, "runs", "show", run_id, *args)
    assert done.exit_code == 0, done.output
    return done.output


def row(shown: str, run_id: str) -> list[str]:
    """The cells of the table row that names ``run_id``."""
    line = next(line for line in shown.splitlines() if f" {run_id} " in line)
    return [cell.strip() for cell in line.strip("│ ").split("│")]


def test_show_lists_each_parent_with_its_policy_and_state(
    redis_url: str, namespace: str, graph: dict[str, Any]
) -> None:
    shown = show(redis_url, namespace, graph["child"], "--wide")
    assert "parents: 4 (1 waiting)\n" in shown
    assert row(shown, graph["done"]) == [graph["done"], "fail", "COMPLETED"]
    assert row(shown, graph["failed"]) == [graph["failed"], "run", "FAILED"]
    assert row(shown, graph["waiting"]) == [graph["waiting"], "fail", "waiting"]
    assert row(shown, MISSING) == [MISSING, "ignore", "not found"]
    assert "dependents:" not in shown  # none wait for it
    # A parent lists the runs waiting for it; a run with neither shows no graph.
    parent = show(redis_url, namespace, graph["waiting"], "--wide")
    assert "dependents: 1\n" in parent and row(parent, graph["child"]) == [graph["child"]]
    assert "parents:" not in parent
    alone = show(redis_url, namespace, graph["crowd"][0], "--wide")
    assert "dependents: 1\n" in alone
    plain = show(redis_url, namespace, graph["plain"])
    assert "parents:" not in plain and "dependents:" not in plain


def test_show_lists_the_first_page_and_counts_the_rest(
    redis_url: str, namespace: str, graph: dict[str, Any]
) -> None:
    wide = show(redis_url, namespace, graph["wide"], "--wide")
    assert f"dependents: {MANY}; the first {SHOWN}\n" in wide
    children = sorted(graph["children"])  # in id order
    assert all(f" {c} " in wide for c in children[:SHOWN])
    assert not any(c in wide for c in children[SHOWN:])
    crowded = show(redis_url, namespace, graph["crowded"], "--wide")
    assert f"parents: {MANY} ({MANY} waiting); the first {SHOWN}\n" in crowded
    crowd = sorted(graph["crowd"])
    assert all(row(crowded, p)[1:] == ["fail", "waiting"] for p in crowd[:SHOWN])
    assert not any(p in crowded for p in crowd[SHOWN:])


def test_show_json_gives_the_graph(redis_url: str, namespace: str, graph: dict[str, Any]) -> None:
    def shown(run_id: str) -> dict[str, Any]:
        out = show(redis_url, namespace, run_id, "--json")
        return dict(json.loads(out))

    child = shown(graph["child"])
    assert (child["parents"], child["waiting_on"], child["has_dependents"]) == (4, 1, False)
    assert {(p["run_id"], p["on_failure"], p["state"]) for p in child["graph"]["parents"]} == {
        (graph["done"], "fail", "COMPLETED"),
        (graph["failed"], "run", "FAILED"),
        (graph["waiting"], "fail", "waiting"),
        (MISSING, "ignore", "not found"),
    }
    assert child["graph"]["parents_after"] is None and child["graph"]["dependents"] == []
    wide = shown(graph["wide"])["graph"]
    children = sorted(graph["children"])
    assert wide["dependents"] == children[:SHOWN]
    # where the next page starts: the cursor names the last child shown
    assert wide["dependents_after"].split("\x00")[0] == children[SHOWN - 1]
    assert (wide["dependents_count"], wide["dependents_counted_all"]) == (MANY, True)
    crowded = shown(graph["crowded"])["graph"]
    assert [p["run_id"] for p in crowded["parents"]] == sorted(graph["crowd"])[:SHOWN]
    assert crowded["parents_after"] == sorted(graph["crowd"])[SHOWN - 1]
    none = shown(graph["plain"])["graph"]
    assert none == {
        "parents": [],
        "parents_after": None,
        "dependents": [],
        "dependents_after": None,
        "dependents_count": 0,
        "dependents_counted_all": True,
    }


def test_dependents_are_counted_up_to_a_bound(
    redis_url: str, namespace: str, graph: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Counted 2 a call past the page, the count stops at 22 of the 25: at least that many.
    monkeypatch.setattr(run_graph, "COUNTED", SHOWN + 2)
    monkeypatch.setattr(run_graph, "_COUNT_PAGE", 2)
    wide = show(redis_url, namespace, graph["wide"])
    assert f"dependents: {SHOWN + 2}+; the first {SHOWN}\n" in wide
    data = json.loads(show(redis_url, namespace, graph["wide"], "--json"))["graph"]
    assert (data["dependents_count"], data["dependents_counted_all"]) == (SHOWN + 2, False)
    assert data["dependents_after"].split("\x00")[0] == sorted(graph["children"])[SHOWN - 1]
