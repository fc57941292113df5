"""engine: swarm: the same stacks as Swarm stacks (plan/apply in converge.py, status and nodes in state.py)."""
