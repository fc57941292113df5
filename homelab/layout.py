"""Names several layers share, each defined here once: the config file, the stacks folder and its
secrets folder, Compose project names, the proxy network, and the secret files renderers fill.

Plain constants and string functions only (no homelab imports), so every layer, from the config
loader to the runtime drivers, can import it without a cycle.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_CONFIG = Path("homelab.yaml")  # the CLI's --config default, relative to the working directory
CONFIG_ENV = "HOMELAB_CONFIG"  # environment variable overriding the default config path

STACKS_DIR = "stacks"  # default output folder, next to homelab.yaml
LOCAL_DIR = "local"  # local mode's files (its own stacks, data, CA), next to homelab.yaml
SECRETS_DIR = "secrets"  # sibling of the stack folders, so compose files reference ../secrets/NAME
COMPOSE_FILE = "compose.yaml"  # one per stack folder
STACK_FILE = "stack.yaml"  # one per stack folder instead, with engine: swarm (docker stack deploy)

PROJECT_PREFIX = "homelab-"  # every Compose project (and the proxy network) homelab owns starts with it
EDGE_STACK = "edge"  # the stack that publishes 80/443 and owns the proxy network
PROXY_NETWORK = f"{PROJECT_PREFIX}proxy"  # shared by the edge and every routed service


def project_name(stack: str) -> str:
    """The Compose project of a stack: `homelab-<stack>`."""
    return f"{PROJECT_PREFIX}{stack}"


def secret_name(owner: str, name: str) -> str:
    """A secret's file name in the secrets folder: `<app or stack>_<name>` (the catalog's names)."""
    return f"{owner}_{name}"


# Secret files a renderer fills (the value is a whole config file holding a credential).
DDCLIENT_CONF_SECRET = secret_name("edge", "ddclient_conf")
COLLECTD_IPMI_SECRET = secret_name("monitoring", "collectd_ipmi_conf")
COLLECTD_IPMI_INCLUDE = "/etc/collectd/ipmi.conf"  # where collectd's container sees that secret

# `backup drill --recover`: the backup plugin instance its result is reported under, and the state folder's
# file the monitoring reads it from ("<epoch of the last good one> <1 when the last failed>"); no remote
# can be so named (remote names are host labels: no underscore)
RECOVERY_DRILL = "recovery_drill"
RECOVERY_DRILL_STATUS = f"{RECOVERY_DRILL}.status"
