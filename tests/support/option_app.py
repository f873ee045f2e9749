"""A worker target for the ``flo-redis worker`` command tests whose action options are
changed after they were given to the worker: the command must refuse them at start."""

from __future__ import annotations

from flo_redis import ActionContext, ActionRegisterOptions, FloClient

options = ActionRegisterOptions()
worker = FloClient("redis://127.0.0.1:1", namespace="unused").new_action_worker()


@worker.action("job", options)
async def job(ctx: ActionContext) -> None:
    return None


options.timeout_ms = float("nan")  # type: ignore[assignment]  # after it was given
