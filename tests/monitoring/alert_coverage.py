"""Which sensors of the corpus boards sit inside an alert rule: each board's listings discovered (homelab's
parser, as `monitor discover` reads them), the stack's alert rules built from that inventory, and each row
of the listings as the corpus' own reader sees it (tests/monitoring/corpus_bmc.py) looked up in the
rules' targets by its series path.

`.venv/bin/python -m tests.monitoring.alert_coverage` prints the counts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from homelab.config.loader import load
from homelab.monitoring import discover as disc
from homelab.monitoring import inventory as inv
from homelab.monitoring.catalog_builder import catalog_for
from homelab.monitoring.discover import discover
from homelab.monitoring.series import escape
from homelab.plan import build_plan
from homelab.render.alerts import alert_rules
from tests.monitoring import corpus_bmc

CORPUS = Path(__file__).parent.parent / "fixtures" / "sdr-corpus"
# board (its collectd host name) -> its listings: the first an `sdr elist` where there is one, thresholds
# from the `sensor` one
BOARDS = {
    "dell-r720": ["dell-poweredge-r720-ipmitool-sdr-type-temp-fan.txt"],  # two sensors named "Temp"
    "hpe-dl360-gen9": [  # fans in percent, power, upper thresholds only
        "hpe-proliant-dl360-gen9-ipmitool-sdr-elist.txt",
        "hpe-proliant-dl360-gen9-ipmitool-sensor.txt",
    ],
    "x8dtu-f": ["supermicro-x8dtu-f-ipmitool-sensor.txt"],  # -12V, six thresholds, no entity ids
    "c2750d4i": ["asrock-c2750d4i-ipmi-sensors.txt"],  # FreeIPMI listing, absent fans, no thresholds
    "esc8000a-e12": [  # AMI firmware: every entity instance .0, six thresholds on the rails
        "asus-esc8000a-e12-ipmitool-sdr-elist.txt",
        "asus-esc8000a-e12-ipmitool-sensor.txt",
    ],
    "sm-atom": ["supermicro-unnamed-atom-board-ipmitool-sdr-elist-full.txt"],  # `sdr elist full`
    "hpe-dl360-gen10": ["hpe-proliant-dl360-gen10-ipmitool-sdr-elist-TRUNCATED.txt"],  # iLO 5
    "dell-idrac6": ["dell-poweredge-unnamed-idrac6-ipmitool-sdr-elist-all-TRUNCATED.txt"],  # `sdr elist all`
}
KIND = {"degrees c": "temperature", "c": "temperature", "volts": "voltage", "v": "voltage", "amps": "current",
        "rpm": "fan", "percent": "fan", "watts": "power", "w": "power", "discrete": "discrete"}  # fmt: skip


@dataclass(frozen=True)
class Listed:
    """A listing's listings as a BMC reader: the first one as `sdr`, the second as `sensor`."""

    texts: tuple[str, ...]

    def sdr(self) -> str:
        return self.texts[0]

    def sensors(self) -> str:
        return self.texts[1] if len(self.texts) > 1 else ""


@dataclass(frozen=True)
class Covered:
    board: str
    name: str
    kind: str  # temperature, fan, voltage, current, power, discrete
    path: str
    rules: tuple[str, ...]  # uids of the rules whose target reads its series
    normal: float  # its reading in the listing; a discrete sensor's states as discovered

    @property
    def valued(self) -> bool:
        """Inside a rule on its value (a limit, a baseline, a state change), not only the silent one."""
        return any(not uid.startswith("silent") for uid in self.rules)


def board_inventory(name: str) -> inv.Inventory:
    texts = tuple((CORPUS / f).read_text() for f in BOARDS[name])
    return discover(Listed(texts), None).inventory  # type: ignore[arg-type]


def rules_for(project: Path, name: str, inventory: inv.Inventory) -> list[dict[str, Any]]:
    """The alert rules of the example configured for `inventory` (host `name`, ipmi over LAN)."""
    raw = yaml.safe_load(project.read_text())
    raw["server"]["hostname"] = name
    raw["monitoring"]["inventory"] = f"inventory-{name}.yaml"
    config = project.with_name(f"homelab-{name}.yaml")
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    (project.parent / f"inventory-{name}.yaml").write_text(disc.dump(inventory))
    plan = build_plan(load(config))
    return [r for g in alert_rules(plan, catalog_for(plan))["groups"] for r in g["rules"]]


def series_of(host: str, rows: list[corpus_bmc.Row], inventory: inv.Inventory) -> list[tuple[corpus_bmc.Row,
        inv.BmcEntry, str]]:  # fmt: skip
    """Each row of a listing with its inventory entry (by name, entity and kind, in listing order) and the
    path of its series."""
    entries = list(inventory.bmc)
    found = []
    for row in rows:
        entity = f"{row.entity[0]}.{row.entity[1]}" if row.entity else None
        entry = next(
            e for e in entries
            if e.name == row.name and (e.kind == "discrete") == row.discrete and entity in (None, e.entity or entity)
            and not e.hide
        )  # fmt: skip
        entries.remove(entry)
        if row.discrete:
            path = f"collectd.{escape(host)}.bmc_state.gauge-{entry.key}"
        else:
            type_ = "percent" if row.unit == "percent" else {"temperature": "temperature", "fan": "fanspeed",
                    "voltage": "voltage", "current": "current", "power": "power"}[KIND[row.unit]]  # fmt: skip
            path = f"collectd.{escape(host)}.ipmi.{type_}-{entry.key}"
        found.append((row, entry, path))
    return found


def reads(target: str, path: str) -> bool:
    """Whether a Graphite target reads the series `path` (not merely one whose name starts so)."""
    return re.search(re.escape(path) + r"(?![\w-])", target) is not None


def coverage(project: Path, name: str) -> list[Covered]:
    rows = corpus_bmc.board(*(CORPUS / f for f in BOARDS[name]))
    inventory = board_inventory(name)
    rules = rules_for(project, name, inventory)
    found = []
    for row, entry, path in series_of(name, rows, inventory):
        inside = tuple(r["uid"] for r in rules if reads(r["data"][0]["model"]["target"], path))
        normal = float(entry.states or 0) if row.discrete else row.reading
        found.append(Covered(name, row.name, KIND[row.unit], path, inside, normal))
    return found


def summary(covered: list[Covered]) -> dict[str, tuple[int, int, int]]:
    """kind -> (sensors, inside a rule on their value, inside any rule)."""
    kinds: dict[str, tuple[int, int, int]] = {}
    for c in covered:
        total, valued, any_ = kinds.get(c.kind, (0, 0, 0))
        kinds[c.kind] = (total + 1, valued + c.valued, any_ + bool(c.rules))
    return kinds


if __name__ == "__main__":  # pragma: no cover
    import shutil
    import tempfile

    from tests.conftest import EXAMPLE, EXAMPLE_SECRETS, write_secret

    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "homelab.yaml"
        shutil.copytree(EXAMPLE.parent, tmp, dirs_exist_ok=True)
        for secret in EXAMPLE_SECRETS:
            write_secret(Path(tmp) / "secrets" / secret, "x")
        every = [c for board in BOARDS for c in coverage(project, board)]
        for kind, (total, valued, any_) in sorted(summary(every).items()):
            print(f"{kind:12} {total:4} sensors, {valued:4} inside a rule on their value, {any_:4} inside any rule")
