"""The process executor on a real 3-master Redis Cluster: handlers of actions in several
hash slots run in handler processes, their touches and progress sent to each run's node,
and a crash or a time limit costs only its own run."""

from __future__ import annotations

import json

import process_app
import pytest
from polling import eventually, registered, running
from redis.crc import key_slot

from flo_redis import FloClient, ProcessExecutor, RunStatus
from flo_redis._wire.keys import action_keys

pytestmark = pytest.mark.cluster
ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


async def _ended(client: FloClient, run_id: str) -> object:
    return await eventually(
        lambda: client.action.status(run_id), lambda s: s.status in ENDED, timeout=60
    )


async def test_handlers_of_actions_in_several_slots_run_in_processes(cclient: FloClient) -> None:
    names = ["echo", "touching", "crash", "spin"]
    slots = {key_slot(action_keys(cclient.namespace, n).runs.encode()) for n in names}
    assert len(slots) > 1  # the actions live in several slots
    worker = process_app.worker(cclient, ProcessExecutor(size=2), 2, 1.0)
    async with running(worker, ready=registered):
        echo = await cclient.action.invoke("echo", b'{"n": 1}')
        touching = await cclient.action.invoke("touching", b"")
        crash = await cclient.action.invoke("crash", b"exit")
        fine = await cclient.action.invoke("crash", b"fine")
        echoed = await _ended(cclient, echo.run_id)
        touched = await _ended(cclient, touching.run_id)
        crashed = await _ended(cclient, crash.run_id)
        survived = await _ended(cclient, fine.run_id)
    assert json.loads(echoed.output)["got"] == {"n": 1}
    assert (touched.status, touched.outcome) == (RunStatus.COMPLETED, "touched")
    assert touched.progress is not None
    assert crashed.error_message == "HandlerProcessLost: its handler process exited with status 3"
    assert (survived.status, survived.output) == (RunStatus.COMPLETED, b"fine")
