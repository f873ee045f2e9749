"""``examples/flows.py`` runs its fan-out and fan-in to the end against the test's Redis
and prints the join's result (docs/flows.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flows.py"


@pytest.mark.slow
def test_the_flows_example_joins_every_part(redis_url: str, namespace: str) -> None:
    env = {**os.environ, "FLO_REDIS_URL": redis_url, "FLO_REDIS_NAMESPACE": namespace}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "7"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "join: {'sum': 500500, 'parents': 7}" in done.stdout, done.stdout
