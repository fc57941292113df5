"""The ledger of production orders: every certificate the edge was seen holding and every order `up`
let the edge make, kept in homelab's state (0600) so the count survives a lost acme.json or a wiped
certbot folder - the case where a client would otherwise re-order everything within one week. It also
keeps the name sets staging issued (staging first, homelab/certs/staging.py), per production CA."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from homelab.certs.store import Issued
from homelab.errors import HomelabError
from homelab.ownership import write_atomic
from homelab.plan_model import Plan

LEDGER_FILE = "ledger.json"
KEEP = timedelta(days=8)  # the longest window we count is 7 days; older entries cannot matter


@dataclass(frozen=True)
class Order:
    names: frozenset[str]
    at: datetime
    serial: str = ""  # set when the order produced a certificate; "" for an order homelab let happen

    @classmethod
    def of(cls, cert: Issued) -> Order:
        return cls(cert.names, cert.not_before, cert.serial)


@dataclass(frozen=True)
class Staged:
    """Staging issued `names` at `at`: the production CA `ca` may be asked for them."""

    names: frozenset[str]
    at: datetime
    ca: str


@dataclass
class Ledger:
    path: Path
    issued: list[Order]
    requested: list[Order]
    staged: list[Staged] = field(default_factory=list)  # never pruned: one entry per name set and CA

    def record_staged(self, names: list[frozenset[str]], ca: str, now: datetime) -> None:
        known = {(s.names, s.ca) for s in self.staged}
        self.staged += [Staged(n, now, ca) for n in names if (n, ca) not in known]

    def record_issued(self, certificates: list[Issued]) -> None:
        known = {o.serial for o in self.issued}
        for cert in certificates:
            if cert.ca == "production" and cert.serial not in known:
                self.issued.append(Order.of(cert))
                known.add(cert.serial)

    def record_requested(self, names: list[frozenset[str]], now: datetime) -> None:
        self.requested += [Order(n, now) for n in names]

    def prune(self, now: datetime) -> None:
        self.issued = [o for o in self.issued if now - o.at < KEEP]
        self.requested = [o for o in self.requested if now - o.at < KEEP]

    def save(self) -> None:
        def rows(orders: list[Order]) -> list[dict[str, object]]:
            return [{"names": sorted(o.names), "at": o.at.isoformat(), "serial": o.serial} for o in orders]

        staged = [{"names": sorted(s.names), "at": s.at.isoformat(), "ca": s.ca} for s in self.staged]
        text = json.dumps({"issued": rows(self.issued), "requested": rows(self.requested), "staged": staged}, indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(self.path, text.encode(), 0o600)


def ledger_path(plan: Plan) -> Path:
    return Path(plan.config.storage.mountpoint) / ".homelab" / "certs" / LEDGER_FILE


def load_ledger(path: Path) -> Ledger:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Ledger(path, [], [])
    except OSError as exc:
        raise HomelabError(f"{path}: cannot read the certificate ledger ({exc.strerror})") from None
    try:
        data = json.loads(text)
        rows = data.get("staged", [])  # ledgers from before staging first have none
        staged = [Staged(o.names, o.at, str(row["ca"])) for o, row in zip(_orders(rows), rows, strict=True)]
        return Ledger(path, _orders(data["issued"]), _orders(data["requested"]), staged)
    except (ValueError, KeyError, TypeError) as exc:
        raise HomelabError(
            f"{path}: the certificate ledger is damaged ({exc}); move it aside to start a new one "
            "(the guard then only sees what the edge holds)"
        ) from None


def _orders(rows: list[dict[str, object]]) -> list[Order]:
    out = []
    for row in rows:
        at = datetime.fromisoformat(str(row["at"]))
        names = row["names"]
        if not isinstance(names, list) or at.tzinfo is None:
            raise ValueError("an entry has no names list or no time zone")
        out.append(Order(frozenset(str(n) for n in names), at.astimezone(UTC), str(row.get("serial") or "")))
    return out
