"""The Grafana dashboard and the Prometheus alert rules of deploy/: the rules pass
Prometheus's own checker and fire when they should (promtool), the dashboard is one Grafana
imports, and every metric either names is one a real exporter or a real worker's /metrics
serves after a known history."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import process_app
import pytest
import yaml
from exporter_scrape import page, serving
from histories import history, streams_history
from polling import eventually, running
from prometheus_client import CollectorRegistry
from promql_names import metric_names, served_names

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    NonRetryableError,
    ProcessExecutor,
    RunStatus,
    StreamContext,
)
from flo_redis.ops.metrics import PrometheusObserver, serve_metrics

pytestmark = pytest.mark.slow  # the exporter as a process, workers serving metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "flo-redis-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "flo-redis.json"
ALERT_CASES = Path(__file__).resolve().parents[1] / "support" / "alert_cases.yml"

# Series Prometheus makes itself for every target, not served by anyone.
PROMETHEUS_MADE = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
SEVERITIES = {"critical", "warning"}


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # the panels of a collapsed row


def dashboard_queries(board: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(board) for t in p.get("targets", [])]
    variables = board["templating"]["list"]
    return exprs + [v["definition"] for v in variables if v["type"] == "query"]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = "promtool is not installed (Debian: apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def test_the_alert_rules_pass_promtools_check() -> None:
    check = subprocess.run(
        [promtool(), "check", "rules", str(RULES)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rules())} rules found" in check.stdout


def test_each_alert_fires_when_it_should_and_only_then(tmp_path: Path) -> None:
    """promtool's rule unit tests (tests/support/alert_cases.yml) over the rules as shipped,
    their annotations left out: promtool compares annotations word for word, and their
    templates are checked by ``promtool check rules``."""
    loaded = yaml.safe_load(RULES.read_text())
    for group in loaded["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
    (tmp_path / RULES.name).write_text(yaml.safe_dump(loaded))
    shutil.copy(ALERT_CASES, tmp_path / ALERT_CASES.name)
    run = subprocess.run(
        [promtool(), "test", "rules", ALERT_CASES.name],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    # Every alert is exercised by a case.
    cases = yaml.safe_load(ALERT_CASES.read_text())["tests"]
    tested = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    assert tested == {rule["alert"] for rule in rules()}


def test_every_alert_says_how_bad_what_and_what_to_do() -> None:
    for rule in rules():
        name = rule["alert"]
        assert rule.get("for"), f"{name} has no for:"
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert rule["annotations"]["summary"], name
        assert "Runbook:" in rule["annotations"]["description"], name
    assert len({rule["alert"] for rule in rules()}) == len(rules())


def test_the_dashboard_is_one_grafana_imports() -> None:
    board = dashboard()
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for name in ("namespace", "action", "stream"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${DS_PROMETHEUS}"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels(board):
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        taken = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                 for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not taken & cells, f"panel {panel['title']!r} overlaps another"
        cells |= taken
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"] and panel.get("description"), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
            assert metric_names(target["expr"]), target["expr"]


async def _worker_page(client: FloClient) -> str:
    """A worker process's /metrics after a known history: runs completed (two outcomes),
    retried and failed; stream records acked and nacked."""
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    server = serve_metrics(0, registry=registry)
    try:
        worker = client.new_action_worker(block_ms=500)
        worker.observer = observer
        options = ActionRegisterOptions(max_retries=2, retry_backoff_ms=10)

        @worker.action("pay", options)
        async def pay(ctx: ActionContext) -> object:
            kind = ctx.input()
            if kind == b"flaky" and ctx.attempt == 1:
                raise RuntimeError("card network timeout")
            if kind == b"final":
                raise NonRetryableError("no such card")
            return ctx.result("approved", {}) if kind == b"approve" else b"paid"

        # A handler process that crashes: replaced, and counted.
        worker.register_action("crunch", process_app.crash, executor=ProcessExecutor(size=1))

        await client.stream.create("orders")
        await client.stream.group_join("orders", "ship", "setup")

        async def ship(ctx: StreamContext) -> None:
            if ctx.payload == b"flaky" and ctx.delivery_count == 1:
                raise RuntimeError("carrier away")

        streamer = client.new_stream_worker(
            stream="orders", group="ship", handler=ship, block_ms=500
        )
        streamer.observer = observer
        await client.action.register("pay", options=options)
        await client.action.register("crunch")
        async with running(worker), running(streamer):
            ids = [(await client.action.invoke("pay", p)).run_id
                   for p in (b"ok", b"approve", b"flaky", b"final")]  # fmt: skip
            await client.action.invoke("crunch", b"exit")
            for payload in (b"ok", b"flaky"):
                await client.stream.append("orders", payload)
            for run_id in ids:
                await eventually(
                    lambda r=run_id: client.action.status(r),
                    lambda s: s.status in (RunStatus.COMPLETED, RunStatus.FAILED),
                )
            text = await eventually(
                lambda: asyncio.to_thread(page, server.url),
                lambda t: (
                    'flo_redis_stream_records_acked_total{group="ship",stream="orders"} 2.0' in t
                    and 'flo_redis_runs_failed_total{action="pay"} 1.0' in t
                    and 'flo_redis_handler_processes_replaced_total{reason="crashed"}' in t
                ),
            )
        return text
    finally:
        server.close()


async def test_every_metric_the_rules_and_the_dashboard_name_is_served(
    client: FloClient, redis_url: str
) -> None:
    await history(client)
    await streams_history(client)
    async with serving(redis_url, client.namespace) as url:
        exporter_sampled, _ = served_names(await asyncio.to_thread(page, url))
    worker_sampled, worker_declared = served_names(await _worker_page(client))
    sampled = exporter_sampled | worker_sampled | PROMETHEUS_MADE
    served = sampled | worker_declared

    rule_names = {n for rule in rules() for n in metric_names(rule["expr"])}
    panel_names = {n for expr in dashboard_queries(dashboard()) for n in metric_names(expr)}
    assert rule_names and panel_names
    # An alert on a series nobody serves never fires: each must be served, with samples.
    assert rule_names - sampled == set()
    # A panel may show a counter that counts nothing yet (released, resent, refused):
    # declared by its family, as Prometheus stores it once it moves.
    assert panel_names - served == set()
    # What the rules and the dashboard watch: every family the exporter and the workers
    # serve (the workers' counters and histograms by their _total and _bucket series).
    exporter_families = {n for n in exporter_sampled if n.startswith("flo_redis_")}
    worker_families = {
        n
        for n in worker_declared
        if n.startswith("flo_redis_") and n.endswith(("_total", "_bucket"))
    }
    assert (exporter_families | worker_families) - rule_names - panel_names == set()
