"""The Plan for the example: what each renderer will be told."""

from __future__ import annotations

from pathlib import Path

from homelab.config.loader import load
from homelab.plan import build_plan


def test_routes_hosts_and_flags(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    routes = {r.app: r for r in plan.routes}
    assert {app: r.host for app, r in routes.items()} == {
        "plex": "plex.example.com",
        "nextcloud": "cloud.example.com",
        "gitea": "git.example.com",
        "jenkins": "ci.example.com",
        "rstudio": "rstudio.example.com",
        "monitoring": "grafana.example.com",
    }
    assert routes["jenkins"].lan_only and routes["monitoring"].lan_only and not routes["plex"].lan_only
    assert routes["rstudio"].websocket and routes["nextcloud"].well_known_dav
    assert routes["nextcloud"].max_body == "16G"


def test_datasets_fit_the_workload(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    datasets = {d.key: d for d in plan.datasets}
    assert datasets["plex/media"].properties["recordsize"] == "1M"
    assert datasets["nextcloud/db"].properties["recordsize"] == "16K"
    assert datasets["nextcloud/db"].properties["logbias"] == "throughput"
    assert datasets["plex/config"].properties["recordsize"] == "64K"
    assert "recordsize" not in datasets["jenkins/home"].properties
    assert datasets["nextcloud/data"].name == "tank/homelab/nextcloud/data"
    assert datasets["nextcloud/data"].path == "/tank/homelab/nextcloud/data"
    assert (datasets["nextcloud/data"].uid, datasets["gitea/data"].uid) == (33, 1000)
    for dataset in plan.datasets:
        assert dataset.properties["atime"] == "off"


def test_dataset_override(example_config: Path) -> None:
    text = example_config.read_text().replace(
        "  mountpoint: /tank/homelab\n",
        "  mountpoint: /tank/homelab\n  datasets:\n    plex/media:\n      name: tank/media\n"
        "      properties: {compression: 'off'}\n",
    )
    example_config.write_text(text)
    media = next(d for d in build_plan(load(example_config)).datasets if d.key == "plex/media")
    assert (media.name, media.path, media.properties["compression"]) == ("tank/media", "/tank/media", "off")


# the containers plugin's reads (docs/monitoring.md, "Containers"), read-only
COLLECTD_HOST_READS = {("collectd", "/sys/fs/cgroup"), ("collectd", "/var/lib/docker/containers")}


def test_every_service_is_hardened_and_pinned(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    for stack in plan.stacks.values():
        for service in stack.services.values():
            assert ":" in service.image and not service.image.endswith(":latest"), service.name
            assert not any("docker.sock" in m.source for m in service.mounts) or service.name == "socket-proxy"
            for mount in service.mounts:
                if (service.name, mount.source) in COLLECTD_HOST_READS:
                    assert mount.read_only, mount
                elif not mount.source.startswith(("./", "/var/run/docker.sock")):
                    assert mount.source.startswith("/tank/homelab"), (service.name, mount.source)


def test_only_the_edge_publishes_public_ports(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    published = {
        (stack.name, service.name): service.ports
        for stack in plan.stacks.values()
        for service in stack.services.values()
        if service.ports
    }
    assert published == {
        ("edge", "traefik"): ["80:80", "443:443", "2222:2222"],
        ("monitoring", "graphite"): ["127.0.0.1:2003:2003"],
    }


def test_image_override(example_config: Path) -> None:
    example_config.write_text(example_config.read_text() + "images:\n  plex: localhost:5000/plex:1.2.3\n")
    plan = build_plan(load(example_config))
    assert plan.stacks["media"].services["plex"].image == "localhost:5000/plex:1.2.3"


def test_gitea_ssh_goes_through_a_traefik_tcp_entry_point(example_config: Path) -> None:
    from homelab.render.edge_traefik import static_config, tcp_route_labels

    plan = build_plan(load(example_config))
    assert static_config(plan)["entryPoints"]["gitea-ssh"] == {"address": ":2222"}
    (route,) = plan.tcp_routes_for("dev", "gitea")
    assert tcp_route_labels(route)["traefik.tcp.services.gitea-ssh.loadbalancer.server.port"] == "2222"


def test_with_nginx_gitea_publishes_its_own_ssh_port(example_config: Path) -> None:
    text = (
        example_config.read_text().replace("kind: traefik", "kind: nginx").replace("challenge: tls", "challenge: http")
    )
    example_config.write_text(text)
    plan = build_plan(load(example_config))
    assert plan.stacks["dev"].services["gitea"].ports == ["2222:2222"]
    assert plan.stacks["edge"].services["nginx"].ports == ["80:80", "443:443"]
