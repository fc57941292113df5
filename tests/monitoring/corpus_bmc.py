"""An ipmi_sim BMC built from a published BMC listing itself (tests/fixtures/sdr-corpus): names, sensor
types, entity ids, units, readings and thresholds come from the listing's text, read here by a reader
of its own (not homelab's parser, nor any inventory or profile), so the simulator cannot inherit a
mistake of the code it tests.

Each analog sensor with a reading becomes a full sensor record compiled by sdrcomp, its value read by
ipmi_sim from a file (`CorpusBmc.set`), its thresholds served by `sensor_set_threshold`. Each discrete
row of an `ipmitool sensor` listing (its status column holds the asserted states, "0x0280": offsets
0-7, then 8-14) becomes a compact record with a sensor-specific event/reading type, its state bits read
from a file too. The listing does not say a discrete sensor's type; ipmitool prints the state bits as
they are whatever the type, so every one is an Entity Presence sensor here.
"""

from __future__ import annotations

import math
import re
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.monitoring import e2e_support as e2e

# listing unit -> (sdrcomp sensor_type, IPMI sensor type code, sdrcomp base_unit, percentage)
UNITS = {
    "degrees c": ("Temperature", 0x01, "degrees_C", False),
    "c": ("Temperature", 0x01, "degrees_C", False),
    "volts": ("Voltage", 0x02, "Volts", False),
    "v": ("Voltage", 0x02, "Volts", False),
    "amps": ("Current", 0x03, "Amps", False),
    "rpm": ("Fan", 0x04, "RPM", False),
    "percent": ("Fan", 0x04, "unspecified", True),
    "watts": ("Other_Units_Based_Sensor", 0x0B, "Watts", False),
    "w": ("Other_Units_Based_Sensor", 0x0B, "Watts", False),
}
DISCRETE = ("Entity_Presence", 0x25)  # sdrcomp's sensor type name and its code
THRESHOLD_NAMES = ("lnr", "lc", "lnc", "unc", "uc", "unr")  # sdrcomp's names, in `ipmitool sensor` order


@dataclass
class Row:
    """One analog sensor of a listing, as its text says."""

    name: str
    unit: str
    reading: float
    entity: tuple[int, int] | None = None
    thresholds: dict[str, float] = field(default_factory=dict)  # THRESHOLD_NAMES -> value
    states: int | None = None  # a discrete row's asserted states (unit "discrete")

    @property
    def discrete(self) -> bool:
        return self.states is not None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_rows(text: str) -> list[Row]:
    """Analog rows of an `sdr elist`, `ipmitool sensor` or `ipmi-sensors` listing."""
    rows: list[Row] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if line.startswith("#") or len(cells) < 3:
            continue
        if len(cells) == 5 and re.fullmatch(r"\d+\.\d+", cells[3]):  # sdr elist
            match = re.match(r"(-?[\d.]+) ([A-Za-z ]+?)(,|$)", cells[4])
            if match and match.group(2).lower() in UNITS:
                ids = tuple(int(x) for x in cells[3].split("."))
                rows.append(Row(cells[0], match.group(2).lower(), float(match.group(1)), ids))  # type: ignore[arg-type]
        elif len(cells) == 10 and _float(cells[1]) is not None and cells[2].lower() in UNITS:  # sensor
            limits = {n: v for n, c in zip(THRESHOLD_NAMES, cells[4:], strict=True) if (v := _float(c)) is not None}
            rows.append(Row(cells[0], cells[2].lower(), float(cells[1]), None, limits))
        elif len(cells) == 10 and cells[2] == "discrete" and re.fullmatch(r"0x[0-9a-fA-F]{4}", cells[3]):
            states = int(cells[3][2:4], 16) | (int(cells[3][4:6], 16) & 0x7F) << 8  # bit 7 of byte 2 is reserved
            rows.append(Row(cells[0], "discrete", 0.0, None, states=states))
        elif len(cells) == 6 and cells[0].isdigit() and _float(cells[3]) is not None and cells[4].lower() in UNITS:
            rows.append(Row(cells[1], cells[4].lower(), float(cells[3])))  # ipmi-sensors
    return rows


