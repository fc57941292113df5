"""carbon-cache's files: carbon.conf, storage schemas and aggregation, from the metric catalog."""

from __future__ import annotations

from homelab.monitoring.series import Catalog
from homelab.render.rendering import GENERATED_MARK


def max_creates_per_minute(catalog: Catalog) -> int:
    """Carbon's default of 50 new files a minute leaves a fresh install's dashboards empty for many
    minutes: allow every series of the catalog (and headroom for extra sensors) in the first minute."""
    return max(1000, 2 * len(catalog.series))


def carbon_conf(catalog: Catalog, storage_dir: str = "/opt/graphite/storage", line_port: int = 2003) -> str:
    cache = {
        "STORAGE_DIR": f"{storage_dir}/",
        "LOCAL_DATA_DIR": f"{storage_dir}/whisper/",
        "WHITELISTS_DIR": f"{storage_dir}/lists/",
        "LOG_DIR": f"{storage_dir}/log/",
        "PID_DIR": f"{storage_dir}/",
        "ENABLE_LOGROTATION": "True",
        "USER": "",
        "MAX_CACHE_SIZE": "inf",
        "MAX_UPDATES_PER_SECOND": "500",
        "MAX_CREATES_PER_MINUTE": str(max_creates_per_minute(catalog)),
        "LINE_RECEIVER_INTERFACE": "0.0.0.0",  # noqa: S104 - inside the container; published on 127.0.0.1
        "LINE_RECEIVER_PORT": str(line_port),
        "ENABLE_UDP_LISTENER": "False",
        "PICKLE_RECEIVER_INTERFACE": "0.0.0.0",  # noqa: S104
        "PICKLE_RECEIVER_PORT": "2004",
        "CACHE_QUERY_INTERFACE": "0.0.0.0",  # noqa: S104
        "CACHE_QUERY_PORT": "7002",
        "USE_FLOW_CONTROL": "True",
        "LOG_UPDATES": "False",
        "LOG_CREATES": "True",
        "LOG_LISTENER_CONNECTIONS": "False",
        "CACHE_WRITE_STRATEGY": "sorted",
        "WHISPER_AUTOFLUSH": "False",
        "WHISPER_FALLOCATE_CREATE": "True",
        # collectd sends plain paths; with tags on, carbon tries to register each one with graphite-web's
        # tag database (which nothing here uses) and logs an error for every new series
        "ENABLE_TAGS": "False",
    }
    lines = [f"# {GENERATED_MARK}", "[cache]"] + [f"{k} = {v}" for k, v in cache.items()]
    return "\n".join(lines) + "\n"


def storage_schemas(catalog: Catalog) -> str:
    lines = [
        f"# {GENERATED_MARK}",
        f"# collectd sends every {catalog.interval}s: the finest precision equals that Interval.",
        "# Applies when a whisper file is created; change existing files with whisper-resize.",
    ]
    for name, pattern, retentions in catalog.storage_schemas():
        lines += ["", f"[{name}]", f"pattern = {pattern}", f"retentions = {retentions}"]
    return "\n".join(lines) + "\n"


def storage_aggregation(catalog: Catalog) -> str:
    lines = [f"# {GENERATED_MARK}", "# temperatures keep their peaks, fans their troughs, counters their maxima"]
    for name, pattern, xff, method in catalog.storage_aggregation():
        lines += ["", f"[{name}]", f"pattern = {pattern}", f"xFilesFactor = {xff}", f"aggregationMethod = {method}"]
    return "\n".join(lines) + "\n"
