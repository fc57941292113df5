"""A collectd python plugin (collectd 5.12's python.so; it runs inside collectd, as root, in the
collectd image) for the BMC's discrete sensors, which collectd's ipmi plugin skips ("Ignore sensor ...
because it is discrete", src/ipmi.c): each read runs `ipmitool sensor` and sends every configured
sensor's asserted states (the status column of a discrete row, "0x0280") as a gauge,
`bmc_state/gauge-<key>`. homelab never imports it: render/monitoring.py ships this file.

collectd.conf configures it (render/templates/collectd.conf.j2):

    <Module bmc_states>
      IpmiConfig "<the ipmi plugin's include>"   # LAN: Address, Username, Password are read from it
      CipherSuite 3                               # ipmitool -C
      Sensor "<name as the BMC prints it>" "<key>"   # one per sensor; same-named ones in listing order
    </Module>

Without IpmiConfig, ipmitool talks to the local BMC (/dev/ipmi0). The password reaches ipmitool in
its environment (-E), never on its command line.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

PLUGIN = "bmc_state"
TIMEOUT = 60
_SETTING = re.compile(r'^\s*(Address|Username|Password)\s+"((?:[^"\\]|\\.)*)"\s*$')
_STATES = re.compile(r"0x[0-9A-Fa-f]{1,4}")


def lan_settings(text: str) -> dict[str, str]:
    """Address, Username and Password from the ipmi plugin's config block (collectd string quoting)."""
    found = {}
    for line in text.splitlines():
        match = _SETTING.match(line)
        if match:
            found[match.group(1)] = re.sub(r"\\(.)", r"\1", match.group(2))
    return found


def states(listing: str, sensors: list[tuple[str, str]]) -> list[tuple[str, int]]:
    """(key, asserted states) of each configured sensor that `ipmitool sensor` lists as discrete with
    states; several sensors of one name are matched in listing order."""
    pending: dict[str, list[str]] = {}
    for name, key in sensors:
        pending.setdefault(name, []).append(key)
    found = []
    for line in listing.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != 10 or cells[2] != "discrete" or not pending.get(cells[0]):
            continue
        key = pending[cells[0]].pop(0)
        if _STATES.fullmatch(cells[3]):
            found.append((key, int(cells[3], 16)))
    return found


def command(lan: dict[str, str], cipher_suite: int | None) -> tuple[list[str], dict[str, str]]:
    """ipmitool's argv and environment: over LAN with `lan`'s settings, else the local BMC."""
    argv, env = ["ipmitool"], dict(os.environ)
    if lan:
        argv += ["-I", "lanplus", "-H", lan.get("Address", ""), "-U", lan.get("Username", ""), "-E"]
        env["IPMI_PASSWORD"] = lan.get("Password", "")
        if cipher_suite is not None:
            argv += ["-C", str(cipher_suite)]
    return [*argv, "sensor"], env


class Reader:
    def __init__(self, collectd: Any) -> None:
        self.collectd = collectd
        self.sensors: list[tuple[str, str]] = []
        self.lan: dict[str, str] = {}
        self.cipher_suite: int | None = None

    def configure(self, node: Any) -> None:
        for child in node.children:
            key = child.key.lower()
            if key == "sensor":
                self.sensors.append((str(child.values[0]), str(child.values[1])))
            elif key == "ipmiconfig":
                self.lan = lan_settings(Path(child.values[0]).read_text(encoding="utf-8", errors="replace"))
            elif key == "ciphersuite":
                self.cipher_suite = int(child.values[0])

    def read(self) -> None:
        argv, env = command(self.lan, self.cipher_suite)
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, errors="replace", timeout=TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.collectd.warning(f"bmc_states: ipmitool sensor: {exc}")
            return
        for key, value in states(done.stdout, self.sensors):
            self.collectd.Values(plugin=PLUGIN, type="gauge", type_instance=key).dispatch(values=[value])


def register(collectd: Any) -> Reader:
    reader = Reader(collectd)
    collectd.register_config(reader.configure)
    collectd.register_read(reader.read)
    return reader


try:  # inside collectd: the embedded module is there
    import collectd as _collectd  # type: ignore[import-not-found]
except ImportError:  # imported by a test
    pass
else:
    register(_collectd)
