"""A worker's poller: claims that park for a hand-off, and the runs handed to it.

The scripts' side is ``lua/lib/handoff.lua`` (how a parked poller is handed a run inside
the invoke that made it ready, and how a lost or late message is answered again). This
is the poller's side, used by :class:`flo_redis.worker.ActionWorker`:

- The poller starts every run it gets through the worker's ``dispatch``: a run handed
  to it as soon as its message is read (no task or wake-up in between), claimed runs
  when their claim answers.
- **Offers.** A poller with an offer window (``offer_ms``) parks stating it, so a run
  handed to it is only offered (``lua/lib/offer.lua``): the poller passes it to
  ``accept`` right after it starts it (the accept goes out once the handler's first
  step is over: it never delays the start), and its next claim in that queue names it
  as received, which accepts it too. A run a claim answers with is accepted by that
  claim.
- A poll is :func:`flo_redis._session.wake.long_poll` over the actions' wake channels and the
  poller's hand-off channels: it ends once a run was started, by a hand-off or a claim.
  A claim that finds nothing parks the poller in that queue.
- **Capacity.** A park holds one of the worker's free slots until it is handed a run or
  ended (by the poller's next claim in that queue): the handlers running plus the parks
  standing never exceed the capacity the worker polls with. A queue is parked in only
  while every queue after it in the look still has a slot, so a poller with fewer free
  slots than queues still claims each queue in turn. A look claims the queues parked
  in first: their parks end (their slots are free again) before any other queue is
  claimed, so a park never holds the last free slot while another queue has work.
- **Claim ids.** A queue's first claim in a poll goes under the poll's id; a claim there
  whose reply was lost (it raised) is sent again under its own id, so the script answers
  it with what it handed then; any other claim there in the same poll (a look after a
  wake-up, or the poll sent again after another queue's claim failed) goes under a new
  id, ``<poll id>.<n>``, and so is never answered with runs the poller already has in
  place of the work waiting.
- **Exactly once per hand-out.** A run can reach the poller twice — by its message, and
  again in a claim's answer (a message heard late, or one the poller could not know it
  had) — so runs are passed on once per hand-out: its fencing token, which no other
  hand-out of the queue ever gets, even after Redis lost its data (``lua/lib/ids.lua``).
- **Leaving.** :meth:`ActionPoller.leave` first leaves the hand-off channels, so from
  then on the scripts' subscriber check refuses any park of the poller still standing
  (the run goes to another poller, or waits). It then ends every park the poller may
  hold: each park standing, and, in a queue whose last claim raised, whatever that
  claim left (the park it was to end, if it never ran; the one it made, if only its
  reply was lost), by a claim for nothing (``max_n = 0``) under the park's id or the
  lost claim's. That claim answers with what was handed to the park (or claimed by the
  lost claim) and not received, which is started like any claimed run (or, with no
  slot free, held in hand and given back unspent). It is sent again while Redis does
  not answer (a failover's write pause), for at most :data:`_LEAVE_PATIENCE_S`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import itertools
import logging
import operator
from collections.abc import Awaitable, Callable, Sequence

from flo_redis._aio import ClosesOnExit
from flo_redis._session import outage
from flo_redis._session.listener import Listener
from flo_redis._session.session import Session
from flo_redis._session.wake import Attempt, long_poll
from flo_redis._wire.keys import ActionKeys, action_keys, handoff_channel, namespace_keys
from flo_redis._wire.replies import Claimed, handed
from flo_redis.actions.claims import Gate, claim, earliest_due
from flo_redis.errors import is_connection_error
from flo_redis.retry import worker_backoff

log = logging.getLogger("flo_redis.worker")

# Runs passed on, remembered (run id -> token) so a second copy is dropped: at least
# this many, the most recent (at most twice as many).
_SEEN_MAX = 4096

# A stopping poller sends the claim that ends a park again, while Redis does not answer
# (a failover pauses writes for a few seconds), for at most this long; past it, a run
# handed to that park and not received comes back when its offer window passes.
_LEAVE_PATIENCE_S = 10.0


class _LookAgain(Exception):
    """A park was ended for the poller to look again (a drain): the poll answers."""


class _Inbox(Listener):
    """What one hand-off channel carries to the poller, every message kept in order."""

    def __init__(self, poller: ActionPoller, keys: ActionKeys, channel: str) -> None:
        super().__init__(poller._session.waker.ensure, [channel])
        self._poller = poller
        self._action = keys.action

    def fire(self, message: bytes | None = None) -> None:
        if message is not None:
            self._poller._hear(self._action, message)


class ActionPoller(ClosesOnExit):
    """One worker's polls of its actions' queues (module docstring). Use as ``async
    with``: the hand-off channels are listened to while inside."""

    def __init__(
        self,
        session: Session,
        gate: Gate,
        worker_id: str,
        actions: Sequence[str],
        dispatch: Callable[[builtins.list[Claimed]], None],
        *,
        health_ttl_s: float,
        on_unregistered: Callable[[str], Awaitable[None]] | None = None,
        offer_ms: int = 0,
        accept: Callable[[Claimed, float], None] | None = None,
    ) -> None:
        """``offer_ms`` > 0: parks state that offer window, and ``accept(run,
        window_s)`` is called for each run handed to the poller by a message, once it is
        started (module docstring: Offers)."""
        self._session = session
        self._gate = gate  # the health gate's recent answers, shared with the worker
        self._worker_id = worker_id
        self._namespace = session.get_namespace(None)
        self._keys = [action_keys(self._namespace, a) for a in actions]
        self._health_ttl_s = health_ttl_s
        self._on_unregistered = on_unregistered
        self._dispatch = dispatch
        self._offer_ms = offer_ms if accept is not None else 0
        self._accept = accept
        self._started: builtins.list[Claimed] = []  # runs started in this poll
        self._look_again = False  # a park was ended for the poller to look again (a drain)
        self._rotation = 0
        self._standing: dict[str, str] = {}  # action -> claim id of the park standing there
        self._answered: dict[str, str] = {}  # action -> poll id a claim there was answered in
        self._lost: dict[str, str] = {}  # action -> claim id whose reply was lost there
        self._claims = 0  # numbers the claim ids after a queue's first in a poll
        self._received: dict[str, str] = {}  # action -> "<run id> <token>" last taken there
        # Run id -> token of the hand-outs passed on, oldest first.
        self._seen: dict[str, int] = {}
        self._stack = contextlib.AsyncExitStack()
        owner = session.owner_id
        self._inboxes = [_Inbox(self, k, handoff_channel(k.tag, owner)) for k in self._keys]
        self._channels = [k.wake for k in self._keys] + [i.channels[0] for i in self._inboxes]

    async def __aenter__(self) -> ActionPoller:
        waker = self._session.waker
        for inbox in self._inboxes:
            # Left on close (release): a channel subscribed with nobody listening would
            # pass the scripts' subscriber check, and a run handed there would never start.
            await self._stack.enter_async_context(waker.attached(inbox, release=True))
        return self

    async def close(self) -> None:
        """Stop listening to the hand-off channels, and unsubscribe them."""
        await self._stack.aclose()

    @property
    def parked(self) -> int:
        """Parks standing (each holds a free slot of the worker)."""
        return len(self._standing)

    async def poll(self, poll_id: str, free: int, block_ms: int) -> builtins.list[Claimed]:
        """Start runs in up to ``free`` slots (parks standing included), waiting up to
        ``block_ms`` for some; the runs started (none: none came, or the poller is to
        look again). ``poll_id`` is ``<poller>#<n>``, n new once the previous poll was
        answered. Raises what the health gate raises (a draining, unhealthy or removed
        worker) and connection errors; a poll that raised is to be sent again under the
        same poll id, so what it was handed comes back."""
        since = self._session.waker.generation  # a stop from here on ends this poll
        labels = await self._gate.check(
            self._session, self._worker_id, namespace_keys(self._namespace), self._health_ttl_s
        )
        began = len(self._started)

        async def attempt() -> Attempt[Claimed]:
            due_ms, held = -1, False
            if len(self._started) == began and not self._look_again:
                looked = await self._round(labels, free, poll_id, block_ms)
                due_ms, held = looked.due_ms, looked.held
            if len(self._started) > began:
                return Attempt(self._started[began:])
            if self._look_again:
                raise _LookAgain()
            return Attempt([], due_ms, held)

        try:
            started = await long_poll(
                self._session.waker,
                self._channels,
                block_ms,
                attempt,
                server_clock_ms=self._session.server_time_ms,
                since=since,
            )
        except _LookAgain:
            started = []
        self._look_again = False
        del self._started[:]
        return started

    async def leave(self) -> None:
        """Leave the hand-off channels, end every park the poller may still hold, and
        start what was handed to them (module docstring: Leaving). A park it cannot end
        (an error other than a lost connection, or Redis still unreachable after
        :data:`_LEAVE_PATIENCE_S`) is logged and left to the subscriber check, which
        refuses it."""
        await self.close()
        ending = {**self._standing, **self._lost}  # a lost claim's id replays what it did
        if not ending:
            return
        deadline = asyncio.get_running_loop().time() + _LEAVE_PATIENCE_S
        for keys in self._keys:
            claim_id = ending.get(keys.action)
            if claim_id is not None:
                await self._end_park(keys, claim_id, deadline)

    # --- internals -------------------------------------------------------------------

    async def _end_park(self, keys: ActionKeys, claim_id: str, deadline: float) -> None:
        """End the poller's park in ``keys``' queue by a claim for nothing under
        ``claim_id``, sent again on a connection error until ``deadline`` (loop time),
        and start what it answers with. The claim takes nothing new and parks nowhere,
        so the worker's labels play no part and the health gate is not asked: a
        draining worker ends its parks too."""
        action = keys.action
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            received = self._received.get(action, "")
            try:
                reply = await claim(
                    self._session, keys, self._worker_id, b"", 0, claim_id, 0, received
                )
            except Exception as exc:
                if not is_connection_error(exc) or loop.time() >= deadline:
                    log.warning(
                        "worker %s could not end its park in %s's queue (%s); a run handed "
                        "to it comes back when its offer window passes",
                        self._worker_id,
                        action,
                        exc,
                    )
                    return
                outage.failed(log, self._session.redis, "ending a park", exc)
                await asyncio.sleep(min(worker_backoff(failures), deadline - loop.time()))
                failures += 1
                continue
            if failures:
                outage.reached(log, self._session.redis)
            self._standing.pop(action, None)
            self._lost.pop(action, None)
            self._start(self._fresh(action, reply.runs))
            return

    def _start(self, runs: builtins.list[Claimed]) -> None:
        if runs:
            self._started += runs
            self._dispatch(runs)

    def _hear(self, action: str, data: bytes) -> None:
        """A message on a hand-off channel, read: start its run now (it runs in the
        reader's task, so nothing here may raise)."""
        try:
            message = handed(data, action)
        except Exception:
            log.exception("unreadable hand-off message on %s's channel", action)
            return
        if not message.run_id:
            # The park was ended (a drain): ask the health gate again, then look.
            self._standing.pop(action, None)
            self._gate.forget(self._namespace, self._worker_id)
            self._look_again = True
            return
        if message.run is None:
            return  # the input stays in Redis: the next claim here answers with it
        if self._standing.get(action) == message.poll_id:
            del self._standing[action]  # the park's slot is the run's now
        try:
            fresh = self._fresh(action, (message.run,))
            self._start(fresh)
            if fresh and self._accept is not None:
                self._accept(message.run, self._offer_ms / 1000)  # after the start's step
        except Exception:
            log.exception("starting run %s handed to the worker failed", message.run_id)

    async def _round(
        self, labels: bytes, free: int, poll_id: str, park_ms: int
    ) -> Attempt[Claimed]:
        """One claim per queue, from a rotating start; parks where nothing was found and
        every later queue still has a slot (module docstring: Capacity). The runs of
        each claim are started as it answers, so a later claim that raises loses none
        of them; the answer carries only when something falls due."""
        next_due = -1
        held_queues = 0
        room = free - len(self._standing)
        keys_all = self._keys
        self._rotation = (self._rotation + 1) % len(keys_all)
        order = [*keys_all[self._rotation :], *keys_all[: self._rotation]]
        if self._standing:
            # Queues parked in go first: each claim there ends its park and frees its
            # slot before the other queues are looked at, so a park never keeps a
            # queue with work from the last free slot.
            order.sort(key=lambda keys: keys.action not in self._standing)
        for i, keys in enumerate(order):
            action = keys.action
            if self._standing.pop(action, None) is not None:
                room += 1  # this claim ends the park: its slot is the claim's
            elif room <= 0:
                continue
            may_park = park_ms > 0 and room - 1 >= len(order) - i - 1
            claim_id = self._claim_id(action, poll_id)
            self._lost[action] = claim_id  # until its reply arrives
            reply = await claim(
                self._session,
                keys,
                self._worker_id,
                labels,
                room,
                claim_id,
                park_ms if may_park else 0,
                self._received.get(action, ""),
                self._offer_ms,
            )
            del self._lost[action]
            self._answered[action] = poll_id
            if not reply.registered:
                if self._on_unregistered is not None:
                    await self._on_unregistered(action)
                continue
            runs = self._fresh(action, reply.runs)
            self._start(runs)
            room -= len(runs)
            if may_park and not reply.runs:
                self._standing[action] = claim_id
                room -= 1
            next_due = earliest_due(next_due, reply)
            if reply.rate_next_ms >= 0:
                held_queues += 1
        return Attempt([], next_due, held=held_queues == len(order))

    def _claim_id(self, action: str, poll_id: str) -> str:
        """The id of the next claim in ``action``'s queue (module docstring: Claim ids)."""
        lost = self._lost.get(action)
        if lost is not None:
            return lost
        if self._answered.get(action) != poll_id:
            return poll_id
        self._claims += 1
        return f"{poll_id}.{self._claims}"

    def _fresh(self, action: str, runs: Sequence[Claimed]) -> builtins.list[Claimed]:
        """``runs`` not passed on before as the same hand-out (the same token)."""
        if not runs:
            return []
        last = runs[-1]
        self._received[action] = f"{last.run_id} {last.token}"
        seen = self._seen
        if len(runs) == 1:
            # One run (a hand-off's, nearly always): the same steps, without the passes.
            if seen.get(last.run_id) == last.token:
                return []
            seen[last.run_id] = last.token
            fresh = [last]
        else:
            get = seen.get
            fresh = [run for run in runs if get(run.run_id) != run.token]
            before = len(seen)
            seen.update(zip(map(_run_id, fresh), map(_token, fresh), strict=True))
            if len(seen) - before < len(fresh):
                # Some id was known already (a run handed out again, under a new token)
                # or came twice in ``runs``: pass each hand-out on once, in order.
                fresh = list({(run.run_id, run.token): run for run in fresh}.values())
        if len(seen) > 2 * _SEEN_MAX:
            # Forget the oldest half at once: a plain dict keeps insertion order, and
            # dropping its first entries one by one would leave holes every lookup of
            # the oldest walks past.
            self._seen = dict(itertools.islice(seen.items(), len(seen) - _SEEN_MAX, None))
        return fresh


_run_id = operator.attrgetter("run_id")
_token = operator.attrgetter("token")


__all__ = ["ActionPoller"]
