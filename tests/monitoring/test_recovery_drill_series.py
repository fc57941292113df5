"""`backup drill --recover` in monitoring: the state folder's recovery_drill.status, read by the rendered
collectd exec program (run here by the real sh), gives the series the rendered alert rules look at."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from homelab.backup.records import RecoveryDrill
from homelab.backup.state import State
from homelab.config.loader import load
from homelab.monitoring.catalog_builder import catalog_for
from homelab.plan import build_plan
from homelab.render.alerts import alert_specs
from homelab.render.collectd import backup_status_script

pytestmark = pytest.mark.real


def _putvals(script: Path, count: int) -> list[str]:
    proc = subprocess.Popen(
        ["sh", str(script), "recovery_drill"],
        stdout=subprocess.PIPE,
        text=True,
        env={"COLLECTD_HOSTNAME": "nas", "COLLECTD_INTERVAL": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None
    try:
        return [proc.stdout.readline().strip() for _ in range(count)]
    finally:
        proc.kill()
        proc.wait(5)


def test_the_drill_age_and_failure_reach_the_series_the_alerts_read(example_config: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(example_config.read_text())
    data["backup"]["state_dir"] = str(tmp_path / "state")
    example_config.write_text(yaml.safe_dump(data, sort_keys=False))
    plan = build_plan(load(example_config))
    script = tmp_path / "backup-status"
    script.write_text(backup_status_script(plan))
    state = State(tmp_path / "state")
    state.ensure()

    then = datetime.now(UTC) - timedelta(days=40, hours=1)
    state.save_recovery_drill(RecoveryDrill(id="a", time=then, bundle="r", result="success"))
    state.save_recovery_drill(RecoveryDrill(id="b", time=datetime.now(UTC), bundle="r", result="failed"))
    lines = _putvals(script, 2)
    assert lines == [
        'PUTVAL "nas/backup-recovery_drill/gauge-age_days" interval=1 N:40',
        'PUTVAL "nas/backup-recovery_drill/count-failed" interval=1 N:1',
    ]
    specs = {s.uid: s for s in alert_specs(plan, catalog_for(plan))}
    age, failed = specs["recovery-drill-age"], specs["recovery-drill-failed"]
    assert age.target == "collectd.nas.backup-recovery_drill.gauge-age_days" and (age.op, age.threshold) == ("gt", 31)
    assert failed.target == "collectd.nas.backup-recovery_drill.count-failed" and failed.threshold == 0
    assert age.threshold < 40 and failed.threshold < 1  # both fire on these values


def test_nothing_before_a_first_drill(example_config: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(example_config.read_text())
    data["backup"]["state_dir"] = str(tmp_path / "state")
    example_config.write_text(yaml.safe_dump(data, sort_keys=False))
    script = tmp_path / "backup-status"
    script.write_text(backup_status_script(build_plan(load(example_config))))
    proc = subprocess.Popen(
        ["sh", str(script), "recovery_drill"],
        stdout=subprocess.PIPE,
        text=True,
        env={"COLLECTD_INTERVAL": "1", "PATH": "/usr/bin:/bin"},
    )
    time.sleep(2.5)
    proc.kill()
    out, _ = proc.communicate(timeout=5)
    assert out == ""  # no data: the age rule's noDataState is OK
