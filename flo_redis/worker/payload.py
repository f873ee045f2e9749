"""How a handler's context reads its run's input, and says it waits for more runs: the
part of :class:`~flo_redis.worker.ActionContext` a handler run in a process has too."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from flo_redis.types.graph import Dependency, OnFailure, WaitFor


class PayloadReading:
    """How a handler's context reads its run's input (``payload``), wherever it runs."""

    __slots__ = ()
    payload: bytes

    def input(self) -> bytes:
        return self.payload

    def json(self) -> Any:
        if not self.payload:
            raise ValueError("No input data")
        return json.loads(self.payload)

    def into(self, cls: type[Any]) -> Any:
        data = self.json()
        return cls(**data) if isinstance(data, dict) else cls(data)

    @staticmethod
    def to_bytes(value: Any) -> bytes:
        return json.dumps(value).encode()

    @staticmethod
    def wait_for(run_ids: Sequence[str], on_failure: OnFailure = "run") -> WaitFor:
        """Return this to end the attempt waiting for ``run_ids`` (:class:`WaitFor`)."""
        return WaitFor([Dependency(run_id, on_failure) for run_id in run_ids])


__all__ = ["PayloadReading"]
