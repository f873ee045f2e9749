"""Log set-up for the command: plain text lines or one JSON object per line.

The library only logs through ``logging.getLogger("flo_redis.<area>")``; where those
lines go and how they look is decided here, for the command's process alone. A text
line is cleaned for the terminal (:mod:`._render`); a JSON line escapes control
characters itself.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

from flo_redis.cli._render import TerminalFormatter

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

_TEXT = "%(asctime)s %(levelname)-7s %(name)s [%(process)d] %(message)s"
# Attributes every LogRecord has; anything else was passed in ``extra=`` and is kept.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, process, the fields
    given in ``extra=`` (run_id, action, worker_id ...) and ``exc`` with the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:  # formatted where it was raised (a handler process)
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


def setup_logging(level: str, fmt: str) -> None:
    """Send every logger's records at ``level`` and above to stderr in ``fmt``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TerminalFormatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
