"""The `homelab` program: the start-up signal handlers first, then the CLI.

Importing the CLI (typer, click, pydantic) takes a while; a Ctrl-C or SIGTERM in that time must end the
program with one line, not a KeyboardInterrupt traceback. So the very first thing the program does is
install handlers that do just that (only modules the interpreter has already loaded are used), and the
CLI's error handler replaces them while a command runs (homelab/signals.py).
"""

import os
import signal
import sys

_WORDS: dict[int, str] = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


def _quit_at_once(signum: int, _frame: object) -> None:
    """Nothing is being changed (start-up, or the command is done): one line, and out with 128 + n."""
    word = _WORDS.get(signum, "stopped")
    os.write(2, f"{word}\n".encode())
    if "--json" in sys.argv[1:]:  # the one JSON document --json promises
        document = f'{{\n  "ok": false,\n  "exit_code": {128 + signum},\n  "errors": [\n    "{word}"\n  ]\n}}\n'
        os.write(1, document.encode())  # the json module is not loaded yet: written as it would print it
    os._exit(128 + signum)  # how shells report it: 130 for SIGINT, 143 for SIGTERM


def quit_at_once() -> None:
    for signum in _WORDS:
        signal.signal(signum, _quit_at_once)


def main() -> None:
    quit_at_once()
    # pydantic looks for plugins by reading the metadata of every installed distribution when the first
    # model is built (about 2 ms of every command); this program's config checks are its own. Inherited by
    # the programs it runs, which ignore it; `PYDANTIC_DISABLE_PLUGINS=` (empty) brings plugins back.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from homelab.cli import main as cli_main

    cli_main()
