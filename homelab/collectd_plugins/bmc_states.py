"""A collectd python plugin (collectd 5.12's python.so; it runs inside collectd, as root, in the
collectd image) for the BMC's discrete sensors, which collectd's ipmi plugin skips ("Ignore sensor ...
because it is discrete", src/ipmi.c): each read runs `ipmitool sensor` and sends every configured
sensor's asserted states (the status column of a discrete row, "0x0280") as a gauge,
`bmc_state/gauge-<key>`; and, with `Sel true`, the System Event Log's new entries per read and how
many of them are critical, `bmc_sel/count-new` and `bmc_sel/count-critical`. homelab never imports it:
render/monitoring.py ships this file.

collectd.conf configures it (render/templates/collectd.conf.j2):

    <Module bmc_states>
      IpmiConfig "<the ipmi plugin's include>"   # LAN: Address, Username, Password are read from it
      CipherSuite 3                               # ipmitool -C
      Sensor "<name as the BMC prints it>" "<key>"   # one per sensor; same-named ones in listing order
      Sel true                                     # read the SEL too
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
SEL_PLUGIN = "bmc_sel"
TIMEOUT = 60
_SETTING = re.compile(r'^\s*(Address|Username|Password)\s+"((?:[^"\\]|\\.)*)"\s*$')
_STATES = re.compile(r"0x[0-9A-Fa-f]{1,4}")
_ENTRIES = re.compile(r"^\s*Entries\s*:\s*(\d+)\s*$", re.MULTILINE)
# a SEL event that needs someone (ipmitool's words for the IPMI 2.0 Table 42-2/42-3 offsets): a
# critical or non-recoverable limit crossed, a failure, an uncorrectable error, lost power or redundancy,
# an intrusion, the watchdog firing; not a non-critical limit, a correctable error, a presence
_CRITICAL = re.compile(
    r"(?<!non-)critical|non-recoverable|fail|fault|uncorrectable|ierr|thermal trip|input lost|ac lost"
    r"|redundancy lost|intrusion|timer expired|hard reset|machine check",
    re.IGNORECASE,
)


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


def sel_entries(info: str) -> int | None:
    """The number of entries `ipmitool sel info` reports."""
    match = _ENTRIES.search(info)
    return int(match.group(1)) if match else None


def critical_entries(elist: str) -> int:
    """How many `ipmitool sel elist` rows (`id | date | time | sensor | event | Asserted [| reading]`)
    assert a critical event."""
    count = 0
    for line in elist.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 6 and cells[5].lower() == "asserted" and _CRITICAL.search(cells[4]):
            count += 1
    return count


def command(lan: dict[str, str], cipher_suite: int | None, *args: str) -> tuple[list[str], dict[str, str]]:
    """ipmitool's argv and environment: over LAN with `lan`'s settings, else the local BMC."""
    argv, env = ["ipmitool"], dict(os.environ)
    if lan:
        argv += ["-I", "lanplus", "-H", lan.get("Address", ""), "-U", lan.get("Username", ""), "-E"]
        env["IPMI_PASSWORD"] = lan.get("Password", "")
        if cipher_suite is not None:
            argv += ["-C", str(cipher_suite)]
    return [*argv, *(args or ("sensor",))], env


class Reader:
    def __init__(self, collectd: Any) -> None:
        self.collectd = collectd
        self.sensors: list[tuple[str, str]] = []
        self.lan: dict[str, str] = {}
        self.cipher_suite: int | None = None
        self.sel = False
        self.sel_seen: int | None = None  # the SEL's entries at the last read (None: not read yet)

    def configure(self, node: Any) -> None:
        for child in node.children:
            key = child.key.lower()
            if key == "sensor":
                self.sensors.append((str(child.values[0]), str(child.values[1])))
            elif key == "ipmiconfig":
                self.lan = lan_settings(Path(child.values[0]).read_text(encoding="utf-8", errors="replace"))
            elif key == "ciphersuite":
                self.cipher_suite = int(child.values[0])
            elif key == "sel":
                self.sel = bool(child.values[0])

    def ipmitool(self, *args: str) -> str | None:
        argv, env = command(self.lan, self.cipher_suite, *args)
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, errors="replace", timeout=TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.collectd.warning(f"bmc_states: ipmitool {' '.join(args)}: {exc}")
            return None
        return done.stdout

    def read(self) -> None:
        if self.sensors:
            listing = self.ipmitool("sensor")
            for key, value in states(listing or "", self.sensors):
                self.collectd.Values(plugin=PLUGIN, type="gauge", type_instance=key).dispatch(values=[value])
        if self.sel:
            self.read_sel()

    def read_sel(self) -> None:
        """The SEL's new entries since the last read and how many of them are critical: `sel info` each
        read, `sel elist last N` only for new ones. The first read counts none (what was there before
        collectd started is old news); a cleared SEL counts what it holds now as new."""
        entries = sel_entries(self.ipmitool("sel", "info") or "")
        if entries is None:
            return
        seen, self.sel_seen = self.sel_seen, entries
        new = 0 if seen is None else entries - seen if entries >= seen else entries
        critical = critical_entries(self.ipmitool("sel", "elist", "last", str(new)) or "") if new else 0
        for instance, value in (("new", new), ("critical", critical)):
            self.collectd.Values(plugin=SEL_PLUGIN, type="count", type_instance=instance).dispatch(values=[value])


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
