"""homelab: one declarative homelab.yaml -> running, monitored, backed-up Docker Compose stacks."""

import gc

# A command's start (importing typer and pydantic, building the config models, loading, rendering)
# allocates a few hundred thousand objects that all stay alive: at the default thresholds the collector
# ran ~130 times over them, about 15 ms of every validate/render/plan. Collections still happen, rarely
# enough to skip a start-up; a long-running command (backup run, logs -f) is collected as before.
gc.set_threshold(200_000, 10, 10)

__version__ = "0.1.0"
