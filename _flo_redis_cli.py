"""The ``flo-redis`` command's entry point: the first of flo-redis that the command runs.

Loading the command takes a few tenths of a second (``flo_redis`` imports the client,
redis-py and the Lua library; the command adds click, rich and its subcommands). A Ctrl-C
in that time raised KeyboardInterrupt wherever the import happened to be, and Python
printed its traceback. Any module of the ``flo_redis`` package runs only once the
package's ``__init__`` has imported all of that, so this one lives beside the package:
it takes SIGINT over before anything is imported, so that a Ctrl-C while the command
loads prints ``interrupted`` and exits 130 at once (as a shell does for a Ctrl-C), then
hands SIGINT back to Python before the command runs, where the command handles
KeyboardInterrupt itself (a worker still importing its app, connecting, serving).

A SIGINT that came in ignored (a process started in the background by a shell without
job control) stays ignored. ``python -m flo_redis.cli`` runs the same command without
this guard: the package is imported before any code of the command can run.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED = 130
"""The exit status of a command interrupted by Ctrl-C (128 + SIGINT), as a shell shows it."""


def _interrupted_while_loading(signum: int, frame: FrameType | None) -> None:
    # Nothing has started that needs stopping: leave at once, without unwinding the
    # imports under way.
    os.write(sys.stderr.fileno(), b"interrupted\n")
    os._exit(INTERRUPTED)


def main() -> None:
    """Load the ``flo-redis`` command with Ctrl-C guarded, then run it."""
    guarded = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if guarded:
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    from flo_redis.cli import main as command

    if guarded:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    command()


if __name__ == "__main__":
    main()
