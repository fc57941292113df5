"""Per-app behaviour: catalog data (networks, TCP routes, rendered secrets, body limits) and the one hook
per entry in homelab/apps/. Expectations are written out by hand from the apps' documentation."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

from homelab import apps
from homelab.catalog import catalog_dir
from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import Plan
from tests.conftest import write_secret


def _plan(config: Path, *replacements: tuple[str, str]) -> Plan:
    text = config.read_text()
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    config.write_text(text)
    return build_plan(load(config))


NGINX = (("kind: traefik", "kind: nginx"), ("challenge: tls ", "challenge: http "))


def test_plex_options_become_a_device_a_claim_file_and_read_only_media(example_config: Path) -> None:
    write_secret(example_config.parent / "secrets" / "claim", "claim-abc")
    plan = _plan(
        example_config,
        ("claim_token_file: null", "claim_token_file: secrets/claim\n    media_paths: {tv: /srv/tv, films: /srv/f}"),
    )
    plex = plan.stacks["media"].services["plex"]
    assert plex.devices == ["/dev/dri:/dev/dri"]
    assert plex.environment["PLEX_CLAIM_FILE"] == "/run/secrets/plex_claim_token"
    assert ("plex_claim_token", None) in plex.secrets
    assert plan.secrets["plex_claim_token"].source == str(example_config.parent / "secrets" / "claim")
    assert [(m.source, m.target, m.read_only) for m in plex.mounts[-2:]] == [
        ("/srv/f", "/data/films", True),
        ("/srv/tv", "/data/tv", True),
    ]
    assert "claim-abc" not in repr(plex)  # the token travels as a file, never as a value


def test_plex_without_a_transcode_device_gets_no_device(example_config: Path) -> None:
    plan = _plan(example_config, ("  transcode_device: /dev/dri", "  transcode_device: null"))
    assert plan.stacks["media"].services["plex"].devices == []


def test_nextcloud_settings_reach_php_and_the_edge(example_config: Path) -> None:
    plan = _plan(example_config, ("    upload_limit: 16G\n", "    upload_limit: 512M\n    admin_user: boss\n"))
    env = plan.stacks["cloud"].services["nextcloud"].environment
    assert (env["NEXTCLOUD_ADMIN_USER"], env["PHP_UPLOAD_LIMIT"]) == ("boss", "512M")
    assert plan.route_for("cloud", "nextcloud").max_body == "512M"  # type: ignore[union-attr]
    assert plan.route_for("dev", "gitea").max_body is None  # type: ignore[union-attr]


def test_jenkins_agent_port_is_published_only_when_set(example_config: Path) -> None:
    assert build_plan(load(example_config)).stacks["dev"].services["jenkins"].ports == []
    plan = _plan(example_config, ("    lan_only: true\n", "    lan_only: true\n    agent_port: 50001\n"))
    assert plan.stacks["dev"].services["jenkins"].ports == ["50001:50000"]


def test_gitea_ssh_port_setting_drives_the_route_and_the_app(example_config: Path) -> None:
    plan = _plan(example_config, ("    ssh_port: 2222\n", "    ssh_port: 2022\n"))
    (route,) = plan.tcp_routes
    assert (route.name, route.stack, route.service, route.public_port, route.port) == (
        "gitea-ssh",
        "dev",
        "gitea",
        2022,
        2222,
    )
    assert plan.stacks["dev"].services["gitea"].environment["GITEA__server__SSH_PORT"] == "2022"
    assert plan.stacks["dev"].services["gitea"].ports == []  # Traefik forwards it
    assert plan.stacks["edge"].services["traefik"].ports == ["80:80", "443:443", "2022:2022"]


def test_without_gitea_there_is_no_tcp_route(example_config: Path) -> None:
    plan = _plan(example_config, ("    subdomain: git\n", "    subdomain: git\n    enabled: false\n"))
    assert plan.tcp_routes == []
    assert plan.stacks["edge"].services["traefik"].ports == ["80:80", "443:443"]


def test_dns_challenge_credentials_reach_traefik_as_files(example_config: Path) -> None:
    secrets = example_config.parent / "secrets"
    write_secret(secrets / "cf", "token-1")
    plan = _plan(
        example_config,
        (
            "challenge: tls ",
            "challenge: dns\n    dns_provider: cloudflare\n    dns_credentials: {CF_DNS_API_TOKEN: secrets/cf} ",
        ),
    )
    traefik = plan.stacks["edge"].services["traefik"]
    assert traefik.environment["CF_DNS_API_TOKEN_FILE"] == "/run/secrets/edge_acme_cf_dns_api_token"
    assert ("edge_acme_cf_dns_api_token", None) in traefik.secrets
    assert plan.secrets["edge_acme_cf_dns_api_token"].source == str(secrets / "cf")


def test_traefik_reaches_the_docker_api_only_on_an_internal_network(example_config: Path) -> None:
    edge = build_plan(load(example_config)).stacks["edge"]
    assert edge.services["traefik"].networks == ["proxy", "socket"]
    assert edge.services["socket-proxy"].networks == ["socket"]
    assert edge.services["ddclient"].networks == ["default"]
    assert edge.networks["socket"] == {"internal": True}
    assert list(edge.networks) == ["default", "proxy", "socket"]
    assert edge.networks["proxy"] == {"name": "homelab-proxy", "ipam": {"config": [{"subnet": "172.30.250.0/24"}]}}


def test_routed_services_join_the_proxy_network_others_stay_home(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    cloud = plan.stacks["cloud"]
    assert cloud.services["nextcloud"].networks == ["default", "proxy"]
    assert cloud.services["db"].networks == ["default"]
    assert cloud.networks == {"default": {}, "proxy": {"name": "homelab-proxy", "external": True}}
    assert plan.stacks["monitoring"].services["collectd"].networks == []  # host network


def test_nginx_edge_joins_only_the_proxy_network_and_apps_publish_tcp_routes(example_config: Path) -> None:
    plan = _plan(example_config, *NGINX, ("    ssh_port: 2222\n", "    ssh_port: 2022\n"))
    edge = plan.stacks["edge"]
    assert edge.services["nginx"].networks == ["proxy"]
    assert edge.services["certbot"].networks == ["default"]
    assert "socket" not in edge.networks
    assert plan.stacks["dev"].services["gitea"].ports == ["2022:2222"]


def test_ddclient_config_is_a_rendered_secret(example_config: Path) -> None:
    plan = build_plan(load(example_config))
    assert plan.secrets["edge_ddclient_conf"].source is None
    assert plan.stacks["edge"].services["ddclient"].secrets == [("edge_ddclient_conf", None)]
    assert plan.secrets["edge_ddclient_conf"].owner_uid == 1000  # ddclient runs as the server uid


def test_ipmi_modes(example_config: Path) -> None:
    collectd = build_plan(load(example_config)).stacks["monitoring"].services["collectd"]
    assert "/dev/ipmi0:/dev/ipmi0" in collectd.devices and collectd.secrets == []
    write_secret(example_config.parent / "secrets" / "bmc", "bmc-password")
    plan = _plan(
        example_config,
        ("mode: local ", "mode: lan\n    address: 10.0.0.2\n    username: admin\n    password_file: secrets/bmc "),
        ("  interval: 10\n", "  interval: 10\n  disks: [sdz]\n"),
    )
    collectd = plan.stacks["monitoring"].services["collectd"]
    assert collectd.devices == ["/dev/sdz:/dev/sdz"]
    assert collectd.secrets == [("monitoring_collectd_ipmi_conf", "/etc/collectd/ipmi.conf")]
    assert plan.secrets["monitoring_collectd_ipmi_conf"].source is None


def test_every_hook_module_belongs_to_a_catalog_entry() -> None:
    """A hook whose module name matches no entry would silently never run."""
    entries = {p.stem.replace("-", "_") for p in catalog_dir().glob("*.yaml")}
    modules = {m.name for m in pkgutil.iter_modules(apps.__path__)}
    assert modules <= entries, modules - entries
    assert {"plex", "edge_traefik", "monitoring"} <= modules
    for name in modules:
        assert callable(apps.hook(name.replace("_", "-"))), name


@pytest.mark.parametrize("name", ["rstudio", "ddclient"])  # gitea has one: sign-up and the admin
def test_an_entry_with_only_data_has_no_hook(name: str) -> None:
    assert apps.hook(name) is None
