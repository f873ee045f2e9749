"""The graph half of ``client.action``: what a run waits for and what waits for it, the
forwarding of the graph's messages, and batches (docs/flows.md)."""

from __future__ import annotations

from flo_redis._session.session import Operations
from flo_redis._wire.checks import check_options
from flo_redis._wire.keys import action_of_run
from flo_redis.actions import batches, graph, graph_reads
from flo_redis.types import BatchOptions, BatchStatus, GraphPage


class GraphOperations(Operations):
    """The graph half of ``client.action``."""

    async def dependencies(
        self,
        run_id: str,
        after: str | None = None,
        count: int = 100,
        namespace: str | None = None,
    ) -> GraphPage:
        """A page of the runs ``run_id`` waits for (or waited for), in id order: each a
        :class:`ParentState` (its policy, and how it ended, as the run was told: None
        while it runs or its end is on its way). ``after``: the previous page's
        ``after``; at most ``count`` (1 .. 1000) per page."""
        keys = self._action_keys(action_of_run(run_id), namespace)
        return await graph_reads.parents(self._session, keys, run_id, after, count)

    async def open_batch(self, options: BatchOptions | None = None) -> str:
        """Open a batch (:class:`BatchOptions`: its callbacks, its parent batch); its id,
        for ``ActionInvokeOptions(batch=...)`` and :meth:`seal_batch` (docs/flows.md)."""
        opts = check_options(options, BatchOptions)
        namespace = self._session.get_namespace(opts.namespace)
        return await batches.open_batch(self._session, namespace, opts)

    async def seal_batch(self, batch_id: str, namespace: str | None = None) -> None:
        """Say that no run joins ``batch_id`` any more: once every member has ended, its
        on_complete (and on_success) callback is made. Seal after the invokes that add
        its runs have returned. :class:`NotFoundError` for an unknown batch."""
        ns = self._session.get_namespace(namespace)
        await batches.seal_batch(self._session, ns, batch_id)

    async def batch_status(self, batch_id: str, namespace: str | None = None) -> BatchStatus:
        """``batch_id``'s counts and outcome (:class:`BatchStatus`); :class:`NotFoundError`
        for an unknown batch (or one past its retention)."""
        ns = self._session.get_namespace(namespace)
        return await batches.batch_status(self._session, ns, batch_id)

    async def forward(self, name: str, namespace: str | None = None) -> int:
        """Carry the dependency messages due in action ``name``'s outbox to the queues
        they are for (docs/flows.md), with a group's tally due within milliseconds; how
        many were carried. Workers of the action do this themselves, when nudged, when a
        message falls due and at each upkeep; any number may run at once."""
        keys = self._action_keys(name, namespace)
        forwarded = await graph.forward(self._session, keys, ahead_ms=graph.GROUP_TELL_MS)
        return forwarded.messages

    async def dependents(
        self,
        run_id: str,
        after: str | None = None,
        count: int = 100,
        namespace: str | None = None,
    ) -> GraphPage:
        """A page of the ids of the runs that wait for ``run_id`` (registered on it), in
        id order, but the runs of one ``invoke_many`` together, in the order invoked;
        ``after`` and ``count`` as for :meth:`dependencies`."""
        keys = self._action_keys(action_of_run(run_id), namespace)
        return await graph_reads.dependents(self._session, keys, run_id, after, count)


__all__ = ["GraphOperations"]
