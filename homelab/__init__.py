"""homelab: one declarative homelab.yaml -> running, monitored, backed-up Docker Compose stacks."""

import gc

# A command's start (importing typer and pydantic, building the config models, loading, rendering)
# allocates a few hundred thousand objects that all stay alive: at the default thresholds the collector
# ran ~130 times over them, about 15 ms of every validate/render/plan. Set here, before typer is imported,
# so it holds for the whole process (and for any program importing homelab): the young generation is
# collected after 200,000 net allocations instead of 700, so a long-running command (backup run, logs -f)
# holds at most that many objects of cyclic garbage before it is collected.
gc.set_threshold(200_000, 10, 10)

__version__ = "0.1.0"
