"""What a StreamWorker's handler gets: :class:`StreamContext`, the record and where it
came from; and the handler's type."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from flo_redis.types import StreamID, StreamRecord


@dataclass
class StreamContext:
    """What a stream handler gets: the record and where it came from."""

    record: StreamRecord
    namespace: str
    stream: str
    group: str
    consumer: str

    @property
    def stream_id(self) -> StreamID:
        return self.record.id

    @property
    def payload(self) -> bytes:
        return self.record.payload

    def json(self) -> Any:
        if not self.record.payload:
            raise ValueError("No payload data")
        return json.loads(self.record.payload)

    def into(self, cls: type[Any]) -> Any:
        data = self.json()
        return cls(**data) if isinstance(data, dict) else cls(data)

    @property
    def headers(self) -> dict[str, str]:
        return self.record.headers or {}

    @property
    def delivery_count(self) -> int:
        """How many times the group delivered this record, this delivery included."""
        return self.record.delivery_count


# An ``async def`` handler, or a plain function (run in the worker's thread pool).
StreamHandler = Callable[[StreamContext], Awaitable[None]] | Callable[[StreamContext], None]
StreamRecordHandler = StreamHandler

__all__ = ["StreamContext", "StreamHandler", "StreamRecordHandler"]
