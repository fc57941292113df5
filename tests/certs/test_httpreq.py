"""dns_provider httpreq in the config and the Traefik edge's render (fast: no CA, no Traefik; the real
Traefik against Pebble runs in test_httpreq_real.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from homelab.certs import preflight
from homelab.checks import Check
from homelab.config.loader import load
from homelab.errors import HomelabError
from homelab.plan import build_plan
from homelab.render import render_all
from homelab.secrets import user_secret_values
from tests.certs.httpreq import httpreq_config, httpreq_endpoint, provider_config

PASSWORD = "httpreq-password-value-5f1c"


def test_the_credentials_reach_traefik_as_files_only(tmp_path: Path) -> None:
    loaded = load(httpreq_config(tmp_path / "config", "https://dns-api.example.net/acme", PASSWORD))
    rendering = render_all(build_plan(loaded), user_secret_values(loaded))
    assert all(PASSWORD.encode() not in content for content in rendering.files.values())
    service = yaml.safe_load(rendering.files["edge/compose.yaml"])["services"]["traefik"]
    assert {k: v for k, v in service["environment"].items() if k.startswith("HTTPREQ_")} == {
        "HTTPREQ_ENDPOINT": "https://dns-api.example.net/acme",
        "HTTPREQ_USERNAME_FILE": "/run/secrets/edge_acme_httpreq_username",
        "HTTPREQ_PASSWORD_FILE": "/run/secrets/edge_acme_httpreq_password",
    }
    assert {"edge_acme_httpreq_username", "edge_acme_httpreq_password"} <= set(service["secrets"])
    static = yaml.safe_load(rendering.files["edge/traefik/traefik.yml"])
    assert static["certificatesResolvers"]["le"]["acme"]["dnsChallenge"]["provider"] == "httpreq"


@pytest.mark.parametrize(
    "endpoint",
    ["http://192.168.1.5:9090", "http://10.0.0.2", "http://acme-dns:8080", "http://dns.home.arpa", "http://x.lan"],
)
def test_plain_http_on_the_lan_is_accepted(tmp_path: Path, endpoint: str) -> None:
    load(httpreq_config(tmp_path / "config", endpoint, PASSWORD))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"endpoint": "http://dns-api.example.net"}, r"homelab\.yaml:\d+.*endpoint.*in the clear over the internet"),
        ({"endpoint": "http://1.2.3.4:9090"}, r"homelab\.yaml:\d+.*endpoint.*use https"),
        ({"endpoint": "ftp://x"}, r"endpoint.*not an http\(s\) URL"),
        ({"password_file": None}, r"username_file and password_file go together"),
        ({"httpreq": None}, r"dns_provider 'httpreq' and the httpreq section go together"),
    ],
)
def test_config_rules(tmp_path: Path, change: dict[str, object], message: str) -> None:
    config = httpreq_config(tmp_path / "config", "https://dns-api.example.net", PASSWORD)
    data = yaml.safe_load(config.read_text())
    acme = data["domain"]["acme"]
    for key, value in change.items():
        section = acme if key == "httpreq" else acme["httpreq"]
        if value is None:
            section.pop(key)
        else:
            section[key] = value
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(HomelabError, match=message):
        load(config)


def _preflight(tmp_path: Path, endpoint: str, password: str) -> list[Check]:
    plan = build_plan(load(httpreq_config(tmp_path / "config", endpoint, password)))
    return list(preflight._dns_credentials(plan, timeout=2))


def test_preflight_presents_and_cleans_up_a_test_record(tmp_path: Path) -> None:
    with httpreq_endpoint(PASSWORD, None) as endpoint:
        checks = _preflight(tmp_path, endpoint.url, PASSWORD)
    fqdn = "_acme-challenge._homelab-preflight.example.com."
    assert [(c.level, c.detail) for c in checks] == [("ok", f"{endpoint.url} presented and cleaned up TXT {fqdn}")]
    assert [path for path, _ in endpoint.calls] == ["/present", "/cleanup"]
    assert {body["fqdn"] for _, body in endpoint.calls} == {fqdn}
    assert endpoint.calls[0][1]["value"] == endpoint.calls[1][1]["value"]


def test_preflight_bad_credentials_and_unreachable_endpoint(tmp_path: Path) -> None:
    with httpreq_endpoint(PASSWORD, None) as endpoint:
        [wrong] = _preflight(tmp_path / "wrong", endpoint.url, "not-the-password")
        url = endpoint.url
    assert wrong.level == "fail" and "refused to present" in wrong.detail and "(401)" in wrong.detail
    assert "check username_file and password_file" in wrong.detail and endpoint.calls == []
    [gone] = _preflight(tmp_path / "gone", url, PASSWORD)  # the endpoint has stopped
    assert gone.level == "fail" and f"cannot reach {url}" in gone.detail and "check httpreq.endpoint" in gone.detail
    assert "not-the-password" not in wrong.detail and PASSWORD not in gone.detail


def test_exec_mounts_the_program_read_only(tmp_path: Path) -> None:
    config = provider_config(tmp_path / "config", "exec", {"program": "hooks/acme-dns"})
    plan = build_plan(load(config))
    traefik = plan.stacks["edge"].services["traefik"]
    assert traefik.environment["EXEC_PATH"] == "/etc/traefik/acme-exec"
    mount = next(m for m in traefik.mounts if m.target == "/etc/traefik/acme-exec")
    assert (mount.source, mount.read_only) == (str(config.parent / "hooks" / "acme-dns"), True)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"program": "/usr/local/bin/hook"},
            r"homelab\.yaml:\d+: domain\.acme\.exec\.program: .* must be relative to homelab\.yaml",
        ),
        (None, "dns_provider 'exec' and the exec"),
    ],
)
def test_exec_config_rules(tmp_path: Path, section: dict[str, str] | None, message: str) -> None:
    config = provider_config(tmp_path / "config", "exec", {"program": "hooks/acme-dns"})
    data = yaml.safe_load(config.read_text())
    if section is None:
        data["domain"]["acme"].pop("exec")
    else:
        data["domain"]["acme"]["exec"] = section
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(HomelabError, match=message):
        load(config)
