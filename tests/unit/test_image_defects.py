"""Issue 11's defects, each against what the upstream image does (the source is cited per test; the
expectations are written from those sources, not from the catalog)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from homelab.config.loader import load
from homelab.plan import build_plan
from homelab.plan_model import Plan, Service


def _plan(config: Path, **apps: dict) -> Plan:
    if apps:
        data = yaml.safe_load(config.read_text())
        for app, options in apps.items():
            data["apps"][app] = {**data["apps"].get(app, {}), **options}
        config.write_text(yaml.safe_dump(data, sort_keys=False))
    return build_plan(load(config))


def _service(plan: Plan, stack: str, name: str) -> Service:
    return plan.stacks[stack].services[name]


def test_rstudio_healthcheck_uses_wget_not_curl(example_config: Path) -> None:
    # rocker-versioned2@R4.4.2 scripts/install_R_source.sh:63,162-163 puts curl in BUILDDEPS and purges
    # them; scripts/install_rstudio.sh:26-36 installs wget
    test = _service(_plan(example_config), "dev", "rstudio").healthcheck["test"]  # type: ignore[index]
    assert test[0] == "CMD" and test[1] == "wget", test
    assert "curl" not in " ".join(test)


def test_gitea_registration_closed_by_default_and_admin_from_a_generated_secret(example_config: Path) -> None:
    plan = _plan(example_config)
    gitea = _service(plan, "dev", "gitea")
    assert gitea.environment["GITEA__service__DISABLE_REGISTRATION"] == "true"
    assert gitea.environment["HOMELAB_ADMIN_USER"] == "gitea-admin"
    assert ("gitea_admin_password", None) in gitea.secrets
    assert plan.secrets["gitea_admin_password"].source is None  # generated
    assert plan.secrets["gitea_admin_password"].owner_uid == 1000  # readable by the rootless process
    script = " ".join(gitea.command or [])
    assert "gitea admin user create --admin" in script and "/run/secrets/gitea_admin_password" in script
    # Gitea reserves "admin" as a user name (models/user/user.go reservedUsernames)
    assert gitea.environment["HOMELAB_ADMIN_USER"] != "admin"


def test_gitea_registration_opens_only_when_asked(example_config: Path) -> None:
    gitea = _service(_plan(example_config, gitea={"open_registration": True}), "dev", "gitea")
    assert gitea.environment["GITEA__service__DISABLE_REGISTRATION"] == "false"


@pytest.mark.parametrize(("limit", "expected"), [("16G", 17179869184), ("512M", 536870912), ("2048K", 2097152)])
def test_nextcloud_apache_body_limit_matches_upload_limit(example_config: Path, limit: str, expected: int) -> None:
    # nextcloud/docker@f413890 30/apache/Dockerfile:136-141: LimitRequestBody ${APACHE_BODY_LIMIT}, default 1 GiB
    nextcloud = _service(_plan(example_config, nextcloud={"upload_limit": limit}), "cloud", "nextcloud")
    assert nextcloud.environment["APACHE_BODY_LIMIT"] == str(expected)
    assert nextcloud.environment["PHP_UPLOAD_LIMIT"] == limit


def test_nextcloud_cron_gets_the_environment_the_php_config_reads(example_config: Path) -> None:
    # nextcloud/docker@f413890 30/apache/config/redis.config.php and reverse-proxy.config.php call
    # getenv() at every PHP run; cron.sh (busybox crond) runs cron.php with the container's environment
    plan = _plan(example_config)
    app, cron = _service(plan, "cloud", "nextcloud"), _service(plan, "cloud", "cron")
    for variable in ("REDIS_HOST", "TRUSTED_PROXIES", "OVERWRITEHOST", "OVERWRITEPROTOCOL", "OVERWRITECLIURL"):
        assert cron.environment.get(variable) == app.environment[variable], variable
    assert cron.environment["OVERWRITEHOST"] == "cloud.example.com"


def test_postgres_healthcheck_goes_over_tcp(example_config: Path) -> None:
    # docker-library/postgres@960ebdf 16/alpine3.20/docker-entrypoint.sh:270: the init server runs with
    # listen_addresses='' (unix socket only); the real server listens on '*' (Dockerfile:194)
    test = _service(_plan(example_config), "cloud", "db").healthcheck["test"]  # type: ignore[index]
    assert test[1] == "pg_isready"
    host = test[test.index("-h") + 1] if "-h" in test else ""
    assert host and not host.startswith("/"), f"pg_isready must name a TCP host: {test}"


def test_socket_proxy_binds_ipv4_only(example_config: Path) -> None:
    # Tecnativa/docker-socket-proxy@v0.3.0 docker-entrypoint.sh: 1|true|yes (any case) -> ":2375",
    # anything else -> "[::]:2375 v4v6", which fails on a host with IPv6 disabled
    proxy = _service(_plan(example_config), "edge", "socket-proxy")
    assert proxy.environment.get("DISABLE_IPV6", "").lower() in {"1", "true", "yes"}


def test_gitea_secrets_stay_out_of_app_ini(example_config: Path) -> None:
    # go-gitea/gitea modules/setting/config_env.go EnvironmentToConfig: GITEA__S__K__FILE reads the file
    # and writes its content into app.ini; modules/setting/security.go loadSecret reads *_URI=file:
    # at start and refuses a key set together with its _URI
    gitea = _service(_plan(example_config), "dev", "gitea")
    assert not [k for k in gitea.environment if k.startswith("GITEA__") and k.endswith("__FILE")]
    mounted = {f"/run/secrets/{name}" for name, target in gitea.secrets if target is None}
    for key in ("SECRET_KEY", "INTERNAL_TOKEN"):
        uri = gitea.environment[f"GITEA__security__{key}_URI"]
        assert uri.startswith("file:") and uri.removeprefix("file:") in mounted, uri
        assert gitea.environment[f"GITEA__security__{key}"] == ""
