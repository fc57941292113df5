"""Recording fakes of the homelab.runtime drivers (Docker Engine + Compose, ZFS), for the fast tests."""