def _elist_entities(text: str) -> dict[str, list[tuple[int, int]]]:
    """Every `sdr elist` row's entity by name, in listing order (discrete rows included)."""
    found: dict[str, list[tuple[int, int]]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if not line.startswith("#") and len(cells) == 5 and re.fullmatch(r"\d+\.\d+", cells[3]):
            found.setdefault(cells[0], []).append(tuple(int(x) for x in cells[3].split(".")))  # type: ignore[arg-type]
    return found


def board(*listings: Path) -> list[Row]:
    """A board's sensors: the first listing's rows, with the thresholds of a second listing of the same
    board joined by name and order, and that listing's discrete rows (placed at the first listing's
    entity for their name, where it has one)."""
    rows = read_rows(listings[0].read_text())
    entities = _elist_entities(listings[0].read_text())
    for extra in listings[1:]:
        pending: dict[str, list[Row]] = {}
        for row in read_rows(extra.read_text()):
            if row.discrete and not any(r.name == row.name and r.discrete for r in rows):
                places = entities.get(row.name)
                row.entity = places.pop(0) if places else None
                rows.append(row)
            else:
                pending.setdefault(row.name, []).append(row)
        for row in rows:
            if pending.get(row.name):
                row.thresholds = row.thresholds or pending[row.name].pop(0).thresholds
    return rows


@dataclass
class Scale:
    """value = m * raw * 10^r_exp; raw a byte, two's complement when the sensor reads negative values."""

    m: int
    r_exp: int
    signed: bool

    @staticmethod
    def fitting(values: list[float]) -> Scale:
        signed = min(values) < 0
        top = max(abs(v) for v in values) or 1.0
        limit = 127 if signed else 255
        for r_exp in range(-3, 5):
            m = math.ceil(top / limit / 10**r_exp)
            if m <= 511 and m * 10**r_exp * limit >= top:  # M is a 10-bit signed number
                return Scale(max(m, 1), r_exp, signed)
        raise ValueError(f"no IPMI scale holds {values}")

    @property
    def step(self) -> float:
        return self.m * 10**self.r_exp

    def raw(self, value: float) -> int:
        raw = round(value / self.step)
        low, high = (-128, 127) if self.signed else (0, 255)
        raw = max(low, min(high, raw))
        return raw & 0xFF

    def value(self, raw: int) -> float:
        if self.signed and raw > 127:
            raw -= 256
        return raw * self.step


@dataclass
class SimSensor:
    number: int
    row: Row
    entity: tuple[int, int]
    scale: Scale

    def sdr_text(self) -> str:
        if self.row.discrete:
            return self._discrete_sdr_text()
        sensor_type, _code, unit, percent = UNITS[self.row.unit]
        readable = [f"\t{name}_thrsh_readable\ttrue" for name in THRESHOLD_NAMES if name in self.row.thresholds]
        fmt = "2s_complement" if self.scale.signed else "unsigned"
        lines = [
            "sdr type 1", "\tsensor_owner_id\t0x20", "\tsensor_owner_lun\t0", "\tchannel_number\t0",
            f"\tsensor_number\t{self.number}", f"\tentity_id\t{self.entity[0]}", f"\tentity_instance\t{self.entity[1]}",
            "\tinit_scanning\ttrue", "\tinit_sensor_type\ttrue", "\tdefault_sensor_scan_on\ttrue",
            f"\tsensor_type\t{sensor_type}", "\tevent_reading_type_code\t1", f"\tanalog_data_format\t{fmt}",
            "\trate_unit\tnone", "\tmodifier_unit\tnone", f"\tpercentage\t{'true' if percent else 'false'}",
            f"\tbase_unit\t{unit}", "\tmodifier_unit_code\tunspecified", "\tlinearization\tlinear",
            f"\tm\t{self.scale.m}", "\ttolerance\t0", "\tb\t0", "\taccuracy\t1", "\taccuracy_exp\t0",
            "\tsensor_direction\tinput", f"\tr_exp\t{self.scale.r_exp}", "\tb_exp\t0",
            f"\tsensor_threshold_access\t{'readable' if readable else '0'}", *readable,
            "\tsensor_maximum\t255", "\tsensor_minimum\t0", f'\tid_string\t"{self.row.name}"', "endsdr", "",
        ]  # fmt: skip
        return "\n".join(lines)

    def _discrete_sdr_text(self) -> str:
        lines = [
            "sdr type 2", "\tsensor_owner_id\t0x20", "\tsensor_owner_lun\t0", "\tchannel_number\t0",
            f"\tsensor_number\t{self.number}", f"\tentity_id\t{self.entity[0]}", f"\tentity_instance\t{self.entity[1]}",
            "\tinit_scanning\ttrue", "\tinit_sensor_type\ttrue", "\tdefault_sensor_scan_on\ttrue",
            f"\tsensor_type\t{DISCRETE[0]}", "\tevent_reading_type_code\t0x6f", "\tsensor_direction\tinput",
            f'\tid_string\t"{self.row.name}"', "endsdr", "",
        ]  # fmt: skip
        return "\n".join(lines)

    def raw(self, value: float) -> int:
        """What the sensor's value file holds: the state bits, or the analog reading's raw byte."""
        return int(value) if self.row.discrete else self.scale.raw(value)

    def threshold_command(self) -> str | None:
        if not self.row.thresholds:
            return None
        # sensor_set_threshold takes the enable mask and values from threshold 5 (unr) down to 0 (lnc)
        order = ("unr", "uc", "unc", "lnr", "lc", "lnc")
        mask = "".join("1" if name in self.row.thresholds else "0" for name in order)
        values = " ".join(f"0x{self.scale.raw(self.row.thresholds.get(name, 0.0)):02x}" for name in order)
        return f"sensor_set_threshold 0x20 0 {self.number} readable {mask} {values}"


def _entity(row: Row, counters: dict[int, int]) -> tuple[int, int]:
    """The listing's entity; listings without one (`sensor`, `ipmi-sensors`) get the processor entity for
    CPU sensors and the system board's otherwise, numbered in listing order."""
    if row.entity is not None:
        return row.entity
    entity_id = 3 if "cpu" in row.name.lower() and "dimm" not in row.name.lower() else 7
    counters[entity_id] = counters.get(entity_id, 0) + 1
    return entity_id, counters[entity_id]


class CorpusBmc:
    """ipmi_sim on <address>:623 serving a listing's analog sensors."""

    def __init__(self, name: str, rows: list[Row], workdir: Path, address: str, programs: dict[str, str]) -> None:
        self.name, self.workdir, self.address = name, workdir, address
        workdir.mkdir(parents=True, exist_ok=True)
        counters: dict[int, int] = {}
        self.sensors = []
        for number, row in enumerate(rows, start=1):
            if row.discrete:
                self.sensors.append(SimSensor(number, row, _entity(row, counters), Scale(1, 0, False)))
                continue
            extremes = [row.reading, *row.thresholds.values(), 0.0]
            if row.unit in ("degrees c", "c"):
                extremes.append(max([row.reading, *row.thresholds.values()]) + 15)
            self.sensors.append(SimSensor(number, row, _entity(row, counters), Scale.fitting(extremes)))
        self._write(programs["sdrcomp"])
        (workdir / "state").mkdir(exist_ok=True)
        self.process = e2e.Process(
            f"ipmi_sim {name}",
            [programs["ipmi_sim"], "-c", str(workdir / "lan.conf"), "-f", str(workdir / "bmc.emu"),
             "-s", str(workdir / "state"), "-n"],
            workdir / "ipmi_sim.log",
        )  # fmt: skip

    def _write(self, sdrcomp: str) -> None:
        sdrs = self.workdir / "bmc.sdrs"
        sdrs.write_text("".join(s.sdr_text() for s in self.sensors))
        compiled = subprocess.run([sdrcomp, str(sdrs)], capture_output=True, timeout=30, check=False)
        if compiled.returncode != 0:
            raise RuntimeError(f"sdrcomp failed on {sdrs}: {compiled.stderr.decode(errors='replace')}")
        records = e2e.decode_sdrcomp(compiled.stdout)
        emu = ["mc_setbmc 0x20", "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02"]
        off = "0" * 15
        for s in self.sensors:
            # the ID string: byte 48 of a full record, byte 32 of a compact one
            record = e2e.with_ascii_id(records[s.number], s.row.name, 31 if s.row.discrete else 47)
            emu.append("main_sdr_add 0x20 " + " ".join(f"0x{b:02x}" for b in record))
        for s in self.sensors:
            self.value_file(s).write_text(f"{s.raw(s.row.states if s.row.discrete else s.row.reading)}\n")
            code, reading_type = (DISCRETE[1], 0x6F) if s.row.discrete else (UNITS[s.row.unit][1], 0x01)
            emu.append(
                f'sensor_add 0x20 0 {s.number} 0x{code:02x} 0x{reading_type:02x} poll 1000 file "{self.value_file(s)}"'
            )
            emu.append(f"sensor_set_event_support 0x20 0 {s.number} enable scanning per-state {off} {off} {off} {off}")
            if s.threshold_command():
                emu.append(str(s.threshold_command()))
        # a SEL (up to 1000 entries; flags 0x0a: "add SEL entry" and "get SEL allocation info" supported)
        # that platform events (`ipmitool event`) land in, as a real BMC's do
        emu += ["sel_enable 0x20 1000 0x0a", "mc_enable 0x20"]
        (self.workdir / "bmc.emu").write_text("\n".join(emu) + "\n")
        auths = [f"    allowed_auths_{p} none md2 md5 straight" for p in ("callback", "user", "operator", "admin")]
        self.console = e2e.free_port()  # ipmi_sim's command console: the test adds SEL entries through it
        (self.workdir / "lan.conf").write_text(
            "\n".join(
                [f'name "{self.name}"', f"console {self.address} {self.console}", "set_working_mc 0x20", "  startlan 1",
                 f"    addr {self.address} {e2e.IPMI_PORT}", "    priv_limit admin", *auths,
                 "    guid a123456789abcdefa123456789abcdef", "  endlan",
                 f'user 2 true "{e2e.BMC_USER}" "{e2e.BMC_PASSWORD}" admin 10 none md2 md5 straight', ""]
            )
        )  # fmt: skip

    def value_file(self, sensor: SimSensor) -> Path:
        return self.workdir / f"sensor-{sensor.number}"

    def sensor(self, name: str) -> SimSensor:
        return next(s for s in self.sensors if s.row.name == name)

    def set(self, sensor: SimSensor, value: float) -> float:
        """Set a reading, or a discrete sensor's state bits (ipmi_sim polls the file each second);
        returns what the BMC will report."""
        raw = sensor.raw(value)
        tmp = self.value_file(sensor).with_suffix(".tmp")
        tmp.write_text(f"{raw}\n")
        tmp.replace(self.value_file(sensor))
        return raw if sensor.row.discrete else sensor.scale.value(raw)

    def add_sel(self, sensor_type: int, sensor_number: int, offset: int) -> None:
        """A System Event Log entry as a BMC logs a sensor-specific event (record type 02h: timestamp,
        generator 20h, EvM rev 04h, sensor type, number, event type 6Fh asserted, event data 1 = the
        offset; IPMI 2.0 section 32.1), added through ipmi_sim's console."""
        record = [0x02, 0, 0, 0, 0, 0x20, 0x00, 0x04, sensor_type, sensor_number, 0x6F, offset, 0xFF, 0xFF]
        with socket.create_connection((self.address, self.console), timeout=10) as console:
            console.sendall(("sel_add 0x20 " + " ".join(f"0x{b:02x}" for b in record) + "\n").encode())
            answer = b""
            while b"Added record" not in answer:
                chunk = console.recv(4096)
                if not chunk:
                    raise RuntimeError(f"ipmi_sim {self.name} console: {answer!r}")
                answer += chunk

    def stop(self) -> None:
        self.process.stop()
