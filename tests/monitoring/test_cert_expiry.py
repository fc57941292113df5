"""Expiry watched, as rendered: the collectd image installs the program, collectd.conf runs it for every
served name, the catalog holds one series per name, a panel shows them and each name has its alert."""

from __future__ import annotations

import configparser
import json
import re
from dataclasses import replace

import yaml

from homelab.plan_model import Plan
from homelab.render import render_all
from tests.conftest import EXAMPLE_SECRETS

SECRETS = {f"secrets/{name}": f"example-{name}-value" for name in EXAMPLE_SECRETS}
NAMES = [
    "ci.example.com",
    "cloud.example.com",
    "git.example.com",
    "grafana.example.com",
    "plex.example.com",
    "rstudio.example.com",
]  # the example's routes, spelled out (not asked of the code under test)


def _files(plan: Plan) -> dict[str, str]:
    return {k: v.decode() for k, v in render_all(plan, SECRETS).files.items() if k.startswith("monitoring/")}


def test_the_collectd_image_installs_openssl_and_the_program(example_plan: Plan) -> None:
    files = _files(example_plan)
    dockerfile = files["monitoring/collectd/Dockerfile"]
    install = dockerfile.split("apt-get install", 1)[1].split("&&", 1)[0]
    assert "openssl" in install.split()
    assert "COPY cert-expiry /usr/local/lib/homelab/cert-expiry" in dockerfile
    chmod = next(line for line in dockerfile.splitlines() if line.startswith("RUN chmod"))
    assert chmod.split()[2] == "0755" and "/usr/local/lib/homelab/cert-expiry" in chmod.split()
    assert files["monitoring/collectd/cert-expiry"].startswith("#!/bin/sh\n")


def test_collectd_runs_the_program_for_every_served_name_as_nobody(example_plan: Plan) -> None:
    conf = _files(example_plan)["monitoring/collectd/collectd.conf"]
    lines = [line.strip() for line in conf.splitlines() if "cert-expiry" in line and line.strip().startswith("Exec")]
    quoted = " ".join(f'"{n}"' for n in NAMES)
    assert lines == [f'Exec "nobody" "/usr/local/lib/homelab/cert-expiry" "127.0.0.1" "443" {quoted}']
    assert conf.count("LoadPlugin exec\n") == 1  # one exec plugin for the backup and the expiry programs


def test_without_routes_nothing_watches_certificates(example_plan: Plan) -> None:
    plan = replace(example_plan, routes=[])
    files = _files(plan)
    assert "cert-expiry" not in files["monitoring/collectd/collectd.conf"]
    assert "certs-" not in files["monitoring/grafana/provisioning/alerting/rules.yaml"]


def test_each_name_has_a_series_a_panel_line_and_an_alert_that_fires_on_no_data(example_plan: Plan) -> None:
    files = _files(example_plan)
    paths = {n: f"collectd.nas.certs-{n.replace('.', '_')}.gauge-days_left" for n in NAMES}
    board = json.loads(files["monitoring/grafana/dashboards/network-edge.json"])
    panel = next(p for p in board["panels"] if p.get("title") == "Certificate days left")
    shown = " ".join(t["target"] for t in panel["targets"])
    assert all(path in shown for path in paths.values())
    assert panel["fieldConfig"]["defaults"]["unit"] == "d"
    rules_file = yaml.safe_load(files["monitoring/grafana/provisioning/alerting/rules.yaml"])
    rules = {r["title"]: r for g in rules_file["groups"] for r in g["rules"]}
    for name, path in paths.items():
        rule = rules[f"Certificate for {name} expires in under 14 days"]
        assert rule["data"][0]["model"]["target"] == path
        assert rule["data"][1]["model"]["settings"] == {"mode": "dropNN"}
        assert rule["data"][2]["model"]["conditions"][0]["evaluator"] == {"type": "lt", "params": [14]}
        assert rule["noDataState"] == "Alerting"
        silent = rules[f"Certificate check for {name} silent"]
        assert silent["noDataState"] == "Alerting" and silent["data"][0]["model"]["target"] == path
    uids = [r["uid"] for r in rules.values()]
    assert len(uids) == len(set(uids)) and all(len(u) <= 40 for u in uids)


def test_the_lowest_days_left_survive_downsampling(example_plan: Plan) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(_files(example_plan)["monitoring/graphite/storage-aggregation.conf"])
    path = "collectd.nas.certs-git_example_com.gauge-days_left"
    first = next(s for s in parser.sections() if re.search(parser[s]["pattern"], path))  # carbon: first match
    assert parser[first]["aggregationMethod"] == "min"
