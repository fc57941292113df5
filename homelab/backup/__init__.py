"""Encrypted, verified, restorable backups of the app datasets: ZFS snapshot -> rclone crypt.

One module per verb (run, verify, restore, drill, prune, status) over a `Context` (context: the datasets,
the state folder, the drivers); records are typed (records), kept by state; names checks what the crypt
cannot carry; listing keeps the snapshot's listing on the remote (a partial one after a sync that died);
check cryptchecks while a sync writes; lock marks the datasets a live run holds, for other code.
"""

from homelab.backup.context import BackupError, Context, context
from homelab.backup.drill import drill
from homelab.backup.progress import Progress
from homelab.backup.prune import prune, take_snapshots
from homelab.backup.restore import Restored, restore
from homelab.backup.run import RunReport, run_backup
from homelab.backup.status import status
from homelab.backup.verify import verify

__all__ = [
    "BackupError",
    "Context",
    "Progress",
    "Restored",
    "RunReport",
    "context",
    "drill",
    "prune",
    "restore",
    "run_backup",
    "status",
    "take_snapshots",
    "verify",
]
