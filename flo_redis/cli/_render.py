"""Everything the command prints goes through here, made safe for a terminal.

What the commands print comes from Redis, where anyone who may write to the namespace
put it: an action's name, a run's error text, its output. A terminal obeys the escape
sequences it is sent (a new window title, a cleared screen, text drawn over other
text), and rich reads ``[bold red]`` as markup and ``:smile:`` as an emoji. So:

- :func:`terminal_text` is the one cleaning: every control character but newline and tab
  (C0, DEL and C1, U+0080-U+009F), the controls that reorder text on screen (bidi
  embeddings, overrides and isolates) and lone surrogates become a visible escape
  (``\\x1b``, ``\\x9b``, ``\\u202e``); everything else is left as it is.
- :func:`console` draws rich tables with markup and emoji codes off, and every string it
  draws (cells, titles, lines) is cleaned first.
- :func:`say` and :func:`ask` are the command's ``echo`` and ``confirm``.
- :class:`SafeGroup`, the ``flo-redis`` group, cleans the messages of the errors click
  prints, the lines logged to stderr and the traceback of an unexpected error.

``--json`` prints the exact values: JSON writes every control character (and every
character beyond ASCII) as a ``\\u`` escape itself, so it passes through :func:`say`
unchanged. A test (tests/cli/test_cli_terminal.py) holds every module of the command to
printing only through here.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from types import TracebackType
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.text import Text

# C0 but tab and newline, DEL, C1; the bidi controls (ALM, LRM, RLM, the embeddings and
# overrides U+202A-U+202E, the isolates U+2066-U+2069); lone surrogates, which cannot be
# written as UTF-8 at all.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(value: object) -> str:
    """``value`` as text a terminal shows as it is: control characters (but newline and
    tab), bidi controls and lone surrogates written as visible escapes (``\\x1b``)."""
    return _UNSAFE.sub(_escape, value if isinstance(value, str) else str(value))


class _SafeConsole(Console):
    """A rich console that draws every string as plain, cleaned text: no markup, no
    emoji codes, no control characters (:func:`terminal_text`)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs["markup"] = False
        kwargs["emoji"] = False
        return super().render_str(terminal_text(text), **kwargs)


def console(width: int | None = None) -> Console:
    """The console every table of the command is drawn on (stdout), ``width`` columns
    wide (None: the terminal's, or ``COLUMNS``)."""
    return _SafeConsole(file=sys.stdout, soft_wrap=False, markup=False, emoji=False, width=width)


def say(message: object = "", *, err: bool = False) -> None:
    """Print one line (to stderr with ``err``), cleaned."""
    click.echo(terminal_text(message), err=err)


def ask(question: str) -> None:
    """Ask yes or no on stderr, so stdout holds only the answer (``--json``); the question
    cleaned; abort (exit 1) on no."""
    click.confirm(terminal_text(question), abort=True, err=True)


class TerminalFormatter(logging.Formatter):
    """A log line (and its traceback), cleaned for the terminal it goes to."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_text(super().format(record))


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record comes, as logging's own
    last-resort handler does."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _last_resort() -> logging.Handler:
    handler = _Stderr()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(TerminalFormatter())
    return handler


def _print_uncaught(
    kind: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    sys.stderr.write(terminal_text("".join(traceback.format_exception(kind, exc, tb))))


class SafeGroup(click.Group):
    """The ``flo-redis`` group: every message click prints for an error is cleaned, and
    so are the records logged without a handler of their own (logging's last resort)
    and the traceback of an error nothing handled."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        logging.lastResort = _last_resort()
        if sys.excepthook is sys.__excepthook__:
            sys.excepthook = _print_uncaught
        return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            # Final to click's own code; cleaned here, just before click shows it.
            exc.message = terminal_text(exc.message)  # type: ignore[misc]
            raise
        except KeyboardInterrupt:
            # Ctrl-C before the command took SIGINT over (a worker still loading its
            # app or connecting): one line and the shell's code for it, not a
            # traceback or click's "Aborted!".
            interrupted()


def interrupted() -> NoReturn:
    """Say the command was interrupted and exit 130, as a shell does on Ctrl-C."""
    say("interrupted", err=True)
    raise SystemExit(130)
