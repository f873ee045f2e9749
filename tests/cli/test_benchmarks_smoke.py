"""The benchmark entry point runs and writes its JSON (figures are not asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench(tmp_path: Path, *args: str, redis_url: str | None = None) -> tuple[str, Any]:
    """``python -m benchmarks ARGS`` (its own private redis-server unless ``redis_url``):
    what it printed and the results it wrote."""
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    if redis_url:
        env["REDIS_URL"] = redis_url
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, json.loads(out.read_text())


def test_benchmarks_quick_invoke(redis_url: str, tmp_path: Path) -> None:
    stdout, results = bench(tmp_path, "--quick", "--only", "invoke", redis_url=redis_url)
    invoke = results["workloads"]["invoke"]
    assert "error" not in invoke
    assert invoke["metrics"]["single_per_s"]["median"] > 0
    assert "invoke" in stdout


def test_benchmarks_durability_measures_both_levels(tmp_path: Path) -> None:
    """The durability workload starts its own primary and replica and measures invoke
    latency and worker throughput at each level; the figures are not judged."""
    stdout, results = bench(tmp_path, "--quick", "--only", "durability")
    durability = results["workloads"]["durability"]
    assert "error" not in durability
    for level in ("primary", "replicated"):
        for metric in ("invoke_p50_ms", "invoke_p99_ms", "runs_per_s"):
            assert durability["metrics"][f"{level}_{metric}"]["median"] > 0
    assert "replicated_runs_per_s" in stdout


def test_benchmarks_targets_beside_baselines(tmp_path: Path) -> None:
    """Every baseline and its flo-redis counterpart run (tiny sizes, a private
    redis-server) and each target gets a ratio and a verdict; the figures are not judged."""
    stdout, results = bench(tmp_path, "--quick", "--only", "targets", "--targets-n", "300")
    targets = results["targets"]
    for key, figure in targets["figures"].items():
        assert "error" not in figure, (key, figure["error"])
        assert all(m["median"] > 0 for m in figure["metrics"].values()), key
    verdicts = {t["title"]: t["verdict"] for t in targets["targets"]}
    assert set(verdicts.values()) <= {"PASS", "MISS", "info"}
    assert verdicts["pickup p50 (idle, one at a time)"] in ("PASS", "MISS")
    assert "beside its baselines" in stdout


def test_benchmarks_backlog_check(tmp_path: Path) -> None:
    """The backlog workload reads the slowest script call from SLOWLOG and the checks
    table judges it."""
    stdout, results = bench(tmp_path, "--quick", "--only", "backlog")
    assert results["workloads"]["backlog"]["metrics"]["slowest_script_ms"]["median"] >= 0
    (check,) = results["checks"]
    assert check["verdict"] in ("PASS", "MISS")
    assert "no-regression check" in stdout


async def test_scale_point_on_a_cluster(cluster_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One point of the scale-out curve: two `flo-redis worker` processes work through
    the actions spread over the cluster and the rate comes from the handlers' counters."""
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.scale import measure

    rate = await measure(cluster_url, "actions", 2, 600, timeout=60)
    assert rate > 0


@pytest.mark.parametrize(
    ("module", "args", "figure"),
    [("action_scripts", ["400", "1"], "action_claim"), ("handoff_paths", ["3"], "retry")],
)
def test_the_script_level_benchmarks_run(module: str, args: list[str], figure: str) -> None:
    """The benchmarks that time scripts on a private server (``python -m
    benchmarks.<module>``) still drive the calls they time, and print their JSON line."""
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert figure in json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_kept_inputs_benchmark_measures_both_ways() -> None:
    """``python -m benchmarks.kept_inputs`` at a tiny size, on a private redis-server (it
    changes the server's SLOWLOG settings): figures for the action with and without the
    setting, and the memory of a kept input (which holds its bytes)."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.kept_inputs", "200", "1"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "REDIS_URL"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout)
    for mode in ("without", "keep_inputs"):
        assert figures[mode]["worker_runs_per_s"] > 0
        assert set(figures[mode]["complete_us"]) == {"run_complete", "run_complete_many"}
    assert figures["bytes_per_kept_input"]["1024"] > 1024


def test_benchmarks_process_workload_without_celery(tmp_path: Path) -> None:
    """The process workload runs both flo-redis executors (the thread executor, and the
    process executor) on plain ``def`` handlers with Celery left out, as where Celery is
    not installed: figures for each, no failed pass, and no check judged without Celery."""
    stdout, results = bench(
        tmp_path, "--quick", "--only", "process", "--celery-python", "none", "--repeats", "1"
    )
    process = results["workloads"]["process"]
    assert "error" not in process
    metrics = process["metrics"]
    for handler in ("noop", "cpu_1ms"):
        assert metrics[f"{handler}_thread_runs_per_s"]["median"] > 0
        assert metrics[f"{handler}_process_runs_per_s"]["median"] > 0
        assert metrics[f"{handler}_celery_runs_per_s"]["median"] is None
    assert not any("failed" in note for note in process["notes"])
    assert results["checks"] == []
    assert "noop_process_over_thread" in stdout


CELERY_VENV = ROOT / "benchmarks" / ".celery-venv" / "bin" / "python"


@pytest.mark.skipif(
    not CELERY_VENV.exists(),
    reason="no Celery here (python -m benchmarks --only process makes benchmarks/.celery-venv)",
)
def test_benchmarks_process_workload_beside_celery(tmp_path: Path) -> None:
    """With Celery's environment at hand, its prefork pool is measured the same way and
    the target (process executor at least twice Celery's rate) is judged per handler."""
    _, results = bench(
        tmp_path, "--quick", "--only", "process", "--celery-python", str(CELERY_VENV),
        "--repeats", "1",
    )  # fmt: skip
    metrics = results["workloads"]["process"]["metrics"]
    for handler in ("noop", "cpu_1ms"):
        assert metrics[f"{handler}_celery_runs_per_s"]["median"] > 0
        assert metrics[f"{handler}_process_over_celery"]["median"] > 0
    verdicts = [c["verdict"] for c in results["checks"]]
    assert len(verdicts) == 2 and set(verdicts) <= {"PASS", "MISS"}
