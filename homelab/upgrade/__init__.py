"""Upgrades: a dump and a snapshot before an image changes (run), the journal a killed `up` is recovered from
(journal), rollback and retention of the upgrade snapshots (undo)."""
