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
