"""The collectd plugin names homelab's own python plugins (homelab/collectd_plugins/) dispatch under, as the
series catalog spells them. The plugin files run inside the collectd image and cannot import this module;
tests/monitoring/test_plugin_names.py holds their constants equal to these."""

from __future__ import annotations

STATE_PLUGIN = "bmc_state"  # discrete BMC sensors' asserted states (bmc_states.py)
SEL_PLUGIN = "bmc_sel"  # new System Event Log entries per read (bmc_states.py)
CONTAINER_PLUGIN = "container"  # each service's containers (containers.py)
