"""The examples read the command's own settings: run one with ``FLO_REDIS_URL`` and
``FLO_REDIS_NAMESPACE`` set, and ``flo-redis status`` in that environment shows it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_command import flo_redis

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_an_example_worker_shows_in_status(redis_url: str, namespace: str) -> None:
    env = {"FLO_REDIS_URL": redis_url, "FLO_REDIS_NAMESPACE": namespace}
    worker = subprocess.Popen([sys.executable, str(EXAMPLES / "action_worker.py")], env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            done = flo_redis(redis_url, namespace, "status", "--json")
            if done.returncode == 0 and json.loads(done.stdout)["workers"]:
                break
            assert time.monotonic() < deadline, done.stdout + done.stderr
            time.sleep(0.2)
        shown = json.loads(done.stdout)
        assert {a["action"] for a in shown["actions"]} == {
            "resize", "approve", "import-file", "report",
        }  # fmt: skip
        [listed] = shown["workers"]
        assert listed["status"] == "ACTIVE"
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
