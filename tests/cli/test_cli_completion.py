"""Shell completion as docs/cli.md sets it up: click's, through the installed command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FLO_REDIS = str(Path(sys.executable).with_name("flo-redis"))


def completed(words: str, shell: str = "bash") -> str:
    env = {**os.environ, "_FLO_REDIS_COMPLETE": f"{shell}_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1)}  # fmt: skip
    return subprocess.run(
        [FLO_REDIS], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout


def test_commands_options_and_choices_complete() -> None:
    assert "plain,runs" in completed("flo-redis ru").splitlines()
    assert "plain,--state" in completed("flo-redis runs list --st").splitlines()
    assert "plain,failed" in completed("flo-redis runs list job --state fa").splitlines()


def test_the_script_to_source_is_printed() -> None:
    env = {**os.environ, "_FLO_REDIS_COMPLETE": "bash_source"}
    script = subprocess.run([FLO_REDIS], env=env, capture_output=True, text=True, timeout=60)
    assert "_flo_redis_completion()" in script.stdout
