"""The words of `backup status`, from the typed Status (the CLI prints them; --json prints the model)."""

from __future__ import annotations

from homelab.backup.records import Status, iso


def status_lines(info: Status) -> list[str]:
    last = info.last_run
    if last is None:
        return ["no backup has run yet"]
    lines = [
        f"last run:     {last.id} {info.last_run_state}, {last.files} files, {last.bytes} bytes, "
        + (f"{last.duration} s" if last.duration is not None else "unfinished")
        + (f" ({last.error})" if last.error else ""),
        f"last success: {info.last_success or 'never'}"
        + (f" ({info.last_success_age_hours} h ago)" if info.last_success_age_hours is not None else ""),
    ]
    good = info.last_good_drill
    lines.append(
        f"last drill:   {iso(good.time)} ({info.last_good_drill_age_days} days ago, {good.files} files)"
        if good
        else "last drill:   never succeeded"
    )
    drill = info.last_drill
    if drill and drill.result == "failed":
        lines.append(f"              {iso(drill.time)} FAILED: " + "; ".join(drill.problems[:3]))
    recovery = info.last_recovery_drill
    if recovery:
        age = info.last_good_recovery_drill_age_days
        since = f", the last good one {age} days ago" if age is not None else ", none good yet"
        lines.append(
            f"last recovery drill: {iso(recovery.time)} {recovery.result}, RTO {recovery.rto_seconds} s{since}"
        )
    else:
        lines.append("last recovery drill: never (`homelab backup drill --recover`)")
    verify = info.last_verify
    lines.append(
        f"last verify:  {iso(verify.time)} {verify.result}, {verify.checked} files" if verify else "last verify:  never"
    )
    lines += [f"problem:      {p}" for p in info.problems]
    return lines
