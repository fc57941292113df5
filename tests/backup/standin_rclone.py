"""A stand-in for the rclone program, for fast tests of the driver (homelab.runtime.rclone.Rclone).

Appends its argv (and the names of any --files-from0 list) as a JSON line to $STANDIN_RECORD, then acts
by $STANDIN_MODE: ok (prints $STANDIN_STDOUT), fail (exit 3 with a message on stderr), errors (JSON log
lines at error level, exit 1), hang (stats lines, no progress, until killed), slow (1.5 s of silence, exit 0).
"""

import json
import os
import sys
import time
from pathlib import Path


def _value(flag: str) -> str | None:
    args = sys.argv[1:]
    return args[args.index(flag) + 1] if flag in args else None


def main() -> int:
    record = {"argv": sys.argv[1:]}
    listed = _value("--files-from0")
    if listed:
        with Path(listed).open("rb") as handle:
            record["files"] = [os.fsdecode(n) for n in handle.read().split(b"\0")[:-1]]
    if "obscure" in sys.argv:
        print("obscured-" + sys.stdin.read()[::-1])
        return 0
    with Path(os.environ["STANDIN_RECORD"]).open("a") as out:
        out.write(json.dumps(record) + "\n")
    mode = os.environ.get("STANDIN_MODE", "ok")
    log = _value("--log-file")
    if mode == "hang":
        line = {"level": "notice", "msg": "stats", "stats": {"bytes": 1, "checks": 0, "transfers": 0}}
        while True:  # rclone logs stats every second whether or not anything moves
            if log:
                with Path(log).open("a") as handle:
                    handle.write(json.dumps(line) + "\n")
            time.sleep(0.2)
    if mode == "slow":  # one long silent step (hashing a large file), then done
        time.sleep(1.5)
        return 0
    if mode == "fail":
        sys.stderr.write("Failed to lsjson: directory not found\n" if "lsjson" in sys.argv else "boom: secret-pw\n")
        return 3
    if mode == "errors" and log:
        with Path(log).open("a") as handle:
            handle.write(json.dumps({"level": "error", "msg": "no space left on device", "object": "a/b"}) + "\n")
            handle.write("not json\n")
        return 1
    sys.stdout.write(os.environ.get("STANDIN_STDOUT", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
