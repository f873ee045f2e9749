"""The benchmark entry point runs and writes its JSON (figures are not asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_benchmarks_quick_invoke(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "REDIS_URL": redis_url}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "invoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())
    invoke = results["workloads"]["invoke"]
    assert "error" not in invoke
    assert invoke["metrics"]["single_per_s"]["median"] > 0
    assert "invoke" in proc.stdout


def test_benchmarks_targets_beside_baselines(tmp_path: Path) -> None:
    """Every baseline and its flo-redis counterpart run (tiny sizes, a private
    redis-server) and each target gets a ratio and a verdict; the figures are not judged."""
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    args = ["--quick", "--only", "targets", "--targets-n", "300", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    targets = json.loads(out.read_text())["targets"]
    for key, figure in targets["figures"].items():
        assert "error" not in figure, (key, figure["error"])
        assert all(m["median"] > 0 for m in figure["metrics"].values()), key
    verdicts = {t["title"]: t["verdict"] for t in targets["targets"]}
    assert set(verdicts.values()) <= {"PASS", "MISS", "info"}
    assert verdicts["pickup p50 (idle, one at a time)"] in ("PASS", "MISS")
    assert "beside its baselines" in proc.stdout
