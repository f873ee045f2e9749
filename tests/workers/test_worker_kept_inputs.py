"""A worker's action registered with ``keep_inputs=True``: the runs it completes keep
their inputs, shown by ``client.action.details``; its other actions' do not."""

from __future__ import annotations

import pytest
from polling import finished, registered, running

from flo_redis import ActionContext, ActionRegisterOptions, FloClient, RunStatus
from flo_redis._wire.keys import action_keys
from flo_redis.actions.finding import NOT_KEPT
from flo_redis.errors import ValidationError


async def test_a_worker_completes_runs_whose_inputs_are_kept(client: FloClient) -> None:
    worker = client.new_action_worker(block_ms=500, concurrency=20)

    @worker.action("resize", ActionRegisterOptions(keep_inputs=True))
    async def resize(ctx: ActionContext) -> dict[str, int]:
        return {"width": ctx.json()["width"] * 2}

    @worker.action("plain")
    async def plain(ctx: ActionContext) -> bytes:
        return ctx.input()

    async with running(worker, ready=registered):
        inputs = [f'{{"width": {w}}}'.encode() for w in range(40)]
        kept = [r.run_id for r in await client.action.invoke_many("resize", inputs)]
        other = (await client.action.invoke("plain", b"gone")).run_id
        for run_id in [*kept, other]:
            assert (await finished(client, run_id)).status == RunStatus.COMPLETED

    for run_id, data in zip(kept, inputs, strict=True):
        details = await client.action.details(run_id)
        assert (details.input, details.input_missing) == (data, None)
        assert details.status.output == f'{{"width": {2 * int(data[10:-1])}}}'.encode()
    details = await client.action.details(other)
    assert (details.input, details.input_missing) == (None, NOT_KEPT)
    raw = client.session.redis
    assert await raw.hlen(action_keys(client.namespace, "resize").inputs) == len(kept)
    assert await raw.hlen(action_keys(client.namespace, "plain").inputs) == 0


async def test_the_worker_refuses_a_setting_that_is_not_a_bool(client: FloClient) -> None:
    worker = client.new_action_worker(block_ms=500)
    options = ActionRegisterOptions()
    options.keep_inputs = "yes"  # type: ignore[assignment]

    async def handler(ctx: ActionContext) -> None:
        return None

    with pytest.raises(ValidationError, match=r"keep_inputs must be a bool"):
        worker.register_action("job", handler, options)
