"""Tables in an 80-column terminal: no line wider, no header folded, no id cut (they are
copied into the next command); the columns left out are named, and ``--wide`` shows
every one."""

from __future__ import annotations

import json
from typing import Any

from cli_command import flo_redis
from rich.cells import cell_len

NARROW = {"COLUMNS": "80"}


def narrow(redis_url: str, namespace: str, *args: str) -> str:
    done = flo_redis(redis_url, namespace, *args, env=NARROW)
    assert done.returncode == 0, done.stderr
    wider = [line for line in done.stdout.splitlines() if cell_len(line) > 80]
    assert wider == [], done.stdout
    return done.stdout


def test_status_fits_and_names_what_it_leaves_out(
    redis_url: str, namespace: str, world: dict[str, Any]
) -> None:
    shown = narrow(redis_url, namespace, "status")
    for header in ("action", "pending", "delayed", "running", "completed", "failed", "worker",
                   "status", "heartbeat", "stream", "group", "lag", "dead letters"):  # fmt: skip
        assert f" {header} " in shown, header
    assert "--wide also shows: timed out, on parents, set aside, done/h, failed/h" in shown
    wide = flo_redis(redis_url, namespace, "status", "--wide", env=NARROW).stdout
    assert " timed out " in wide and " on parents " in wide and " failed/h " in wide
    assert "--wide also shows" not in wide


def test_ids_are_printed_whole(redis_url: str, namespace: str, world: dict[str, Any]) -> None:
    runs = narrow(redis_url, namespace, "runs", "list", "job", "--state", "failed")
    for run_id in (world["expired"], *world["failed"]):
        assert f" {run_id} " in runs
    listed = flo_redis(redis_url, namespace, "dead-letters", "list", "events", "billing", "--json")
    [letter] = json.loads(listed.stdout)
    letter_id = f"{letter['id']['timestamp_ms']}-{letter['id']['sequence']}"
    letters = narrow(redis_url, namespace, "dead-letters", "list", "events", "billing")
    assert f" {letter_id} " in letters


def test_every_table_fits(redis_url: str, namespace: str, world: dict[str, Any]) -> None:
    for args in (["workers", "list"], ["streams", "list"], ["streams", "info", "events"],
                 ["runs", "show", world["expired"]], ["quarantine", "list", "--action", "job"],
                 ["runs", "list", "job", "--state", "delayed"]):  # fmt: skip
        narrow(redis_url, namespace, *args)
