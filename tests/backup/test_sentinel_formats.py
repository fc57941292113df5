"""The Gitea and Graphite sentinels, read back by the real programs: git (`fsck --strict`, `log`, `show`) on the
bare repository a backup run's sentinel commits into, and graphite-project's whisper tools (`whisper-fetch`,
`whisper-info`, `whisper-create`, Debian's python3-whisper) on the metric's whisper file. Hostile first: a
commit made by git itself on top (a user pushed), refs packed by `git pack-refs`, a whisper file carbon made
with its own archives (a minute a point, then an hour)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from homelab.backup import sentinel
from homelab.plan_model import Dataset

pytestmark = pytest.mark.real

RUN1, RUN2 = "20261201T030000Z", "20261202T030000Z"
WHEN1, WHEN2 = 1_796_094_000, 1_796_180_400  # their times
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u"}
GIT_ENV |= {"GIT_COMMITTER_EMAIL": "u@x"}


@pytest.fixture(autouse=True)
def _git_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository is owned by Gitea's uid, as the sentinel leaves it: safe.directory (global config only)."""
    (tmp_path / "git-home").mkdir()
    (tmp_path / "git-home" / ".gitconfig").write_text("[safe]\n\tdirectory = *\n")
    monkeypatch.setitem(GIT_ENV, "HOME", str(tmp_path / "git-home"))


def _dataset(tmp_path: Path, key: str) -> Dataset:
    folder = tmp_path / key
    folder.mkdir(parents=True)
    owner, role = key.split("/")
    return Dataset(owner, role, f"tank/homelab/{key}", str(folder), {}, 1000, 1000, True, "")


def _git(require_program, repo: Path, *args: str) -> str:  # type: ignore[no-untyped-def]
    argv = [require_program("git"), "--git-dir", str(repo), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True, env=GIT_ENV).stdout


def _read(written: sentinel.Sentinel, d: Dataset) -> str | None:
    return sentinel.read(written, Path(d.path))


def test_the_gitea_sentinel_is_a_commit_git_itself_reads_on_top_of_what_a_user_pushed(tmp_path, require_program):  # type: ignore[no-untyped-def]
    d = _dataset(tmp_path, "gitea/data")
    (first,) = sentinel.write_all([d], RUN1, WHEN1)
    repo = Path(d.path) / "git/repositories/homelab/homelab-sentinel.git"
    assert (first.kind, first.value) == ("git", RUN1) and _read(first, d) == RUN1
    # a user's own commit on top, made by git in a clone and pushed, then the refs packed (`git gc` does)
    clone = tmp_path / "clone"
    subprocess.run([require_program("git"), "clone", "-q", str(repo), str(clone)], check=True, env=GIT_ENV)
    (clone / "notes.txt").write_text("by hand\n")
    for args in (["add", "notes.txt"], ["commit", "-qm", "a user's commit"], ["push", "-q", "origin", "main"]):
        subprocess.run([require_program("git"), "-C", str(clone), *args], check=True, env=GIT_ENV, capture_output=True)
    assert _read(first, d) is None  # the last commit is not the sentinel's: a recovery would say so
    _git(require_program, repo, "pack-refs", "--all")
    assert not (repo / "refs/heads/main").exists()
    (second,) = sentinel.write_all([d], RUN2, WHEN2)
    _git(require_program, repo, "fsck", "--strict", "--no-dangling")
    log = _git(require_program, repo, "log", "--format=%s|%an|%at", "main").splitlines()
    assert log == [
        f"homelab sentinel {RUN2}|homelab|{WHEN2}",
        "a user's commit|u|" + log[1].split("|")[2],
        f"homelab sentinel {RUN1}|homelab|{WHEN1}",
    ]
    assert _git(require_program, repo, "show", "main:homelab-sentinel.txt") == RUN2 + "\n"
    assert _read(second, d) == RUN2 and _read(first, d) != RUN1


def test_the_graphite_sentinel_is_a_point_whisper_fetch_reads_also_in_a_file_carbon_made(tmp_path, require_program):  # type: ignore[no-untyped-def]
    d = _dataset(tmp_path, "monitoring/graphite")
    (first,) = sentinel.write_all([d], RUN1, WHEN1)
    wsp = Path(d.path) / "whisper/homelab/sentinel/run.wsp"
    (second,) = sentinel.write_all([d], RUN2, WHEN2)
    info = subprocess.run([require_program("whisper-info"), str(wsp)], capture_output=True, text=True, check=True)
    assert "maxRetention: 34560000" in info.stdout and "secondsPerPoint: 3600" in info.stdout, info.stdout
    fetched = subprocess.run(
        [require_program("whisper-fetch"), "--from", str(WHEN1 - 7200), "--until", str(WHEN2 + 3600), str(wsp)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    points = {int(t): float(v) for t, v in (line.split("\t") for line in fetched.splitlines()) if v != "None"}
    assert points == {WHEN1 - WHEN1 % 3600: WHEN1, WHEN2 - WHEN2 % 3600: WHEN2}, fetched
    assert (_read(first, d), _read(second, d)) == (str(WHEN1), str(WHEN2))
    # carbon's own file for the metric (a minute a point for a day, then an hour for 30 days): the sentinel's
    # point goes into its finest archive, where whisper-fetch reads a recent range
    wsp.unlink()
    subprocess.run([require_program("whisper-create"), str(wsp), "1m:1d", "1h:30d"], check=True, capture_output=True)
    now = int(subprocess.run(["date", "+%s"], capture_output=True, text=True, check=True).stdout)
    (third,) = sentinel.write_all([d], RUN2, now)
    fetched = subprocess.run(
        [require_program("whisper-fetch"), "--from", str(now - 600), str(wsp)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"{now - now % 60}\t{now}.000000" in fetched.splitlines(), fetched
    assert _read(third, d) == str(now)
