"""A small bounded cache for what a client remembers per name (worker, stream, queue):
a long-lived producer that meets thousands of names keeps at most :data:`CACHE_SIZE` of
each, the least recently used forgotten first. Each cache here only spares a round trip
(a health check, a registry write, a partition count); forgetting an entry costs that
round trip again, never correctness."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

CACHE_SIZE = 1024
"""Entries a client keeps per cache."""


class Lru(Generic[K, V]):
    """A mapping of at most ``size`` entries; reading or writing one makes it the most
    recently used. Not thread-safe (one client, one event loop)."""

    __slots__ = ("_data", "_size")

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._data: OrderedDict[K, V] = OrderedDict()
        self._size = size

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        data = self._data
        data[key] = value
        data.move_to_end(key)
        if len(data) > self._size:
            data.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._data.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)
