"""homelab: one declarative homelab.yaml -> running, monitored, backed-up Docker Compose stacks."""

__version__ = "0.1.0"
