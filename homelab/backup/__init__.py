"""Encrypted, verified, restorable backups of the app datasets: ZFS snapshot -> rclone crypt.

See homelab.backup.core for the flow; retention (pure), zfs (snapshots, read clones), rclone (config,
commands, progress), state (records) and schedule (systemd units) are its parts.
"""

from homelab.backup.core import (
    Context,
    context,
    drill,
    prune,
    restore,
    run_backup,
    status,
    take_snapshots,
    verify,
)
from homelab.backup.rclone import BackupError, Progress

__all__ = [
    "BackupError",
    "Context",
    "Progress",
    "context",
    "drill",
    "prune",
    "restore",
    "run_backup",
    "status",
    "take_snapshots",
    "verify",
]
