"""The engines that run the stacks: Compose (compose.py, health.py, drift.py, service_status.py) and Swarm
(swarm.py, swarm_state.py), and the host preparation both share (host.py)."""
