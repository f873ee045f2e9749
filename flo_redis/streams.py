"""flo's ``client.stream`` on Redis Streams (being written)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .client import FloClient


class StreamOperations:
    def __init__(self, client: FloClient) -> None:
        self._client = client
