"""Delivering a worker's reports (complete, fail, ack, nack): resent, never converted.

A report lost to a dropped connection is sent again, identically, at most
:data:`RESULT_SENDS` times in all; the scripts answer an identical resend of a report that
already took effect as success, so a resend never applies twice. A report the store
refused (stale lease, unknown run) is logged and dropped: resending it would be refused
too, and turning it into another report (a complete into a fail, an ack into a nack)
would be wrong. While the worker stops, resends get :data:`STOP_RECONNECT_S` in all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .errors import ServerError, is_connection_error
from .observe import NO_OBSERVER, WorkerObserver

RESULT_SENDS = 3
STOP_RECONNECT_S = 2.0
_RESEND_PAUSE_S = (0.1, 0.5)


async def send_report(
    what: str,
    send: Callable[[], Awaitable[object]],
    stopping: Callable[[], bool],
    log: logging.Logger,
    *,
    sent: int = 0,
    report: str = "",
    observer: WorkerObserver = NO_OBSERVER,
) -> bool:
    """Send one report; True once the store accepted it, False if refused or lost.
    ``sent`` counts sends the caller already made (lost to a connection error); the
    ``observer`` hears of each resend and refusal of this ``report`` kind."""
    loop = asyncio.get_running_loop()
    stop_deadline: float | None = None
    for attempt in range(sent + 1, RESULT_SENDS + 1):
        if attempt > 1:
            observer.report_resent(report)
        try:
            await send()
            return True
        except ServerError as exc:
            observer.report_refused(report)
            log.warning("%s refused (%s); dropped", what, exc)
            return False
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            if attempt == RESULT_SENDS:
                log.error("%s lost after %d sends (%s)", what, RESULT_SENDS, exc)
                return False
            pause = _RESEND_PAUSE_S[min(attempt - 1, len(_RESEND_PAUSE_S) - 1)]
            if stopping():
                if stop_deadline is None:
                    stop_deadline = loop.time() + STOP_RECONNECT_S
                pause = min(pause, stop_deadline - loop.time())
                if pause <= 0:
                    log.error("%s lost while stopping (%s)", what, exc)
                    return False
            log.info("%s: connection lost (%s); sending again", what, exc)
            await asyncio.sleep(pause)
    return False
