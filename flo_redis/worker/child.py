"""A handler process of the process executor (:mod:`flo_redis.worker.processes`): what runs
in the child, and what a handler run there gets.

The worker starts each child as ``python -c "...child.main(FD)"`` with one end of a
socket pair as FD. The first message carries what ``multiprocessing``'s spawn start
carries (``sys.path``, the working directory, the parent's main module, so a handler of
a script's ``__main__`` resolves) and the handlers, pickled by reference: the child
imports their modules itself, from disk, so a child started after the code changed runs
the new code. It answers ``("ready", pid)``, then runs one run at a time until it is
told to exit or the worker is gone (the socket closes; while a handler runs, the kernel
kills it when its parent dies: ``PR_SET_PDEATHSIG``).

The worker stops a handler with a signal: SIGUSR1 (its run was cancelled, its lease lost,
the worker stops) or SIGUSR2 (its time limit passed) raises :class:`HandlerInterrupted`
inside it. Around the child's own exchanges with the worker (a touch, a progress) both
signals are blocked, so a stop never cuts a message in half. SIGINT, SIGTERM and SIGHUP
are ignored: a terminal's Ctrl-C or a service manager's stop reaches the whole process
group, and it is the worker that decides how its handlers end.

Messages are pickled tuples framed as ``multiprocessing.connection`` frames them.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pickle
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from typing import Any

from flo_redis.types.graph import GraphPage
from flo_redis.worker.payload import PayloadReading

#: The signals that stop a handler: cancelled (or its lease lost, or the worker stops),
#: and past its time limit.
SIG_CANCEL = signal.SIGUSR1
SIG_TIMEOUT = signal.SIGUSR2
_WHY = {SIG_CANCEL: "cancelled", SIG_TIMEOUT: "timed out"}
_PR_SET_PDEATHSIG = 1


class HandlerInterrupted(BaseException):
    """Raised inside a handler that runs in a process when its run is stopped: ``why``
    is "timed out" (its time limit passed) or "cancelled" (``client.action.cancel``, its
    lease lost, or the worker stopping). A :class:`BaseException`, as
    ``KeyboardInterrupt`` is, so ``except Exception`` lets it through: clean up in
    ``finally`` and let it go. A handler that swallows it is killed after the executor's
    ``grace_s``."""

    def __init__(self, why: str = "cancelled") -> None:
        super().__init__(why)
        self.why = why


class Outcome:
    """``ctx.result(outcome, value)`` in a process: sent to the worker, which encodes
    ``value`` with its serializer."""

    __slots__ = ("outcome", "value")

    def __init__(self, outcome: str, value: Any) -> None:
        self.outcome, self.value = outcome, value

    def __reduce__(self) -> tuple[Any, ...]:
        return (Outcome, (self.outcome, self.value))


class ProcessContext(PayloadReading):
    """What a handler run in a process gets: the fields and methods of
    :class:`~flo_redis.worker.ActionContext`, with ``touch`` and ``progress`` plain
    calls (the worker sends them to Redis and answers; a refusal is raised here) and
    ``check_cancelled`` raising :class:`HandlerInterrupted`."""

    __slots__ = (
        "_cancelled",
        "_conn",
        "_trace",
        "action_name",
        "attempt",
        "created_at",
        "namespace",
        "payload",
        "task_id",
        "token",
    )

    def __init__(self, conn: Connection, fields: tuple[Any, ...]) -> None:
        self._conn = conn
        self._cancelled = False
        (
            self.task_id,
            self.action_name,
            self.payload,
            self.attempt,
            self.created_at,
            self.namespace,
            self.token,
            self._trace,
        ) = fields

    def __repr__(self) -> str:
        return f"ProcessContext(task_id={self.task_id!r}, attempt={self.attempt})"

    @property
    def trace_context(self) -> dict[str, str]:
        from flo_redis._session.tracer import unpack_context

        return unpack_context(self._trace)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def check_cancelled(self) -> None:
        if self._cancelled:
            raise HandlerInterrupted("cancelled")

    def result(self, outcome: str, value: Any = None) -> Outcome:
        from flo_redis.actions.results import check_outcome

        return Outcome(check_outcome(outcome), value)

    def touch(self, extend_ms: int = 30000) -> None:
        """Extend this run's lease to ``extend_ms`` from now (fenced by the token)."""
        self._ask("touch", extend_ms)

    def progress(self, value: Any) -> None:
        """Store ``value`` as the run's progress (at most 1 KiB once encoded)."""
        self._ask("progress", value)

    def parents(self, after: str | None = None, count: int = 100) -> GraphPage:
        """A page of the run's parents' results (``ActionContext.parents``)."""
        return self._ask("parents", (after, count))  # type: ignore[no-any-return]

    def _ask(self, what: str, value: Any) -> Any:
        # Neither stop signal cuts the exchange in half: one that comes meanwhile is
        # raised once it is over. One exchange at a time (a handler's threads may ask).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _WHY)
        try:
            with _ASKING:
                _send(self._conn, pickle.dumps(("ask", what, value), pickle.HIGHEST_PROTOCOL))
                answer = pickle.loads(self._conn.recv_bytes())
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        if answer[0] == "refused":
            raise rebuild(answer[1])
        return answer[1]


