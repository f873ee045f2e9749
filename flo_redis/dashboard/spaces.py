"""The namespaces one dashboard shows: its own, and the others on the same Redis.

A page names the namespace it shows with ``?ns=<name>`` (a form, with a field of that
name), and every link and form on it carries that on; without, it shows the dashboard's
own namespace (the client it was started with). Another namespace is read through a
client of its own (:meth:`FloClient.sibling`: the same endpoint, user and settings),
made at its first request and kept, at most ``max_clients`` at once: when one more is
needed, the one used least recently and not in use by any request is closed. The
guard applies per namespace: sessions are kept in each namespace's keys, so a log-in
allows changes in that namespace only.

Which namespaces may be shown: ``allowed`` (the dashboard's own always is), or, when
None, every namespace in the registry of namespaces
(:func:`flo_redis.ops.discovery.namespaces`). The Redis user is the last word: a user
narrowed to one namespace reads no other, and its dashboard lists only its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable

from flo_redis._wire import runner
from flo_redis._wire.keys import check_namespace, namespaces_key
from flo_redis.client import FloClient
from flo_redis.errors import FloError, NotFoundError, PermissionDeniedError, ServerError
from flo_redis.ops import discovery
from flo_redis.types import StatusCode

DEFAULT_MAX_CLIENTS = 16
NS_PARAM = "ns"  # the query parameter (and form field) naming the namespace shown


class Busy(ServerError):
    """Every client of another namespace is in use: try again in a moment."""

    def __init__(self, message: str) -> None:
        super().__init__(message, StatusCode.RATE_LIMITED)


class Namespaces:
    """The dashboard's own client, and a bounded cache of clients of other namespaces."""

    def __init__(
        self,
        client: FloClient,
        allowed: Iterable[str] | None = None,
        max_clients: int = DEFAULT_MAX_CLIENTS,
    ) -> None:
        if isinstance(allowed, str):
            raise ValueError(f"namespaces is a list of names, not one str ({allowed!r})")
        if isinstance(max_clients, bool) or not isinstance(max_clients, int) or max_clients < 0:
            raise ValueError(f"max_clients is a count of 0 or more, got {max_clients!r}")
        self.home = client
        self.allowed = None if allowed is None else frozenset(map(check_namespace, allowed))
        self.max_clients = max_clients
        self._clients: OrderedDict[str, FloClient] = OrderedDict()
        self._users: dict[str, int] = {}
        self._making = asyncio.Lock()  # one client made at a time: never two for a name

    async def names(self) -> tuple[str, ...]:
        """The namespaces the switcher lists, in name order: the dashboard's own and
        those that may be shown (all registered ones when ``allowed`` is None; only
        the own one when the Redis user may not list them)."""
        home = self.home.namespace
        if self.allowed is not None:
            return tuple(sorted(self.allowed | {home}))
        try:
            found = set(await discovery.namespaces(self.home))
        except PermissionDeniedError:
            found = set()
        return tuple(sorted(found | {home}))

    @contextlib.asynccontextmanager
    async def client(self, namespace: str | None) -> AsyncIterator[FloClient]:
        """The client of ``namespace`` (None or the own: the dashboard's), held for the
        block. ValidationError for a name that is not one; NotFoundError for one that
        may not be shown, or that holds nothing on this Redis; :class:`Busy` when every
        cached client is in use."""
        if namespace is None or namespace == self.home.namespace:
            yield self.home
            return
        check_namespace(namespace)
        await self._check_shown(namespace)
        async with self._making:
            client = await self._client(namespace)
            self._users[namespace] = self._users.get(namespace, 0) + 1
        try:
            yield client
        finally:
            self._users[namespace] -= 1

    async def _check_shown(self, namespace: str) -> None:
        if self.allowed is not None:
            if namespace not in self.allowed:
                raise NotFoundError(
                    f"namespace {namespace!r} is not one this dashboard shows; start it "
                    f"with --show-namespace {namespace} to show it"
                )
            return
        with runner.redis_errors("registry of namespaces"):
            listed = await self.home.redis.zscore(namespaces_key(), namespace)
        if listed is None:
            raise NotFoundError(
                f"namespace {namespace!r} holds nothing on this Redis (no action, worker "
                f"or stream was ever made in it); pick one from the list"
            )

    async def _client(self, namespace: str) -> FloClient:
        client = self._clients.get(namespace)
        if client is not None:
            self._clients.move_to_end(namespace)
            return client
        if len(self._clients) >= self.max_clients:
            idle = next((n for n in self._clients if not self._users.get(n)), None)
            if idle is None:
                raise Busy(
                    f"{len(self._clients)} namespaces are being read at once, the most "
                    f"this dashboard keeps; try again in a moment"
                )
            await self._clients.pop(idle).close()
            self._users.pop(idle, None)
        client = self.home.sibling(namespace=namespace)
        try:
            await client.connect()
        except FloError:
            await client.close()
            raise
        self._clients[namespace] = client
        return client

    async def close(self) -> None:
        """Close the clients of other namespaces (not the dashboard's own)."""
        clients, self._clients = list(self._clients.values()), OrderedDict()
        for client in clients:
            await client.close()


__all__ = ["DEFAULT_MAX_CLIENTS", "NS_PARAM", "Busy", "Namespaces"]
