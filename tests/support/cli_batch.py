"""Run several ``flo-redis`` commands in one process of their own, as the entry point
runs each: ``python cli_batch.py '<json list of argument lists>'`` prints, as JSON, each
command's exit status and output. An exception no command handles is printed with its
traceback, as the ``flo-redis`` script would print it, and counts as exit status 1.

One interpreter for several commands: what a test that runs many of them (a property
test, once per example) can afford, where starting the script for each would take a
second or more apiece on a loaded machine."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback

from flo_redis.cli import main


def run(args: list[str]) -> dict[str, object]:
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main.main(args=args, prog_name="flo-redis")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    return {"args": args, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    print(json.dumps([run(args) for args in json.loads(sys.argv[1])]))
