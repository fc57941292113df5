"""Backup records: typed, versioned, a JSON round trip; the records the previous release wrote still read."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from homelab.backup.records import DatasetRun, Drill, Run, Running, Verify
from homelab.backup.state import State, StateError

WHEN = datetime(2025, 3, 1, 3, 0, tzinfo=UTC)
RECORDS = [
    Run(
        id="20250301T030000Z",
        start=WHEN,
        end=WHEN,
        duration=1.5,
        result="success",
        snapshot="homelab-20250301T030000Z",
        remotes=["offsite"],
        datasets=[DatasetRun(dataset="tank/a", key="a/b", remote="offsite", files=3, tree="meta/a/b/x.json.gz")],
    ),
    Verify(id="v", time=WHEN, checked=3, result="failed", problems=["a/b -> offsite: differs: new\nline"]),
    Drill(id="d", time=WHEN, full=True, files=3, result="success"),
    Running(pid=1, run="r", snapshots={"tank/a": "homelab-x"}),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_json_round_trip(record) -> None:
    text = record.model_dump_json()
    assert '"schema_version":1' in text
    assert type(record).model_validate_json(text) == record


# a run record exactly as the previous release (dict records, no schema_version) wrote it
OLD_RUN = """{
  "bytes": 10, "datasets": [{"bytes": 10, "checked_files": 2, "dataset": "tank/homelab/rstudio/home",
  "error": null, "files": 2, "key": "rstudio/home", "manifest": "manifests/20250301T030000Z-rstudio_home.json.gz",
  "remote": "offsite", "result": "success", "snapshot": "homelab-20250301T030000Z",
  "transferred_bytes": 10, "transferred_files": 2, "tree": "meta/rstudio/home/20250301T030000Z.json.gz",
  "tree_fingerprint": "ab"}], "duration": 1.2, "end": "2025-03-01T03:00:01+00:00", "error": null, "files": 2,
  "id": "20250301T030000Z", "remotes": ["offsite"], "result": "success", "snapshot": "homelab-20250301T030000Z",
  "start": "2025-03-01T03:00:00+00:00", "transferred_bytes": 10
}"""


def test_records_of_the_previous_release_still_read(tmp_path: Path) -> None:
    state = State(tmp_path)
    state.ensure()
    (tmp_path / "runs" / "20250301T030000Z.json").write_text(OLD_RUN)
    (run,) = state.runs()
    assert run.schema_version == 1 and run.datasets[0].tree == "meta/rstudio/home/20250301T030000Z.json.gz"
    assert run.start == WHEN


def test_a_record_of_a_newer_schema_is_refused_by_name(tmp_path: Path) -> None:
    state = State(tmp_path)
    state.ensure()
    path = tmp_path / "verify" / "v.json"
    path.write_text(
        '{"schema_version": 2, "id": "v", "time": "2025-03-01T03:00:00Z", "checked": 1, "result": "success"}'
    )
    with pytest.raises(StateError, match=rf"{path}: not a readable verify record \(schema_version: "):
        state.verifies()