_SENDING = threading.Lock()
_ASKING = threading.Lock()


def _send(conn: Connection, data: bytes) -> None:
    """Send one message whole: one sender at a time (a handler's threads log too), and
    neither stop signal raised in the middle of it."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _WHY)
    try:
        with _SENDING:
            conn.send_bytes(data)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


_PLAIN = (str, int, float, bool, type(None))


class _ToWorker(logging.Handler):
    """Sends each log record to the worker, which hands it to its own logging (its
    handlers, format and levels): a handler logs as it would in the worker's threads,
    with the run's id (or the record's stream) added."""

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self._conn = conn

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = dict(vars(record), msg=record.getMessage(), args=None, exc_info=None)
            if record.exc_info:
                fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
            ctx = _State.ctx
            if isinstance(ctx, ProcessContext):
                fields.setdefault("run_id", ctx.task_id)
                fields.setdefault("action", ctx.action_name)
            elif ctx is not None:
                fields.setdefault("stream", getattr(ctx, "stream", None))
            plain = {k: v if isinstance(v, _PLAIN) else repr(v) for k, v in fields.items()}
            _send(self._conn, pickle.dumps(("log", plain), pickle.HIGHEST_PROTOCOL))
        except Exception:
            self.handleError(record)


def _log_to_worker(conn: Connection, level: int) -> None:
    """Every record at ``level`` (the worker's root level) and above goes to the worker."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(_ToWorker(conn))
    root.setLevel(level)


class _State:
    """The run in this child's handler, for the stop signals; whether the child is still
    importing its handlers (and maybe the worker's main module)."""

    ctx: ProcessContext | None = None
    importing = False


def importing_handlers() -> bool:
    """Whether this is a handler process importing its handlers: a worker started then
    (a main module that starts one at import) must not start processes of its own."""
    return _State.importing


def _stop(signum: int, _frame: Any) -> None:
    ctx = _State.ctx
    if ctx is not None:  # a signal for a run that ended meanwhile is let go
        ctx._cancelled = True
        raise HandlerInterrupted(_WHY[signal.Signals(signum)])


def _die_with_parent() -> None:
    """Have the kernel kill this process when the worker that started it dies (Linux):
    a handler of a run the worker can no longer report must not run on."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


def resident_bytes(pid: int | str = "self") -> int | None:
    """Process ``pid``'s resident memory (Linux's ``/proc``; a small file, read at
    once; "self": this one's), None once it is gone or where unknown."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def rebuild(blob: tuple[Any, ...]) -> Exception:
    """An exception sent over the socket (:func:`error_blob`) made again; one that is
    not an :class:`Exception` (``SystemExit``, ``KeyboardInterrupt``) is made a plain
    one of its name and text: raised in the worker it would end the worker, not the
    run."""
    pickled, name, text, retryable = blob
    if pickled is not None:
        with contextlib.suppress(Exception):
            exc = pickle.loads(pickled)
            if isinstance(exc, Exception):
                return exc
    from flo_redis.errors import NonRetryableError

    base: type[Exception] = Exception if retryable else NonRetryableError
    made: Exception = type(name, (base,), {"__module__": "builtins"})(text)
    return made


def error_blob(exc: BaseException) -> tuple[Any, ...]:
    """``exc`` as it crosses between processes: pickled when it pickles and comes back
    (an exception whose ``__init__`` takes other arguments than its ``args`` does not),
    else its type's name and text, and whether a failure it causes is retried."""
    from flo_redis.errors import NonRetryableError

    try:
        pickled: bytes | None = pickle.dumps(exc, pickle.HIGHEST_PROTOCOL)
        pickle.loads(pickled)  # type: ignore[arg-type]
    except Exception:
        pickled = None
    return (pickled, type(exc).__name__, _text(exc), not isinstance(exc, NonRetryableError))


def _text(exc: BaseException) -> str:
    """``str(exc)``, or what says it could not be had (a ``__str__`` that raises)."""
    try:
        return str(exc)
    except Exception as broken:
        return f"(its text could not be had: {type(broken).__name__})"


def _traceback() -> str:
    """The traceback of the exception being handled, as far as it can be printed."""
    try:
        return traceback.format_exc()
    except Exception:
        return ""


def _run(conn: Connection, handlers: dict[str, Any], message: tuple[Any, ...]) -> bytes:
    """One run's reply (``message``: "run", seq, the handler's key, the context's fields
    or the context, whether to measure memory): ("done", seq, rss, value), ("outcome",
    seq, rss, name, value), ("error", seq, rss, blob, traceback) or ("stopped", seq,
    rss, why)."""
    seq, key, fields, measure = message[1], message[2], message[3], message[4]
    # An action run's fields make its context here; a stream record's context comes whole.
    ctx = ProcessContext(conn, fields) if type(fields) is tuple else fields
    reply: tuple[Any, ...]
    try:
        try:
            _State.ctx = ctx
            value = handlers[key](ctx)
        finally:
            _State.ctx = None
    except HandlerInterrupted as stop:
        reply = ("stopped", seq, 0, stop.why)
    except BaseException as exc:  # SystemExit too: it ends the run, not the process
        reply = ("error", seq, 0, error_blob(exc), _traceback())
    else:
        if isinstance(value, Outcome):
            reply = ("outcome", seq, 0, value.outcome, value.value)
        else:
            reply = ("done", seq, 0, value)
    rss = (resident_bytes() or 0) if measure else 0
    try:
        return pickle.dumps((*reply[:2], rss, *reply[3:]), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # a return value that does not pickle
        unsent = TypeError(
            f"the handler's result could not be sent from its process ({exc}); return "
            "bytes, or a value the worker's serializer takes that pickles"
        )
        return pickle.dumps(("error", seq, rss, error_blob(unsent), ""))


def main(fd: int) -> None:
    """The child's life: read its start, import the handlers, run runs until told to
    exit or the worker is gone (its socket closed: the child ends quietly)."""
    _die_with_parent()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    conn = Connection(fd)
    with contextlib.suppress(EOFError, OSError):
        _serve(conn)


def _serve(conn: Connection) -> None:
    preparation, handlers_blob, level = pickle.loads(conn.recv_bytes())
    _log_to_worker(conn, level)
    try:
        from multiprocessing.spawn import prepare

        _State.importing = True
        prepare(preparation)
        handlers = pickle.loads(handlers_blob)
        _State.importing = False
    except BaseException:
        conn.send_bytes(pickle.dumps(("failed", traceback.format_exc())))
        sys.exit(1)
    signal.signal(SIG_CANCEL, _stop)
    signal.signal(SIG_TIMEOUT, _stop)
    _send(conn, pickle.dumps(("ready", os.getpid())))
    while True:
        message = pickle.loads(conn.recv_bytes())
        if message[0] == "run":
            _send(conn, _run(conn, handlers, message))
        elif message[0] == "exit":
            return


__all__ = [
    "HandlerInterrupted",
    "Outcome",
    "PayloadReading",
    "ProcessContext",
    "error_blob",
    "main",
    "rebuild",
]
