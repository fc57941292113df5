"""The monitoring stack's rendered files, checked against the one catalog."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import yaml

from homelab.config.loader import load
from homelab.config.monitoring import Ipmi
from homelab.plan import build_plan
from homelab.render import render_all
from homelab.render.alerts import alert_specs
from homelab.render.dashboards import dashboard_targets, dashboards

SERIES = re.compile(r"collectd\.[A-Za-z0-9_.\-]+")


def test_every_dashboard_target_names_only_catalog_series(example_catalog) -> None:
    boards = dashboards(example_catalog)
    assert [b["title"] for b in boards.values()] == [
        "Server health",
        "Thermals & fans",
        "Disks & ZFS",
        "Network & edge",
        "Containers",
    ]
    catalog = set(example_catalog.paths())
    targets = dashboard_targets(boards)
    assert len(targets) > 40
    used = set()
    for target in targets:
        names = SERIES.findall(target)
        assert names, target
        assert not any(c in target for c in "*?[{"), f"wildcard in {target}"
        unknown = set(names) - catalog
        assert not unknown, f"{target} asks for series collectd does not send: {unknown}"
        used |= set(names)
    for board in boards.values():
        assert board["schemaVersion"] >= 36 and board["uid"].startswith("homelab-")
        for panel in board["panels"]:
            assert panel["datasource"] == {"type": "graphite", "uid": "graphite"}
            assert panel["fieldConfig"]["defaults"]["unit"]
    # every kind of hardware is on some dashboard
    for plugin in (
        "ipmi",
        "sensors",
        "thermal",
        "smart",
        "disk",
        "df",
        "zfs_arc",
        "cpu",
        "memory",
        "load",
        "interface",
        "tcpconns",
        "uptime",
        "backup",
    ):
        assert any(f".{plugin}" in name for name in used), plugin


def test_alert_targets_are_catalog_series_and_thresholds_come_from_config(example_plan, example_catalog) -> None:
    catalog = set(example_catalog.paths())
    specs = {s.uid: s for s in alert_specs(example_plan, example_catalog)}
    assert {
        "cpu-temperature",
        "smart-failure",
        "pool-full",
        "no-data",
        "fanspeed-cpu-fan1-fan-cooling-29-1-low",
    } <= set(specs)
    for spec in specs.values():
        assert set(SERIES.findall(spec.target)) <= catalog, spec.target
    assert specs["cpu-temperature"].threshold == 80
    assert specs["pool-full"].threshold == 80
    fan = specs["fanspeed-cpu-fan1-fan-cooling-29-1-low"]
    assert fan.op == "lt" and fan.threshold == 300
    assert specs["smart-failure"].threshold == 0
    assert specs["no-data"].no_data == "Alerting"
    # a stopped fan or a silent CPU sensor alerts; so does a series that does not exist (NoData)
    assert fan.no_data == "Alerting" and specs["cpu-temperature"].no_data == "Alerting"
    quiet = next(s for s in specs.values() if s.reducer == "count" and s.target == fan.target)
    assert quiet.uid.startswith("silent-fanspeed-cpu-fan1") and len(quiet.uid) <= 40
    assert quiet.reducer == "count" and quiet.no_data == "Alerting" and quiet.op == "lt" and quiet.threshold == 1
    # the profile's voltage limits become both-sided rules
    assert specs["voltage-12v-power-supply-10-1-low"].threshold == 11.4
    assert specs["voltage-12v-power-supply-10-1-high"].threshold == 12.6


def test_every_rule_drops_non_numbers_and_states_its_no_data(example_rendering) -> None:
    rules = yaml.safe_load(example_rendering.files["monitoring/grafana/provisioning/alerting/rules.yaml"])
    for rule in rules["groups"][0]["rules"]:
        reduce = next(q["model"] for q in rule["data"] if q["model"].get("type") == "reduce")
        assert reduce["settings"] == {"mode": "dropNN"}, rule["uid"]
        assert rule["noDataState"] in ("OK", "Alerting", "NoData") and rule["execErrState"] == "Error"


def test_carbon_does_not_tag(example_rendering) -> None:
    assert "ENABLE_TAGS = False\n" in example_rendering.files["monitoring/graphite/carbon.conf"].decode()


def test_rendered_files(example_rendering) -> None:
    files = {k: v.decode() for k, v in example_rendering.files.items() if k.startswith("monitoring/")}
    conf = files["monitoring/collectd/collectd.conf"]
    assert 'Hostname "nas"' in conf and "FQDNLookup false" in conf and "Interval 10" in conf
    assert 'Prefix "collectd."' in conf and 'EscapeCharacter "_"' in conf and 'Host "127.0.0.1"' in conf
    assert 'SocketFile "/run/collectd.sock"' in conf
    assert "MAX_CREATES_PER_MINUTE = 1000" in files["monitoring/graphite/carbon.conf"]
    assert "retentions = 10s:1d,1m:30d,10m:1y,1h:5y" in files["monitoring/graphite/storage-schemas.conf"]
    assert "aggregationMethod = max" in files["monitoring/graphite/storage-aggregation.conf"]
    source = yaml.safe_load(files["monitoring/grafana/provisioning/datasources/graphite.yaml"])
    assert source["datasources"][0]["uid"] == "graphite"
    provider = yaml.safe_load(files["monitoring/grafana/provisioning/dashboards/homelab.yaml"])
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    contact = yaml.safe_load(files["monitoring/grafana/provisioning/alerting/contact-points.yaml"])
    assert contact["contactPoints"][0]["receivers"][0]["settings"]["addresses"] == "admin@example.com"
    rules = yaml.safe_load(files["monitoring/grafana/provisioning/alerting/rules.yaml"])
    assert len(rules["groups"][0]["rules"]) >= 5
    for name in ("server-health", "thermals-fans", "disks-zfs", "network-edge"):
        json.loads(files[f"monitoring/grafana/dashboards/{name}.json"])
    docker = files["monitoring/collectd/Dockerfile"]
    assert docker.startswith("# generated") and "FROM debian:bookworm-slim" in docker
    assert "monitoring_collectd_ipmi_conf" not in example_rendering.secret_files  # ipmi local


def test_ipmi_lan_puts_the_password_only_in_the_secret_file(example_config: Path) -> None:
    loaded = load(example_config)
    password_file = "secrets/bmc-password"
    (example_config.parent / password_file).write_text('pa"ss\\word\n')
    ipmi = Ipmi(mode="lan", address="10.0.0.5", username="monitor", password_file=password_file)
    config = loaded.config.model_copy(update={"monitoring": loaded.config.monitoring.model_copy(update={"ipmi": ipmi})})
    plan = build_plan(replace(loaded, config=config))
    rendering = render_all(
        plan,
        {"secrets/ddns-password": "x", "secrets/b2-account": "x", "secrets/b2-key": "x", password_file: 'pa"ss\\word'},
    )
    conf = rendering.files["monitoring/collectd/collectd.conf"].decode()
    assert 'Include "/etc/collectd/ipmi.conf"' in conf and 'pa"ss' not in conf and "Password" not in conf
    secret = rendering.secret_files["monitoring_collectd_ipmi_conf"].decode()
    assert 'Password "pa\\"ss\\\\word"' in secret and 'Address "10.0.0.5"' in secret
    assert 'AuthType "rmcp+"' in secret
    assert all('pa"ss' not in v.decode() for v in rendering.files.values())
