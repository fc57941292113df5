"""The monitoring stack's files, all from the one metric catalog (homelab/monitoring/series.py); one module per
target: collectd (render/collectd.py), carbon (render/graphite.py), Grafana provisioning
(render/grafana.py), alert rules (render/alerts.py) and dashboards (render/dashboards.py)."""

from __future__ import annotations

import json

from homelab.certs.expiry import script as cert_expiry_script
from homelab.layout import COLLECTD_IPMI_SECRET
from homelab.monitoring.catalog_builder import catalog_for
from homelab.monitoring.notify import contact_points
from homelab.plan_model import Plan
from homelab.render import alerts, collectd, dashboards, grafana, graphite
from homelab.render.rendering import GENERATED_MARK, Rendering
from homelab.render.yamldump import dump

PROVISIONING = "monitoring/grafana/provisioning"


def render(plan: Plan, rendering: Rendering, secret_values: dict[str, str]) -> None:
    catalog = catalog_for(plan)
    rendering.add("monitoring/collectd/collectd.conf", collectd.collectd_conf(catalog))
    rendering.add("monitoring/collectd/Dockerfile", collectd.dockerfile())
    rendering.add("monitoring/collectd/backup-status", collectd.backup_status_script(plan))
    rendering.add("monitoring/collectd/cert-expiry", cert_expiry_script())
    rendering.add("monitoring/collectd/bmc_states.py", collectd.bmc_states_module())
    rendering.add("monitoring/collectd/containers.py", collectd.containers_module())
    ipmi = plan.config.monitoring.ipmi
    if ipmi.mode == "lan":
        assert ipmi.password_file is not None
        rendering.secret_files[COLLECTD_IPMI_SECRET] = collectd.ipmi_conf(
            ipmi.address or "", ipmi.username or "", secret_values[ipmi.password_file]
        ).encode()
    rendering.add("monitoring/graphite/carbon.conf", graphite.carbon_conf(catalog))
    rendering.add("monitoring/graphite/storage-schemas.conf", graphite.storage_schemas(catalog))
    rendering.add("monitoring/graphite/storage-aggregation.conf", graphite.storage_aggregation(catalog))
    rendering.add(f"{PROVISIONING}/datasources/graphite.yaml", dump(grafana.datasource(), header=GENERATED_MARK))
    rendering.add(f"{PROVISIONING}/dashboards/homelab.yaml", dump(grafana.dashboard_provider(), header=GENERATED_MARK))
    rendering.add(f"{PROVISIONING}/alerting/rules.yaml", dump(alerts.alert_rules(plan, catalog), header=GENERATED_MARK))
    contact = contact_points(plan.config.monitoring)
    if contact:
        rendering.add(f"{PROVISIONING}/alerting/contact-points.yaml", dump(contact, header=GENERATED_MARK))
    for name, board in dashboards.dashboards(catalog).items():
        rendering.add(f"monitoring/grafana/dashboards/{name}.json", json.dumps(board, indent=2, sort_keys=True) + "\n")
