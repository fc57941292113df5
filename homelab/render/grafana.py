"""Grafana's provisioning: the Graphite datasource, the dashboard provider, the contact points."""

from __future__ import annotations

from typing import Any

DATASOURCE_UID = "graphite"
GRAPHITE_URL = "http://graphite:80"
FOLDER = "Homelab"


def datasource() -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Graphite",
                "type": "graphite",
                "uid": DATASOURCE_UID,
                "access": "proxy",
                "url": GRAPHITE_URL,
                "isDefault": True,
                "editable": False,
                "jsonData": {"graphiteVersion": "1.1"},
            }
        ],
    }


def dashboard_provider() -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "homelab",
                "type": "file",
                "folder": FOLDER,
                "disableDeletion": True,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 60,
                "options": {"path": "/var/lib/grafana/dashboards"},
            }
        ],
    }
