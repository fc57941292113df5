"""`python -m tests.fakes.run_with_fakes ARGS...`: the homelab program with the Docker Engine and ZFS replaced
by the recording fakes, so a test can send signals to a real process running `up` (tests/cli/test_signals.py).
The fake engine lives in this process: each run starts from an empty engine."""

from __future__ import annotations

import sys
import time

from homelab import entry

entry.quit_at_once()  # as the program does, before the heavy imports below

from homelab.engine import compose as apply  # noqa: E402
from homelab.runtime import docker as docker_module  # noqa: E402
from tests.fakes.docker import FakeDocker  # noqa: E402
from tests.fakes.zfs import FakeZfs  # noqa: E402


class _SlowDocker(FakeDocker):
    """A compose `up` takes a moment, as a real one does: signals then land inside `up` too."""

    def up(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        time.sleep(0.05)
        super().up(*args, **kwargs)  # type: ignore[arg-type]


if __name__ == "__main__":
    engine = _SlowDocker()
    docker_module.Docker = lambda: engine  # type: ignore[assignment,misc]
    apply.ZfsCli = FakeZfs  # type: ignore[assignment,misc]
    sys.argv[0] = "homelab"
    entry.main()
